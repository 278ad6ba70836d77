"""A list scheduler: the order to emit a recorded stream in, from its dependency graph and the
cost model.

It plays the program forward on an estimated machine: one in-order stream per engine and one
shared DMA resource (the DMA engines, which every full-width transfer uses). Whenever an engine
can start something, it takes, among the instructions whose predecessors are all placed and
whose inputs are ready by then, the one with the longest estimated path to the end of the
program (its *priority*); ties keep program order. The engine that can start earliest goes
first. Every item is placed only after all its predecessors, so the result is a topological
order of the graph, and each engine's stream a topological order of its instructions.

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

from hwsim.engines import engine_names
from hwsim.schedule.costs import Estimate
from hwsim.schedule.dag import AFTER, RAW, DependencyGraph

_NO_COST = Estimate(0, 0, 0)


def priorities(graph: DependencyGraph, estimates: Sequence[Estimate | None]) -> list[int]:
    """Per item: the estimated ticks from its start to the end of the program along its
    longest chain of successors (its own latency included)."""
    succs = graph.successors()
    longest = [0] * len(graph)
    for node in range(len(graph) - 1, -1, -1):  # program order is topological
        own = (estimates[node] or _NO_COST).latency_ticks
        longest[node] = own + max((longest[s] for s, _ in succs[node]), default=0)
    return longest


def list_schedule(graph: DependencyGraph, estimates: Sequence[Estimate | None]) -> list[int]:
    """The emission order of the graph's items (see the module docstring). ``estimates[i]`` is
    None exactly for the marks (items without an engine)."""
    count = len(graph)
    succs = graph.successors()
    priority = priorities(graph, estimates)
    waiting = [len(preds) for preds in graph.preds]
    ready_tick = [0] * count
    start_tick = [0] * count
    done_tick = [0] * count
    rank = {name: i for i, name in enumerate(engine_names())}
    engines = sorted({e for e in graph.engines if e is not None}, key=lambda e: rank.get(e, 99))
    free_tick = dict.fromkeys(engines, 0)
    # Per engine: released items not yet ready at the engine's next start, by ready tick; and
    # those ready by then, by priority. Heap entries end with the item index: deterministic.
    pending: dict[str, list[tuple[int, int, int]]] = {e: [] for e in engines}
    ready: dict[str, list[tuple[int, int]]] = {e: [] for e in engines}
    marks: list[int] = []
    dma_free_tick = 0
    order: list[int] = []

    def release(node: int) -> None:
        engine = graph.engines[node]
        if engine is None:
            heapq.heappush(marks, node)
        else:
            heapq.heappush(pending[engine], (ready_tick[node], -priority[node], node))

    def place(node: int, start: int, done: int) -> None:
        start_tick[node], done_tick[node] = start, done
        order.append(node)
        engine = graph.engines[node]
        estimate = estimates[node]
        for succ, kind in succs[node]:
            same = engine is not None and graph.engines[succ] == engine
            if kind == RAW:
                tick = start + estimate.chain_ticks if same and estimate is not None else done
            elif kind == AFTER:
                tick = start if same else done
            else:
                tick = start
            if tick > ready_tick[succ]:
                ready_tick[succ] = tick
            waiting[succ] -= 1
            if not waiting[succ]:
                release(succ)

    for node in range(count):
        if not waiting[node]:
            release(node)
    while len(order) < count:
        if marks:
            node = heapq.heappop(marks)
            place(node, ready_tick[node], ready_tick[node])
            continue
        best: tuple[int, int, str] | None = None
        for engine in engines:
            if ready[engine]:
                tick = free_tick[engine]
            elif pending[engine]:
                tick = max(free_tick[engine], pending[engine][0][0])
            else:
                continue
            if best is None or tick < best[0]:
                best = (tick, rank.get(engine, 99), engine)
        if best is None:
            raise AssertionError("dependency graph has a cycle")  # edges only go forward
        tick, _, engine = best
        waiting_here, ready_here = pending[engine], ready[engine]
        while waiting_here and waiting_here[0][0] <= tick:
            _, key, node = heapq.heappop(waiting_here)
            heapq.heappush(ready_here, (key, node))
        _, node = heapq.heappop(ready_here)
        estimate = estimates[node]
        assert estimate is not None
        free_tick[engine] = tick + estimate.issue_ticks
        if estimate.transfer_ticks:
            begin = max(tick + estimate.transfer_delay_ticks, dma_free_tick)
            dma_free_tick = begin + estimate.transfer_ticks
            place(node, tick, max(tick + estimate.issue_ticks, dma_free_tick))
        else:
            place(node, tick, tick + estimate.latency_ticks)
    return order
