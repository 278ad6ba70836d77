"""The workload type: what a workload string resolves to (``hwsim.workloads.resolve``), i.e. what
to build for a config and how to check the outputs of a run.

Every form (``gemm:``, library kernels, ``FILE.py:NAME``, saved programs, torch models through
the bridge's plugin) makes one of these; ``hwsim run``, sweeps and benchmarks only see this type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hwsim.config.schema import HardwareConfig
from hwsim.program import Program
from hwsim.workloads.bounds import check_hbm_fits, program_hbm_bytes


@dataclass(frozen=True)
class NumericsVerdict:
    """How a run's outputs compare with a reference: the largest absolute error, whether every
    value is within its tolerance, and the tolerance the verdict was judged at (the allowed
    absolute error; for a per-element rule, the bound at the element nearest to or furthest past
    it), so a report can print the error beside what it was allowed to be."""

    max_abs_err: float
    ok: bool
    tolerance: float


def combined_verdict(verdicts: list[NumericsVerdict]) -> NumericsVerdict:
    """One verdict over several outputs: the largest error, all within, and the tolerance of
    the output nearest to (or furthest past) its own."""
    if not verdicts:
        return NumericsVerdict(0.0, True, 0.0)
    worst = max(verdicts, key=_error_over_tolerance)
    largest = max(v.max_abs_err for v in verdicts)
    return NumericsVerdict(largest, all(v.ok for v in verdicts), worst.tolerance)


def _error_over_tolerance(verdict: NumericsVerdict) -> float:
    if verdict.tolerance > 0:
        return verdict.max_abs_err / verdict.tolerance
    return 0.0 if verdict.max_abs_err == 0 else float("inf")


#: A run's output arrays by HBM tensor name -> the verdict.
Check = Callable[[dict[str, np.ndarray]], NumericsVerdict]


@dataclass(frozen=True)
class Workload:
    """A runnable workload.

    ``build(config)`` makes the program with its input values; ``check(outputs)`` compares a
    run's outputs with a reference (None: nothing to compare with). ``build_timing(config)``, if
    given, makes the same instructions from shapes alone, for timing-only runs. ``hbm_bytes``:
    what the workload's HBM tensors need, when its shapes tell before anything is built (sweeps
    check it against every config of a spec up front).
    """

    name: str
    description: str
    build: Callable[[HardwareConfig], Program]
    check: Check | None = None
    build_timing: Callable[[HardwareConfig], Program] | None = None
    hbm_bytes: int | None = None

    def program(self, config: HardwareConfig, numerics: bool = True) -> Program:
        """The program to simulate on ``config``: refused with a one-line ``WorkloadError`` if
        its shapes, or the built program's tensors, exceed the config's HBM (before the
        simulator allocates them)."""
        if self.hbm_bytes is not None:
            check_hbm_fits(self.hbm_bytes, config, self.name)
        build = self.build if numerics or self.build_timing is None else self.build_timing
        program = build(config)
        check_hbm_fits(program_hbm_bytes(program), config, self.name)
        return program
