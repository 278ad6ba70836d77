"""DMA pieces gathered into one span per (transfer, queue): what the trace's queue tracks and the
timeline's DMA rows show (the pieces themselves stay in the DmaPacket table).

A transfer is cut into pieces that the queue's DMA engines process side by side; drawn one slice
per piece on one track per (queue, DMA engine), a transfer became up to 16 identical slices. A
span covers its pieces (first start to last end) and carries their engines, bytes and descriptors
as numbers. Spans of one queue can overlap (the next transfer starts while the last pieces of the
previous one run), so each gets a lane: spans on one lane never partly overlap, as a Chrome trace
track requires.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwsim.trace.analysis import Transfers, int_column
from hwsim.trace.array_ops import unique_runs
from hwsim.trace.records import Trace


@dataclass
class DmaSpans:
    """Columns, one entry per span; ``span_of_piece[i]`` is the span of ``trace.dma[i]``."""

    transfer: np.ndarray
    core: np.ndarray
    queue: np.ndarray
    queued_tick: np.ndarray  # first piece to enter its queue
    start_tick: np.ndarray
    end_tick: np.ndarray
    transfer_bytes: np.ndarray
    descriptors: np.ndarray
    pieces: np.ndarray
    lane: np.ndarray
    span_of_piece: np.ndarray
    #: The DMA engines of span s are ``engine_list[engine_offset[s]:engine_offset[s + 1]]``.
    engine_list: np.ndarray
    engine_offset: np.ndarray

    def __len__(self) -> int:
        return len(self.transfer)

    def dma_engines(self, span: int) -> list[int]:
        """The DMA engines that processed span ``span``'s pieces, ascending."""
        lo, hi = self.engine_offset[span], self.engine_offset[span + 1]
        return [int(e) for e in self.engine_list[lo:hi]]


def dma_spans(trace: Trace, transfers: Transfers) -> DmaSpans:
    """The spans of ``trace.dma`` (``transfers``: the trace's pieces grouped by transfer)."""
    dma = trace.dma
    queue = int_column(dma, "queue")
    key = transfers.piece_transfer.astype(np.int64) * 4096 + queue  # a transfer on one queue
    spans, span_of_piece = unique_runs(key)
    n = len(spans)
    first = np.full(n, np.iinfo(np.int64).max)
    queued, start = first.copy(), first.copy()
    np.minimum.at(queued, span_of_piece, int_column(dma, "queued_tick"))
    np.minimum.at(start, span_of_piece, int_column(dma, "start_tick"))
    end = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(end, span_of_piece, int_column(dma, "end_tick"))
    moved = np.bincount(span_of_piece, int_column(dma, "transfer_bytes"), n).astype(np.int64)
    descriptors = np.bincount(span_of_piece, int_column(dma, "descriptors"), n).astype(np.int64)
    pairs = np.unique(span_of_piece * 4096 + int_column(dma, "dma_engine"))
    engine_offset = np.searchsorted(pairs // 4096, np.arange(n + 1))
    span_transfer = spans // 4096
    core = transfers.core[span_transfer] if n else np.zeros(0, np.int64)
    span_queue = spans % 4096
    return DmaSpans(
        transfer=span_transfer,
        core=core,
        queue=span_queue,
        queued_tick=queued,
        start_tick=start,
        end_tick=end,
        transfer_bytes=moved,
        descriptors=descriptors,
        pieces=np.bincount(span_of_piece, minlength=n),
        lane=_lanes(core, span_queue, start, end),
        span_of_piece=span_of_piece,
        engine_list=pairs % 4096,
        engine_offset=engine_offset,
    )


def _lanes(core: np.ndarray, queue: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A lane per span so that spans of one (core, queue) on one lane either nest or follow each
    other: in order of (start, longest first), each joins the first lane whose open spans ended
    before it starts or contain it."""
    lane = np.zeros(len(start), np.int64)
    stacks: dict[tuple[int, int], list[list[int]]] = {}
    order = np.lexsort((-end, start, queue, core))
    for s in order.tolist():
        lanes = stacks.setdefault((int(core[s]), int(queue[s])), [])
        t0, t1 = int(start[s]), int(end[s])
        for number, stack in enumerate(lanes):
            while stack and stack[-1] <= t0:
                stack.pop()
            if not stack or t1 <= stack[-1]:
                stack.append(t1)
                lane[s] = number
                break
        else:
            lanes.append([t1])
            lane[s] = len(lanes) - 1
    return lane
