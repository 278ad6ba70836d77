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
from typing import Any

from hwsim.config.schema import HardwareConfig
from hwsim.errors import WorkloadError
from hwsim.program import Program
from hwsim.workloads import resolve
from hwsim.workloads.bounds import check_hbm_fits
from hwsim.workloads.registry import Check
from hwsim.workloads.resolve import Kind, WorkloadRef, load_workload
from hwsim.workloads.static_names import check_defines

__all__ = ["SweepWorkload", "check_runnable", "check_workloads_fit", "parse_workload"]


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
    A ``FILE.hwprog`` is read and checked now (which runs no code), and a ``FILE.py:NAME`` read
    as text (``hwsim.workloads.static_names``): a missing NAME or a corrupted file is a spec
    error, not 100 failed runs. The spec is data: nothing is imported until the runs execute
    (``check_runnable``)."""
    ref = resolve.parse_workload(text.strip(), base_dir)
    if ref.kind == "program":  # a corrupted saved program: one line, no runs
        load_workload(ref)
    elif ref.kind == "file":
        check_defines(Path(ref.path), ref.attribute, ref.text)
    return SweepWorkload(ref.name, ref.text, ref)


def check_runnable(workloads: Iterable[SweepWorkload]) -> None:
    """Import the ``FILE.py`` workloads (running their code, by design) and check each names a
    workload: called when the runs execute, before any is handed out, so a file that does not
    import or a NAME that is not a workload is one line, not one failed run per config."""
    for workload in workloads:
        if workload.kind == "file":
            load_workload(workload.ref)


def check_workloads_fit(
    workloads: Iterable[SweepWorkload], configs: Iterable[tuple[dict[str, Any], HardwareConfig]]
) -> list[str]:
    """One error per workload whose shapes exceed the HBM of a config (``(point, config)``)
    of the sweep, naming the first such point: found before anything is allocated or run."""
    errors = []
    configs = list(configs)
    for workload in workloads:
        need = workload.ref.hbm_bytes
        if need is None:
            continue
        for point, config in configs:
            try:
                check_hbm_fits(need, config, workload.text)
            except WorkloadError as exc:
                label = ", ".join(f"{path}: {value!r}" for path, value in point.items())
                errors.append(f"point {{{label}}}: {exc}")
                break
    return errors
