"""DDP's bucket all-reduces overlap the backward graphs still to run, tick for tick: each is
issued when its bucket's backward graph ends, runs on the rank's collective engine while the
next backward graphs run on its compute engines, and the report's overlap, exposure and step
time are those intervals' intersections and extent."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import hwsim.bridge  # noqa: F401  (registers the backend)
from hwsim.bridge.distributed import api
from hwsim.bridge.distributed.clock import current_clock
from hwsim.bridge.distributed.threads import run_threads

COMPILE = {"fallback": "error", "auto_cast": "none"}
WIDTH = 512  # a 512 x 512 fp32 weight is DDP's 1 MiB bucket: one bucket per layer


class _Layers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(WIDTH, WIDTH) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def _intersection(a: tuple[int, int], b: tuple[int, int]) -> int:
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def test_ddp_bucket_all_reduces_overlap_the_remaining_backward_exactly():
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    base, n = _Layers(), 2
    x = torch.randn(2 * n, WIDTH, generator=torch.Generator().manual_seed(1))
    reference = copy.deepcopy(base)
    reference(x).square().mean().backward()

    def steps(rank: int) -> tuple[dict[str, torch.Tensor], dict[str, object], object]:
        model = copy.deepcopy(base)
        compiled = torch.compile(DDP(model, bucket_cap_mb=1), backend="hwsim", options=COMPILE)
        for _ in range(2):
            model.zero_grad()
            compiled(x[2 * rank : 2 * rank + 2]).square().mean().backward()
        return {k: p.grad for k, p in model.named_parameters()}, api.report(), current_clock()

    results = run_threads(steps, n)
    clocks = [clock for _, _, clock in results]
    params = sum(p.numel() * 4 for p in base.parameters())
    for grads, report, clock in results:
        for name, p in reference.named_parameters():  # the second step's gradients
            torch.testing.assert_close(grads[name], p.grad, rtol=1e-5, atol=1e-6)
        reduces = {s: [c for c in clock.collectives if c.kind == "all_reduce" and c.step == s]
                   for s in (0, 1)}  # fmt: skip
        # PyTorch's first step: every gradient in one bucket, after the whole backward
        [first] = reduces[0]
        assert first.nbytes == params
        assert first.arrival_tick == max(c.end_tick for c in clock.computes if c.step == 0)
        # the second step: the rebuilt buckets, one per layer, each issued as its graph ends
        graphs = [c for c in clock.computes if c.step == 1]
        backward_ends = {c.end_tick for c in graphs if c.phase == "backward"}
        assert len(reduces[1]) >= 2 and sum(c.nbytes for c in reduces[1]) == params
        comm_free = 0
        for c in reduces[1]:
            issued = max(t for t in backward_ends if t <= c.arrival_tick)
            assert c.arrival_tick == max(issued, comm_free)
            cost = clock.model.collectives.of("all_reduce", c.nbytes, (0, 1))
            assert c.end_tick == c.start_tick + clock.ns_to_ticks(cost.duration_ns)
            comm_free = c.end_tick
        assert reduces[1][0].end_tick < max(backward_ends)  # ran beside the backward
        # the report: intersections of the two engines' intervals, in ticks
        spans = [(c.start_tick, c.end_tick) for c in reduces[1]]
        computes = [(c.start_tick, c.end_tick) for c in graphs]
        overlap = sum(_intersection(a, g) for a in spans for g in computes)
        comm = sum(end - start for start, end in spans)
        step = report["steps"][1]
        ns = clock.ticks_to_ns
        assert overlap > 0 and step["collectives"] == len(spans)
        assert step["overlapped_ns"] == pytest.approx(ns(overlap), rel=1e-12, abs=0)
        assert step["communication_ns"] == pytest.approx(ns(comm), rel=1e-12, abs=0)
        assert step["exposed_ns"] == pytest.approx(ns(comm - overlap), rel=1e-12, abs=0)
        last = max(spans[-1][1], computes[-1][1])  # the longer of the two paths
        assert step["time_ns"] == pytest.approx(ns(last - computes[0][0]), rel=1e-12, abs=0)
        compute = sum(end - start for start, end in computes)
        assert step["time_ns"] == pytest.approx(ns(compute + comm - overlap), rel=1e-12, abs=0)
    ticks = [[(c.start_tick, c.end_tick) for c in clock.collectives] for clock in clocks]
    assert ticks[0] == ticks[1]  # both ranks agree on every collective
    for clock in clocks:  # a graph beside a running all-reduce waits for the HBM it takes
        # The same graphs run in each step, in the same order; dynamo may name them anew in the
        # second (DDP rebuilds its buckets after the first step, and the graphs are compiled
        # again), so a graph's step-0 run is the one at its place in the step, not its name.
        first, second = ([c for c in clock.computes if c.step == s] for s in (0, 1))
        assert [c.phase for c in first] == [c.phase for c in second]
        beside = [c for c in second if c.hbm_held]
        assert beside and all(c.phase == "backward" for c in beside)
        for before, c in zip(first, second, strict=True):
            # every all-reduce that had arrived when the graph began holds its part; one queued
            # then behind another may be held too (from its own start)
            held, known = set(c.hbm_held), _held(clock, c.start_tick, arrived_only=True)
            assert set(known) <= held <= set(_held(clock, c.start_tick))
            took, alone = c.end_tick - c.start_tick, before.end_tick - before.start_tick
            if c.hbm_held:  # the same graph ran alone in step 0
                assert took > alone
            else:
                assert took == alone


def _held(clock, start: int, arrived_only: bool = False) -> list[tuple[int, int]]:
    """By hand: each all-reduce still running at ``start`` holds its HBM bytes from its own
    start, or, begun before ``start``, the part its remaining time carries, from ``start``
    (``arrived_only``: only those that had arrived at the collective engine by ``start``)."""
    held = []
    for c in clock.collectives:
        cost = clock.model.collectives.of("all_reduce", c.nbytes, (0, 1))
        if arrived_only and c.arrival_tick > start:
            continue
        if c.end_tick > start and cost.hbm_bytes:
            if c.start_tick >= start:
                held.append((c.start_tick - start, cost.hbm_bytes))
            else:
                part = cost.hbm_bytes * (c.end_tick - start) // (c.end_tick - c.start_tick)
                held.append((0, part))
    return held
