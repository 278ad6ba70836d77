"""The critical path of a run, from the trace alone (the verdict built on it: ``verdict``)."""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import numpy as np

from hwsim.trace.analysis import (
    DMA_SOURCE,
    Dependencies,
    engine_codes,
    engine_of_code,
    int_column,
    semaphore_waits,
)
from hwsim.trace.array_ops import sums_in_order_met
from hwsim.trace.facts import facts_memo
from hwsim.trace.groups import TraceGroups
from hwsim.trace.records import Trace
from hwsim.trace.summary import CriticalPathStats


class CriticalStep(NamedTuple):
    """One link of the critical path, latest first.

    kind: 'instruction' or 'dma' (a whole DMA transfer); resource: engine name or 'dma'.
    share_ticks: the part of the run this link accounts for (from its predecessor's release of it
    to its own release of the next link), so the shares sum to the run time.
    """

    kind: str
    resource: str
    core: int
    engine: str
    pc: int
    start_tick: int
    end_tick: int
    share_ticks: int


def critical_path(
    trace: Trace, *, deps: Dependencies | None = None, binding: np.ndarray | None = None
) -> list[CriticalStep]:
    """The chain of records that determined the end of the run, latest first.

    Start from the record that finishes last (instruction done or DMA piece end) and walk back
    through whichever predecessor delayed each link:

    - an instruction that started as soon as its engine reached it (start == ready) was delayed by
      the previous instruction on the same engine; one that waited was released by the semaphore
      update that met its wait last, so its predecessor is that update's signaller (an
      instruction, or a DMA transfer for queue completions);
    - a DMA transfer whose last piece waited for its DMA engine was delayed by the transfer of the
      piece before it on that engine; otherwise by its triggering instruction.

    Each link's share is the time from its predecessor's release of it to its own release of the
    next link, so the shares add up to the run time (time before the first link is 'startup').
    """
    path = _walk(trace, deps, binding)
    if path is None:
        return []
    on, links, transfer = path.on, path.links, path.on >= len(trace.instructions)
    kinds = np.where(transfer, "dma", "instruction").tolist()
    core = links.core[on].tolist()
    engine = [engine_of_code(c) for c in links.engine[on].tolist()]
    resource = [DMA_SOURCE if t else e for t, e in zip(transfer.tolist(), engine, strict=True)]
    steps = list(
        map(
            _new_step,
            zip(
                kinds, resource, core, engine, links.pc[on].tolist(), links.first[on].tolist(),
                links.last[on].tolist(), path.share.tolist(), strict=True,
            ),
        )
    )  # fmt: skip
    if path.startup_ticks:
        ticks = path.startup_ticks
        steps.append(_new_step(("startup", "startup", core[-1], "", -1, 0, ticks, ticks)))
    return steps


class CriticalColumns(NamedTuple):
    """The critical path as columns, earliest link first (the startup, if any, is link 0):
    ``resource`` an engine code, -1 for a DMA transfer, -2 for the startup; [begin, end) the
    link's share of the run (they tile it); start/last the record's own ticks."""

    core: np.ndarray
    resource: np.ndarray
    pc: np.ndarray
    start_tick: np.ndarray
    last_tick: np.ndarray
    begin_tick: np.ndarray
    end_tick: np.ndarray


def critical_path_columns(trace: Trace, deps: Dependencies) -> CriticalColumns:
    """``critical_path`` as arrays (no step tuples: a million-record trace's path is long)."""
    path = _walk(trace, deps, None)
    if path is None:
        empty = np.zeros(0, np.int64)
        return CriticalColumns(*([empty] * 7))
    on, links = path.on[::-1], path.links
    resource = np.where(on >= len(trace.instructions), -1, links.engine[on])
    share = path.share[::-1]
    end = path.startup_ticks + np.cumsum(share)
    columns = [links.core[on], resource, links.pc[on], links.first[on], links.last[on],
               end - share, end]  # fmt: skip
    if path.startup_ticks:
        head = [columns[0][:1], [-2], [-1], [0], [path.startup_ticks], [0], [path.startup_ticks]]
        columns = [
            np.concatenate([np.asarray(h, np.int64), c]) for h, c in zip(head, columns, strict=True)
        ]
    return CriticalColumns(*columns)


class _Path(NamedTuple):
    """The critical path as node indices (``_Links``), latest first, with each one's share and
    the startup ticks before its first link (0: no startup step)."""

    on: np.ndarray
    share: np.ndarray
    startup_ticks: int
    links: _Links


def _walk(
    trace: Trace,
    deps: Dependencies | None,
    binding: np.ndarray | None,
    groups: TraceGroups | None = None,
) -> _Path | None:
    facts = facts_memo()
    deps = deps or Dependencies(trace, facts)
    recs = trace.instructions
    if binding is None:
        ready, start = int_column(recs, "ready_tick"), int_column(recs, "start_tick")
        binding = semaphore_waits(trace, deps, ready, start)[1]
    n = len(recs)
    if not n and not trace.dma:
        return None
    links = _Links(trace, deps, binding, groups or TraceGroups(trace))
    done = int_column(recs, "done_tick")
    d_end = int_column(trace.dma, "end_tick")
    last_i = int(np.argmax(done)) if n else -1
    last_d = int(np.argmax(d_end)) if len(trace.dma) else -1
    if last_d >= 0 and (last_i < 0 or d_end[last_d] > done[last_i]):
        node = n + int(deps.transfers.piece_transfer[last_d])
        end_of_run = int(d_end[last_d])
    else:
        node, end_of_run = last_i, int(done[last_i])
    on = _chain(links.pred, node)
    release = np.where(links.pred[on] < 0, np.minimum(links.release[on], links.first[on]),
                       links.release[on])  # fmt: skip
    release_of_next = np.minimum.accumulate(np.concatenate([[end_of_run], release]))
    share = release_of_next[:-1] - release_of_next[1:]
    last_release = int(release_of_next[-1])
    startup = last_release if links.pred[on[-1]] < 0 and last_release > 0 else 0
    return _Path(on, share, startup, links)


def _chain(pred: np.ndarray, node: int) -> np.ndarray:
    """``node``, its predecessor, that one's, ... until one has none (-1), or ``len(pred) + 1``
    nodes if the predecessors loop. By pointer doubling: the chain's first 2^k nodes, then each
    one's 2^k-th predecessor (worked out for every node at once) gives the next 2^k, so a chain
    of L nodes takes log2(L) numpy steps instead of L Python ones."""
    end = len(pred)  # the node after the last: its own predecessor
    jump = np.append(pred, end)
    jump[jump < 0] = end
    chain = np.array([node], np.int64)
    while chain[-1] != end and len(chain) <= end:
        chain = np.concatenate([chain, jump[chain]])
        jump = jump[jump]
    stop = np.flatnonzero(chain == end)
    return chain[: int(stop[0]) if len(stop) else end + 1]


def _new_step(values: tuple[object, ...]) -> CriticalStep:
    return tuple.__new__(CriticalStep, values)


class _Links:
    """Per node (the instructions, then the DMA transfers): the predecessor that delayed it (-1:
    none), when it was released, its first and last tick, and its (core, engine code, pc)."""

    def __init__(
        self, trace: Trace, deps: Dependencies, binding: np.ndarray, groups: TraceGroups
    ) -> None:
        recs, dma, transfers = trace.instructions, trace.dma, deps.transfers
        n = len(recs)
        core, eng = int_column(recs, "core"), engine_codes(recs)
        start, ready = int_column(recs, "start_tick"), int_column(recs, "ready_tick")
        end = int_column(recs, "end_tick")
        prev_same = groups.instructions.previous()
        # an instruction: released by the update that met its wait last, if it has a source;
        # else by the previous instruction on its engine, when it reached this one
        signaller = _take(deps.update_instruction, binding)
        completion = _take(deps.update_transfer, binding)
        released = (signaller >= 0) | (completion >= 0)
        i_pred = np.where(signaller >= 0, signaller, np.where(completion >= 0, n + completion, -1))
        i_pred = np.where(released, i_pred, prev_same)
        i_release = np.where(released, _take(deps.update_tick, binding), ready)
        # a transfer: its last piece, delayed by the piece before it on its DMA engine if it
        # waited for the engine; else by its trigger (released at the trigger's end or arrival)
        d_start, d_queued = int_column(dma, "start_tick"), int_column(dma, "queued_tick")
        prev_piece = groups.dma.previous()
        piece = transfers.last_piece
        trigger = transfers.trigger_record
        p = prev_piece[piece]
        engine_wait = (d_start[piece] > d_queued[piece]) & (p >= 0)
        t_pred = np.where(engine_wait, n + _take(transfers.piece_transfer, p), trigger)
        by_trigger = np.minimum(_take(end, trigger), d_queued[piece])
        t_release = np.where(
            engine_wait, d_start[piece], np.where(trigger >= 0, by_trigger, d_queued[piece])
        )
        self.pred = np.concatenate([i_pred, t_pred]).astype(np.int64)
        self.release = np.concatenate([i_release, t_release]).astype(np.int64)
        self.first = np.concatenate([start, d_start[piece]])
        self.last = np.concatenate([end, int_column(dma, "end_tick")[piece]])
        self.core = np.concatenate([core, transfers.core])
        self.engine = np.concatenate([eng, transfers.engine_code])
        self.pc = np.concatenate([int_column(recs, "pc"), transfers.pc])


def _take(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``values[index]`` where the index is >= 0, else -1 (``values`` may be empty)."""
    if not len(values):
        return np.full(len(index), -1, np.int64)
    return np.where(index >= 0, values[np.maximum(index, 0)], -1)


def critical_path_stats(
    trace: Trace,
    deps: Dependencies,
    binding: np.ndarray,
    total: int,
    groups: TraceGroups | None = None,
) -> CriticalPathStats:
    """``path_stats(critical_path(...))``, from the path's arrays (no step tuples built)."""
    path = _walk(trace, deps, binding, groups)
    if path is None:
        return path_stats([], total)
    n = len(trace.instructions)
    # a resource per link: its engine code, or -1 for a DMA transfer; the startup is -2
    resource = np.where(path.on >= n, -1, path.links.engine[path.on])
    share = path.share
    if path.startup_ticks:
        resource = np.append(resource, -2)
        share = np.append(share, path.startup_ticks)
    codes, sums = sums_in_order_met(resource, share)  # in the order the steps meet them
    by_resource: Counter[str] = Counter()
    names = {-1: DMA_SOURCE, -2: "startup"}
    for code, ticks in zip(codes.tolist(), sums.tolist(), strict=True):
        by_resource[names[code] if code < 0 else engine_of_code(code)] += ticks
    transfers = int((path.on >= n).sum())
    return CriticalPathStats(
        length=len(path.on),
        instructions=len(path.on) - transfers,
        dma_transfers=transfers,
        ticks_by_resource=dict(by_resource.most_common()),
        share_pct={k: 100.0 * v / total for k, v in by_resource.most_common() if total},
    )


def path_stats(steps: list[CriticalStep], total: int) -> CriticalPathStats:
    by_resource: Counter[str] = Counter()
    for step in steps:
        by_resource[step.resource] += step.share_ticks
    return CriticalPathStats(
        length=sum(1 for s in steps if s.kind != "startup"),
        instructions=sum(1 for s in steps if s.kind == "instruction"),
        dma_transfers=sum(1 for s in steps if s.kind == "dma"),
        ticks_by_resource=dict(by_resource.most_common()),
        share_pct={k: 100.0 * v / total for k, v in by_resource.most_common() if total},
    )
