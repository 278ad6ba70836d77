"""What a sweep runs: a spec's ``workloads`` entries, resolved by ``hwsim.workloads.resolve``.

Entries are spelled as for ``hwsim run`` (``gemm:MxKxN[:dtype]``, a library kernel name,
``FILE.py:NAME``, ``FILE.hwprog``), with paths relative to the spec file. A saved program is
simulated as saved on every config it is compatible with (``hwsim.workloads.saved``).

A ``SweepWorkload`` is plain data, so it travels to workers; each worker resolves it once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hwsim.config.schema import HardwareConfig
from hwsim.errors import WorkloadError
from hwsim.program import Program
from hwsim.workloads import resolve
from hwsim.workloads.bounds import check_hbm_fits
from hwsim.workloads.registry import Check
from hwsim.workloads.resolve import Kind, WorkloadRef, load_workload

__all__ = ["SweepWorkload", "check_workloads_fit", "parse_workload"]


@dataclass(frozen=True)
class SweepWorkload:
    """``key``: the results database's workload column; ``ref``: what the spec's entry names."""

    key: str
    text: str
    ref: WorkloadRef

    @property
    def kind(self) -> Kind:
        return self.ref.kind

    def build(self, config: HardwareConfig, numerics: bool) -> Program:
        """The program for ``config``; timing-only builds skip making input data where the
        workload can (``Workload.build_timing``)."""
        return load_workload(self.ref).program(config, numerics)

    def check(self) -> Check | None:
        """The workload's numerics check (max abs error, ok), if it has one."""
        return load_workload(self.ref).check


def parse_workload(text: str, base_dir: Path) -> SweepWorkload:
    """Check a spec's workload entry and say what it is (raises ``WorkloadError`` with why).
    A ``FILE.py:NAME`` entry is imported now, a ``FILE.hwprog`` read and checked (which runs no
    code): a missing NAME or a corrupted file is a spec error, not 100 failed runs."""
    ref = resolve.parse_workload(text.strip(), base_dir)
    if ref.kind in ("file", "program"):  # a corrupted saved program too: one line, no runs
        load_workload(ref)
    return SweepWorkload(ref.name, ref.text, ref)


def check_workloads_fit(
    workloads: Iterable[SweepWorkload], configs: Iterable[tuple[str, HardwareConfig]]
) -> list[str]:
    """One error per workload whose shapes exceed the HBM of a config (``(label, config)``)
    of the sweep, naming the first such config: found before anything is allocated or run."""
    errors = []
    configs = list(configs)
    for workload in workloads:
        need = workload.ref.hbm_bytes
        if need is None:
            continue
        for label, config in configs:
            try:
                check_hbm_fits(need, config, workload.text)
            except WorkloadError as exc:
                errors.append(f"{label}: {exc}")
                break
    return errors
