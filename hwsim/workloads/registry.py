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

#: A run's output arrays by HBM tensor name -> (max abs error, within tolerance).
Check = Callable[[dict[str, np.ndarray]], tuple[float, bool]]


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
