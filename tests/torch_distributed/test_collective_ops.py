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


class _Collectives(nn.Module):
    """avg of bf16, avg of a coalesced pair, a broadcast from the last rank, a product."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        import torch.distributed._functional_collectives as funcol

        world = dist.group.WORLD
        if self.kind == "bf16":
            return [funcol.all_reduce(x * 1.0, "avg", world)]
        if self.kind == "coalesced":
            return funcol.all_reduce_coalesced([x * 1.0, x[:3] * 2.0], "avg", world)
        if self.kind == "broadcast":
            return [funcol.broadcast(x * 1.0, N - 1, world)]
        return [funcol.all_reduce(x * 1.0, "product", world)]


def _run(kind: str, dtype: torch.dtype = torch.float32) -> list[tuple[list, object, dict]]:
    def run(rank: int) -> tuple[list[torch.Tensor], object, dict]:
        compiled = torch.compile(_Collectives(kind), backend="hwsim", options=COMPILE)
        with torch.no_grad():
            outs = compiled(_inputs(rank, dtype))
        return outs, current_clock(), hwsim.bridge.last_report()

    return run_threads(run, N, timeout_s=120)


def _assert_timed(clock: object, kinds_and_bytes: list[tuple[str, int]]) -> None:
    model = CostModel.for_config(load_config("trn2"))
    got = [(c.kind, c.nbytes) for c in clock.collectives]
    assert got == kinds_and_bytes
    for c in clock.collectives:
        cost = model.collectives.of(c.kind, c.nbytes, tuple(range(N)))
        assert c.end_tick - c.start_tick == model.timebase.ns_to_ticks(cost.duration_ns)


def test_avg_of_bf16_is_the_eager_backends_rounded_once_quotient_on_bf16_bytes():
    """The exact fp32 sum, one fp32 division, one rounding to bf16 (eager's), with the
    message the bf16 bytes; rounding the sum to bf16 first would differ in some elements."""
    results = _run("bf16", torch.bfloat16)
    wide = sum(_inputs(r, torch.bfloat16).float() for r in range(N))
    want = (wide / N).to(torch.bfloat16)
    twice = (wide.to(torch.bfloat16).float() / N).to(torch.bfloat16)
    assert not torch.equal(want, twice)  # the case tells the two apart
    for [out], clock, report in results:
        assert out.dtype == torch.bfloat16 and torch.equal(out, want)
        assert not report.fallbacks()
        _assert_timed(clock, [("all_reduce", 48 * 32 * 2)])


def test_avg_of_a_coalesced_pair_is_each_tensors_eager_avg():
    results = _run("coalesced")
    want = torch.from_numpy(_eager_avg())
    for [whole, part], clock, report in results:
        assert torch.equal(whole, want)
        parts = sum(_inputs(r)[:3] * 2.0 for r in range(N))  # fp32 in rank order
        assert torch.equal(part, parts / N)
        assert not report.fallbacks()
        _assert_timed(clock, [("all_reduce", 48 * 32 * 4), ("all_reduce", 3 * 32 * 4)])


def test_broadcast_in_a_graph_gives_every_rank_the_roots_tensor_at_its_cost():
    results = _run("broadcast")
    for [out], clock, report in results:
        assert torch.equal(out, _inputs(N - 1))
        assert not report.fallbacks()
        _assert_timed(clock, [("broadcast", 48 * 32 * 4)])


def test_product_is_refused_with_the_reason():
    """The collective engines reduce with add, max and min; no product to lower to."""
    with pytest.raises(Exception, match=r"FallbackError.*reduce op 'product'.*add, max and min"):
        _run("product")


def _uneven(rank: int) -> tuple[torch.Tensor, object]:
    """Rank r sends r + j + 1 rows to rank j, each row (r, j, k)."""
    sends = [rank + j + 1 for j in range(N)]
    rows = [torch.tensor([[rank, j, k] for k in range(sends[j])]) for j in range(N)]
    received = [r + rank + 1 for r in range(N)]
    out = torch.zeros(sum(received), 3, dtype=torch.int64)
    dist.all_to_all_single(out, torch.cat(rows), received, sends)
    return out, current_clock()


def test_uneven_all_to_all_moves_each_ranks_rows_timed_by_the_largest_chunk():
    """What MoE dispatch runs: exact rows, and the time of the even all-to-all whose chunk is
    the largest any rank sends (every step waits for its slowest transfer)."""
    results = run_threads(_uneven, N)
    model = CostModel.for_config(load_config("trn2"))
    largest = 2 * N - 1  # rank N - 1 to rank N - 1
    cost = model.collectives.of("all_to_all", N * largest * 3 * 8, tuple(range(N)))
    for rank, (out, clock) in enumerate(results):
        want = [[r, rank, k] for r in range(N) for k in range(r + rank + 1)]
        assert out.tolist() == want
        [moved] = clock.collectives
        assert moved.end_tick - moved.start_tick == model.timebase.ns_to_ticks(cost.duration_ns)


def _mismatched_splits(rank: int) -> None:
    out = torch.zeros(N + 1)
    dist.all_to_all_single(out, torch.zeros(N + 1), [2] + [1] * (N - 1), [1] * (N - 1) + [2])


def test_uneven_all_to_all_with_splits_that_disagree_is_refused():
    with pytest.raises(Exception, match="output_split_sizes must match the senders'"):
        run_threads(_mismatched_splits, N, timeout_s=60)
