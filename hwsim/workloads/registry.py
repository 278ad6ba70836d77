"""Workload registry: a workload builds a program for a config and may check its outputs.

Spellings: ``gemm:MxKxN[:dtype]``; the name of a registered kernel (``hwsim run --list``);
``FILE.hwprog``, a saved program (``hwsim.workloads.saved``, e.g. from ``hwsim export``).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hwsim.config.schema import HardwareConfig
from hwsim.errors import WorkloadError
from hwsim.program import Program


@dataclass(frozen=True)
class Workload:
    """name; build(config) -> Program; check(outputs) -> (max_abs_err, ok) or None if unchecked."""

    name: str
    description: str
    build: Callable[[HardwareConfig], Program]
    check: Callable[[dict[str, np.ndarray]], tuple[float, bool]] | None = None


_NAMED: dict[str, Callable[[], Workload]] = {}


def register_workload(name: str, factory: Callable[[], Workload]) -> None:
    if name in _NAMED:
        raise ValueError(f"workload '{name}' is already registered")
    _NAMED[name] = factory


def list_workloads() -> list[tuple[str, str]]:
    """(name or pattern, description) of every built-in workload."""
    import hwsim.library.workloads  # noqa: F401  (registers the library kernels)

    rows = [
        ("gemm:MxKxN[:dtype]", "C = A @ B with the blocked TensorE matmul kernel, checked vs numpy")
    ]
    rows += [(name, factory().description) for name, factory in sorted(_NAMED.items())]
    rows.append(("FILE.hwprog", "a saved program (hwsim export), checked vs its expected outputs"))
    return rows


def resolve_workload(text: str) -> Workload:
    import hwsim.library.workloads  # noqa: F401  (registers the library kernels)

    if text.startswith("gemm:"):
        from hwsim.workloads.gemm import GemmSpec, build_gemm, check_result

        spec = GemmSpec.parse(text)
        return Workload(
            spec.name,
            "blocked TensorE matmul",
            lambda config: build_gemm(spec, config),
            lambda outputs: check_result(spec, outputs["c"]),
        )
    if text in _NAMED:
        return _NAMED[text]()
    from hwsim.workloads.saved import PROGRAM_SUFFIX, saved_workload

    if text.endswith(PROGRAM_SUFFIX):
        return saved_workload(text)
    close = difflib.get_close_matches(text, [*_NAMED, "gemm:"], n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise WorkloadError(f"unknown workload '{text}'{hint}; see 'hwsim run --list'")
