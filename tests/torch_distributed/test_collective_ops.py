"""Reduce ops of collectives inside compiled graphs beyond sum, max and min: values exactly as
the eager "hwsim" backend computes them, the collective timed by the cost model's rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch import nn

import hwsim.bridge
from hwsim.bridge.distributed.clock import current_clock
from hwsim.bridge.distributed.threads import run_threads
from hwsim.config import load_config
from hwsim.cost import CostModel

COMPILE = {"fallback": "error", "auto_cast": "none"}
N = 3  # a size whose reciprocal is inexact: a multiply by 1/3 would differ from a division


class _Averaged(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import torch.distributed._functional_collectives as funcol

        if self.kind == "all_reduce":
            return funcol.all_reduce(x * 1.0, "avg", dist.group.WORLD)
        return funcol.reduce_scatter_tensor(x * 1.0, "avg", 0, dist.group.WORLD)


def _inputs(rank: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(48, 32, generator=torch.Generator().manual_seed(rank)).to(dtype)


def _eager_avg() -> np.ndarray:
    """The eager backend's avg: fp32 sum in rank order, then one division by the size."""
    total = _inputs(0).numpy().copy()
    for rank in range(1, N):
        total += _inputs(rank).numpy()
    return total / np.float32(N)


@pytest.mark.parametrize("kind", ["all_reduce", "reduce_scatter"])
def test_avg_is_the_eager_backends_quotient_bit_for_bit_and_the_collective_its_cost(kind):
    def run(rank: int) -> tuple[torch.Tensor, object, dict]:
        compiled = torch.compile(_Averaged(kind), backend="hwsim", options=COMPILE)
        with torch.no_grad():
            out = compiled(_inputs(rank))
        return out, current_clock(), hwsim.bridge.last_report()

    results = run_threads(run, N)
    want = _eager_avg()
    rows = 48 // N
    model = CostModel.for_config(load_config("trn2"))
    nbytes = 48 * 32 * 4 // (1 if kind == "all_reduce" else N)  # reduce-scatter: each share
    cost = model.collectives.of(kind, nbytes, tuple(range(N)))
    for rank, (out, clock, report) in enumerate(results):
        expected = want if kind == "all_reduce" else want[rank * rows : (rank + 1) * rows]
        assert np.array_equal(out.numpy(), expected)
        assert not report.fallbacks()
        [reduce] = clock.collectives
        [graph] = clock.computes
        assert reduce.kind == kind and reduce.nbytes == nbytes
        assert reduce.end_tick - reduce.start_tick == model.timebase.ns_to_ticks(cost.duration_ns)
        assert reduce.end_tick < graph.end_tick  # the division reads the sum after it
    assert len({(c.start_tick, c.end_tick) for _, k, _ in results for c in k.collectives}) == 1


def _narrow_avg(rank: int) -> None:
    compiled = torch.compile(_Averaged("all_reduce"), backend="hwsim", options=COMPILE)
    compiled(_inputs(rank, torch.bfloat16))


def test_avg_of_bf16_is_refused_with_the_reason():
    """A bf16 result would be rounded twice (the sum, then the quotient); eager rounds once."""
    with pytest.raises(Exception, match=r"FallbackError.*reduce op 'avg' of \['torch.bfloat16'\]"):
        run_threads(_narrow_avg, 2, timeout_s=60)
