"""Trace records grouped once by the resource they occupy (an engine of a core, a DMA engine of a
core), each group in start order: what busy time, the critical path's predecessors and the DMA
statistics all need, sorted once and shared instead of each analysis sorting or masking again.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hwsim.trace.analysis import engine_codes, int_column
from hwsim.trace.array_ops import KEY_LIMIT, order_by_group_and_key, sum_by_key
from hwsim.trace.records import Trace

#: Group keys are core * GROUP_WIDTH + engine (an ``engine_code`` or a DMA engine index).
GROUP_WIDTH = 1 << 16


class TraceGroups:
    """A trace's instruction records by (core, engine) and DMA pieces by (core, DMA engine),
    each in start order (``Grouped``; group keys ``core * GROUP_WIDTH + engine``)."""

    def __init__(self, trace: Trace) -> None:
        recs, dma = trace.instructions, trace.dma
        self.instructions = Grouped(
            int_column(recs, "core") * GROUP_WIDTH + engine_codes(recs),
            int_column(recs, "start_tick"),
            int_column(recs, "end_tick"),
        )
        self.dma = Grouped(
            int_column(dma, "core") * GROUP_WIDTH + int_column(dma, "dma_engine"),
            int_column(dma, "start_tick"),
            int_column(dma, "end_tick"),
        )


class Blocks(NamedTuple):
    """Disjoint busy blocks [start, end) of the union of each group's intervals, in group and
    start order; ``group`` is the block's group key."""

    group: np.ndarray
    start: np.ndarray
    end: np.ndarray


class Grouped:
    """Records by ``group`` (an int64 key per record), within a group by start tick, ties in
    record order: ``order`` lists the record indices so, ``group_sorted`` their keys."""

    def __init__(self, group: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        self.start, self.end = start, end
        self.order = order_by_group_and_key(group, start)
        self.group_sorted = group[self.order]
        #: Per sorted position but the first: the same group as the position before it.
        self.same_as_previous = self.group_sorted[1:] == self.group_sorted[:-1]
        self._blocks: Blocks | None = None

    def previous(self) -> np.ndarray:
        """Per record, the record before it in its group (-1 for a group's first)."""
        prev = np.full(len(self.order), -1, np.int64)
        if len(self.order):
            same = self.same_as_previous
            prev[self.order[1:][same]] = self.order[:-1][same]
        return prev

    def blocks(self) -> Blocks:
        """The union of each group's [start, end) intervals as disjoint blocks (``union_ticks``
        per group: a block starts where an interval begins after all before it in the group
        ended). Worked out once."""
        if self._blocks is None:
            self._blocks = self._union_blocks()
        return self._blocks

    def _union_blocks(self) -> Blocks:
        s, e = self.start[self.order], self.end[self.order]
        first = np.ones(len(s), bool)
        first[1:] = ~self.same_as_previous
        starts = np.flatnonzero(first)
        lo = min(int(s.min()), int(e.min())) if len(s) else 0
        step = max(int(s.max()), int(e.max())) - lo + 1 if len(s) else 1
        if len(starts) * step < KEY_LIMIT:
            new_block, block_start, block_end = _union_blocks(s, e, first, lo, step)
        else:  # ticks too far apart to shift the groups apart in int64: one group at a time
            parts = [
                _union_blocks(s[a:b], e[a:b], first[a:b], lo, step)
                for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(s)], strict=True)
            ]
            new_block = np.concatenate([p[0] for p in parts])
            block_start = np.concatenate([p[1] for p in parts])
            block_end = np.concatenate([p[2] for p in parts])
        return Blocks(self.group_sorted[new_block], block_start, block_end)

    def union_ticks_by_group(self) -> tuple[np.ndarray, np.ndarray]:
        """(group keys in ascending order, the length of the union of each group's intervals)."""
        blocks = self.blocks()
        return sum_by_key(blocks.group, blocks.end - blocks.start)


def _union_blocks(
    s: np.ndarray, e: np.ndarray, first: np.ndarray, lo: int, step: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows starting a block, and the blocks' starts and ends, of intervals sorted by (group,
    start); ``first`` marks each group's first row. Each group's ticks are shifted above every
    earlier group's (by ``step`` a group, from ``lo``), so one running maximum of the ends
    restarts at each group."""
    if not len(s):
        empty = np.zeros(0, np.int64)
        return np.zeros(0, bool), empty, empty
    base = (np.cumsum(first, dtype=np.int64) - 1) * step - lo
    reach = np.maximum.accumulate(e + base)
    new_block = first.copy()
    new_block[1:] |= (s + base)[1:] > reach[:-1]
    begins = np.flatnonzero(new_block)
    last_rows = np.append(begins[1:] - 1, len(s) - 1)  # a block's reach is its last row's
    return new_block, s[begins], reach[last_rows] - base[begins]
