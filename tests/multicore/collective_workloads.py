"""A multi-core workload a sweep names as ``collective_workloads.py:all_reduce_4``: one all-reduce
of a [32, 16] fp32 buffer over 4 ranks, one core each (on ``tiny``, one core a chip: a ring of
the 4 chips of its instance)."""

from __future__ import annotations

import numpy as np

from hwsim import lang
from hwsim.chip import spmd
from hwsim.config import HardwareConfig
from hwsim.lang import isa as nisa
from hwsim.program import Program

RANKS = 4


@lang.kernel
def _rank(x, rank):  # type: ignore[no-untyped-def]
    out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="y")
    nisa.collective("all_reduce", out, x, group=tuple(range(RANKS)), rank=rank)
    return out


def all_reduce_4(config: HardwareConfig) -> Program:
    def build(rank: int) -> Program:
        x = np.full((32, 16), rank + 1.0, np.float32)
        return _rank.build(x, rank, config=config).program

    return spmd(build, RANKS)
