"""What a sweep runs: built-in workloads, kernels in a Python file, and saved programs.

A spec's ``workloads`` entries are spelled as for ``hwsim run`` (``gemm:MxKxN[:dtype]``, a library
kernel name), or ``FILE.py:NAME`` (NAME a ``Workload``, a library workload, or a function
``config -> Program``), or ``FILE.hwprog`` (a program saved by ``save_program``, e.g. lowered once
from torch by ``hwsim export``: it is simulated as saved on every config it is compatible with,
see ``hwsim.workloads.saved``). Paths are relative to the spec file.

A ``SweepWorkload`` is plain data, so it travels to workers; each worker resolves it once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from hwsim.config.schema import HardwareConfig
from hwsim.errors import WorkloadError
from hwsim.program import Program
from hwsim.workloads.pyfile import import_python_file
from hwsim.workloads.registry import Workload, resolve_workload
from hwsim.workloads.saved import PROGRAM_SUFFIX, load_program, save_program, saved_workload

__all__ = ["PROGRAM_SUFFIX", "SweepWorkload", "load_program", "parse_workload", "save_program"]
Kind = Literal["gemm", "builtin", "file", "program"]


@dataclass(frozen=True)
class SweepWorkload:
    """``key``: the results database's workload column; ``text``: as written in the spec."""

    key: str
    text: str
    kind: Kind
    path: str = ""  # absolute, for the 'file' and 'program' kinds
    attribute: str = ""  # NAME of FILE.py:NAME

    def build(self, config: HardwareConfig, numerics: bool) -> Program:
        """The program for ``config``; timing-only gemm builds skip making the input data."""
        if self.kind == "gemm" and not numerics:
            return _gemm_without_data(self.key, config)
        return _resolve(self).build(config)

    def check(self) -> Callable[[dict[str, np.ndarray]], tuple[float, bool]] | None:
        """The workload's numerics check (max abs error, ok), if it has one."""
        return _resolve(self).check


def parse_workload(text: str, base_dir: Path) -> SweepWorkload:
    """Check a spec's workload entry and say what it is (raises ``WorkloadError`` with why)."""
    text = text.strip()
    if text.endswith(PROGRAM_SUFFIX):
        path = _existing(base_dir, text, "saved program")
        return SweepWorkload(text, text, "program", str(path))
    if ".py:" in text:
        file, _, attribute = text.rpartition(":")
        path = _existing(base_dir, file, "workload file")
        workload = SweepWorkload(text, text, "file", str(path), attribute)
        _resolve(workload)  # import now: a missing NAME is a spec error, not 100 failed runs
        return workload
    resolved = resolve_workload(text)  # raises with a did-you-mean
    kind: Kind = "gemm" if text.startswith("gemm:") else "builtin"
    return SweepWorkload(resolved.name, text, kind)


def _existing(base_dir: Path, text: str, what: str) -> Path:
    path = Path(text).expanduser()
    path = path if path.is_absolute() else base_dir / path
    if not path.is_file():
        raise WorkloadError(f"{what} '{text}' not found (looked for {path})")
    return path.resolve()


@functools.cache
def _resolve(workload: SweepWorkload) -> Workload:
    """The runnable workload, once per process."""
    if workload.kind == "program":
        return saved_workload(workload.path, workload.key)
    if workload.kind == "file":
        return _from_file(Path(workload.path), workload.attribute, workload.text)
    return resolve_workload(workload.text)


def _from_file(path: Path, attribute: str, text: str) -> Workload:
    module = import_python_file(path, "hwsim_sweep_workload", text)
    found = getattr(module, attribute, None)
    if found is None:
        names = [n for n in vars(module) if not n.startswith("_")]
        raise WorkloadError(f"{text}: {path.name} defines no '{attribute}' (it has {names})")
    if isinstance(found, Workload):
        return found
    as_workload = getattr(found, "workload", None)  # a hwsim.library.workloads.LibraryWorkload
    if callable(as_workload) and not isinstance(found, type):
        made = as_workload()
        if isinstance(made, Workload):
            return made
    if callable(found):
        return Workload(text, f"{attribute} from {path.name}", found)
    raise WorkloadError(
        f"{text}: '{attribute}' is a {type(found).__name__}; expected a Workload or a function "
        "taking a HardwareConfig and returning a Program"
    )


def _gemm_without_data(name: str, config: HardwareConfig) -> Program:
    """The gemm workload's program built from shapes alone (timing-only: no input values)."""
    from hwsim.lang import TensorSpec
    from hwsim.workloads.gemm import GemmSpec, gemm_blocking, gemm_kernel

    spec = GemmSpec.parse(name)
    a = TensorSpec((spec.m, spec.k), spec.dtype.name)
    b = TensorSpec((spec.k, spec.n), spec.dtype.name)
    program = gemm_kernel.build(a, b, gemm_blocking(spec, config), config=config).program
    program.meta.update(workload=spec.name, model_flops=spec.flops)
    return program
