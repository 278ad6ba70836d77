"""A list scheduler: the order to emit a recorded stream in, from its dependency graph and the
cost model.

It plays the program forward on an estimated machine (``_Machine``): one in-order stream per
engine and one shared DMA resource (the DMA engines, which every full-width transfer uses).
Whenever an engine can start something, it takes, among the instructions whose predecessors are
all placed and whose inputs are ready by then, the one with the longest estimated path to the end
of the program (its *priority*); ties keep program order. The engine that can start earliest
goes first. Every item is placed only after all its predecessors, so the result is a topological
order of the graph, and each engine's stream a topological order of its instructions.

The same machine also times a given order (``estimate_order``): the scheduler's result is kept
only if it is estimated faster than program order, so a schedule never trades a known order for
an estimated loss.

When an item becomes ready (``hwsim.schedule.dag`` edge kinds):

- RAW: when its producer's results are visible (a same-engine producer: ``chain_ticks`` after
  its start, the engine streams the consumer behind it);
- AFTER: when the earlier access is done (on the same engine: when it started, the stream is
  in order);
- ORDER: when the earlier item started.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from hwsim.cost import Estimate
from hwsim.engines import engine_names
from hwsim.schedule.dag import AFTER, ORDER, RAW, DependencyGraph

_NO_COST = Estimate(0, 0, 0)


def _edge_ticks(estimate: Estimate, kind: int, same_engine: bool) -> int:
    """Ticks from an item's start until a successor joined by ``kind`` may start."""
    if kind == RAW:
        return estimate.chain_ticks if same_engine else estimate.latency_ticks
    if kind == AFTER:
        return 0 if same_engine else estimate.latency_ticks
    return 0


def priorities(graph: DependencyGraph, estimates: Sequence[Estimate | None]) -> list[int]:
    """Per item: the estimated ticks from its start to the end of the program along its longest
    chain of successors (edges weighted as the machine times them; its own latency at least)."""
    succs = graph.successors()
    engines = graph.engines
    longest = [0] * len(graph)
    for node in range(len(graph) - 1, -1, -1):  # program order is topological
        estimate = estimates[node] or _NO_COST
        engine = engines[node]
        best = estimate.latency_ticks
        for succ, kind in succs[node]:
            same = engine is not None and engines[succ] == engine
            path = _edge_ticks(estimate, kind, same) + longest[succ]
            if path > best:
                best = path
        longest[node] = best
    return longest


class _Machine:
    """The estimated machine: when each engine and the DMA resource are next free, and when each
    placed item started and finished."""

    def __init__(self, graph: DependencyGraph, estimates: Sequence[Estimate | None]) -> None:
        self.graph, self.estimates = graph, estimates
        self.succs = graph.successors()
        self.waiting = [len(preds) for preds in graph.preds]
        self.ready_tick = [0] * len(graph)
        rank = {name: i for i, name in enumerate(engine_names())}
        self.engines = sorted(
            {e for e in graph.engines if e is not None}, key=lambda e: rank.get(e, len(rank))
        )
        self.free_tick = dict.fromkeys(self.engines, 0)
        self.dma_free_tick = 0
        self.end_tick = 0
        self.order: list[int] = []

    def start(self, node: int, tick: int) -> list[int]:
        """Place ``node`` at ``tick``; returns the items this released (all predecessors placed)."""
        engine = self.graph.engines[node]
        estimate = self.estimates[node] or _NO_COST
        done = tick + estimate.latency_ticks
        if engine is not None:
            self.free_tick[engine] = tick + estimate.issue_ticks
        if estimate.transfer_ticks:
            begin = max(tick + estimate.transfer_delay_ticks, self.dma_free_tick)
            self.dma_free_tick = begin + estimate.transfer_ticks
            done = max(tick + estimate.issue_ticks, self.dma_free_tick)
        self.end_tick = max(self.end_tick, done)
        self.order.append(node)
        released = []
        for succ, kind in self.succs[node]:
            same = engine is not None and self.graph.engines[succ] == engine
            if kind == RAW and same:
                ready = tick + estimate.chain_ticks
            elif kind == ORDER or same:
                ready = tick
            else:
                ready = done
            if ready > self.ready_tick[succ]:
                self.ready_tick[succ] = ready
            self.waiting[succ] -= 1
            if not self.waiting[succ]:
                released.append(succ)
        return released


def list_schedule(
    graph: DependencyGraph, estimates: Sequence[Estimate | None], *, lookahead: bool = False
) -> tuple[list[int], int]:
    """(the emission order of the graph's items, its estimated end tick); see the module
    docstring. ``estimates[i]`` is None exactly for the marks (items without an engine).

    lookahead: an engine about to start an item waits instead for a higher-priority one that
    becomes ready before that item would have left the engine (worth it when issue intervals
    are long, e.g. software-DGE DMA triggers, which hold GpSimdE for each descriptor).
    """
    machine = _Machine(graph, estimates)
    priority = priorities(graph, estimates)
    ready_tick = machine.ready_tick
    # Per engine: released items not yet ready at the engine's next start, by ready tick; and
    # those ready by then, by priority. Heap entries end with the item index: deterministic.
    pending: dict[str, list[tuple[int, int, int]]] = {e: [] for e in machine.engines}
    ready: dict[str, list[tuple[int, int]]] = {e: [] for e in machine.engines}
    marks: list[int] = []

    def release(nodes: Sequence[int]) -> None:
        for node in nodes:
            engine = graph.engines[node]
            if engine is None:
                heapq.heappush(marks, node)
            else:
                heapq.heappush(pending[engine], (ready_tick[node], -priority[node], node))

    release([node for node in range(len(graph)) if not machine.waiting[node]])
    while len(machine.order) < len(graph):
        if marks:
            node = heapq.heappop(marks)
            release(machine.start(node, ready_tick[node]))
            continue
        best: tuple[int, str] | None = None
        for engine in machine.engines:  # in registry order: ties go to the first
            if ready[engine]:
                tick = machine.free_tick[engine]
            elif pending[engine]:
                tick = max(machine.free_tick[engine], pending[engine][0][0])
            else:
                continue
            if best is None or tick < best[0]:
                best = (tick, engine)
        if best is None:
            raise AssertionError("dependency graph has a cycle")  # edges only go forward
        tick, engine = best
        waiting_here, ready_here = pending[engine], ready[engine]
        while waiting_here and waiting_here[0][0] <= tick:
            _, key, node = heapq.heappop(waiting_here)
            heapq.heappush(ready_here, (key, node))
        key, node = heapq.heappop(ready_here)
        if lookahead and waiting_here:
            later = _better_soon(
                waiting_here, key, tick + (estimates[node] or _NO_COST).issue_ticks
            )
            if later is not None:  # idle until it is ready, then choose again
                heapq.heappush(ready_here, (key, node))
                machine.free_tick[engine] = later
                continue
        release(machine.start(node, tick))
    return machine.order, machine.end_tick


def _better_soon(pending: list[tuple[int, int, int]], key: int, before: int) -> int | None:
    """The ready tick of the highest-priority pending item that becomes ready before ``before``,
    if its priority beats ``key``'s (heap keys: negated priorities); None otherwise."""
    soon = []
    while pending and pending[0][0] < before:
        soon.append(heapq.heappop(pending))
    for entry in soon:
        heapq.heappush(pending, entry)
    best = min(soon, key=lambda entry: (entry[1], entry[2]), default=None)
    return best[0] if best is not None and best[1] < key else None


def estimate_order(
    graph: DependencyGraph, estimates: Sequence[Estimate | None], order: Sequence[int]
) -> int:
    """The estimated end tick of emitting the items in ``order`` (a topological order): each
    engine runs its items in that order, each as soon as its engine and inputs allow."""
    machine = _Machine(graph, estimates)
    streams: dict[str | None, list[int]] = {}
    for node in order:
        streams.setdefault(graph.engines[node], []).append(node)
    nexts = dict.fromkeys(streams, 0)
    released = [not waiting for waiting in machine.waiting]
    while len(machine.order) < len(graph):
        best: tuple[int, int, str | None] | None = None
        for rank, (engine, stream) in enumerate(streams.items()):
            at = nexts[engine]
            if at == len(stream) or not released[stream[at]]:
                continue
            node = stream[at]
            tick = machine.ready_tick[node]
            if engine is not None:
                tick = max(tick, machine.free_tick[engine])
            if best is None or (tick, rank) < best[:2]:
                best = (tick, rank, engine)
        if best is None:
            raise AssertionError("order is not a topological order of the graph")
        tick, _, engine = best
        node = streams[engine][nexts[engine]]
        nexts[engine] += 1
        for succ in machine.start(node, tick):
            released[succ] = True
    return machine.end_tick
