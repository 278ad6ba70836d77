"""The critical path of a run, from the trace alone (the verdict built on it: ``verdict``)."""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import numpy as np

from hwsim.trace.analysis import (
    DMA_SOURCE,
    Dependencies,
    engine_codes,
    facts_memo,
    int_column,
    semaphore_waits,
)
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
    facts = facts_memo()
    deps = deps or Dependencies(trace, facts)
    recs = trace.instructions
    if binding is None:
        ready, start = int_column(recs, "ready_tick"), int_column(recs, "start_tick")
        binding = semaphore_waits(trace, deps, ready, start)[1]
    n = len(recs)
    if not n and not trace.dma:
        return []
    core = int_column(recs, "core")
    eng = engine_codes(recs)
    start = int_column(recs, "start_tick")
    prev_same = _previous_in_group(core, eng, start)
    dma = trace.dma
    d_start = int_column(dma, "start_tick")
    d_queued = int_column(dma, "queued_tick")
    prev_piece = _previous_in_group(int_column(dma, "core"), int_column(dma, "dma_engine"), d_start)
    transfers = deps.transfers
    trigger_index = transfers.trigger_record.tolist()

    done = int_column(recs, "done_tick")
    d_end = int_column(dma, "end_tick")
    last_i = int(np.argmax(done)) if n else -1
    last_d = int(np.argmax(d_end)) if len(dma) else -1
    if last_d >= 0 and (last_i < 0 or d_end[last_d] > done[last_i]):
        node: tuple[str, int] | None = ("dma", int(transfers.piece_transfer[last_d]))
        release_of_next = int(d_end[last_d])
    else:
        node = ("instruction", last_i)
        release_of_next = int(done[last_i])

    steps: list[CriticalStep] = []
    for _ in range(n + len(transfers) + 1):
        if node is None:
            break
        kind, idx = node
        pred: tuple[str, int] | None = None
        if kind == "instruction":
            rec = recs[idx]
            u = int(binding[idx])
            if u >= 0 and (deps.update_instruction[u] >= 0 or deps.update_transfer[u] >= 0):
                release = int(deps.update_tick[u])
                if deps.update_instruction[u] >= 0:
                    pred = ("instruction", int(deps.update_instruction[u]))
                else:
                    pred = ("dma", int(deps.update_transfer[u]))
            else:
                release = rec.ready_tick
                if prev_same[idx] >= 0:
                    pred = ("instruction", int(prev_same[idx]))
            first, last = rec.start_tick, rec.end_tick
            step = ("instruction", rec.engine, rec.core, rec.engine, rec.pc, first, last)
        else:
            piece = int(transfers.last_piece[idx])
            core_t, engine_t, pc_t = transfers.trigger(idx)
            p = int(prev_piece[piece])
            if d_start[piece] > d_queued[piece] and p >= 0:
                release = int(d_start[piece])
                pred = ("dma", int(transfers.piece_transfer[p]))
            elif trigger_index[idx] >= 0:
                release = min(recs[trigger_index[idx]].end_tick, int(d_queued[piece]))
                pred = ("instruction", trigger_index[idx])
            else:
                release = int(d_queued[piece])
            first, last = int(d_start[piece]), int(d_end[piece])
            step = ("dma", DMA_SOURCE, core_t, engine_t, pc_t, first, last)
        if pred is None:
            release = min(release, first)
        release = min(release, release_of_next)
        steps.append(CriticalStep(*step, share_ticks=release_of_next - release))
        if pred is None and release > 0:
            steps.append(CriticalStep("startup", "startup", step[2], "", -1, 0, release, release))
        release_of_next = release
        node = pred
    return steps


def _previous_in_group(group_a: np.ndarray, group_b: np.ndarray, key: np.ndarray) -> np.ndarray:
    """For each row, the row before it in (group_a, group_b) ordered by key; -1 for the first."""
    prev = np.full(len(key), -1, np.int64)
    if not len(key):
        return prev
    order = np.lexsort((np.arange(len(key)), key, group_b, group_a))
    same = (group_a[order][1:] == group_a[order][:-1]) & (group_b[order][1:] == group_b[order][:-1])
    prev[order[1:][same]] = order[:-1][same]
    return prev


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
