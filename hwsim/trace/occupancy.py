"""SBUF/PSUM occupancy from a trace: when each named buffer held data, and bytes in use over time.

Rule: a buffer (an entry of ``trace.memory_allocations``) is live from the first start to the last
done tick of the instructions whose operands overlap it; bytes shared by several buffers (an
allocator reusing freed space) count once. See ``allocation_lifetimes`` and ``occupancy_steps``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from hwsim.program import Allocation
from hwsim.trace.records import Trace

if TYPE_CHECKING:
    from hwsim.trace.facts import FactsMemo


@dataclass(frozen=True)
class AllocationLife(Allocation):
    """When a named SBUF/PSUM buffer held data: first start .. last done of the instructions whose
    operands overlap it (first_tick = last_tick = -1 if none did), and where it lives."""

    first_tick: int
    last_tick: int

    @property
    def nbytes(self) -> int:
        return self.partitions * self.size_bytes


class OperandSpans:
    """Distinct on-chip operand spans of a trace, each with the first start and last done tick of
    the instructions using it. Filled during a pass over the instructions the caller makes anyway.
    """

    def __init__(self) -> None:
        self._spans: dict[tuple[int, str, int, int, int, int], list[int]] = {}
        #: Spans added at once (``add_many``): (cores, memory codes, memory names, rows).
        self._many: list[tuple[np.ndarray, np.ndarray, list[str], np.ndarray]] = []

    def add(
        self, core: int, spans: tuple[tuple[str, int, int, int, int], ...], start: int, done: int
    ) -> None:
        for memory, p0, p1, b0, b1 in spans:
            key = (core, memory, p0, p1, b0, b1)
            seen = self._spans.get(key)
            if seen is None:
                self._spans[key] = [start, done]
            else:
                if start < seen[0]:
                    seen[0] = start
                if done > seen[1]:
                    seen[1] = done

    def add_many(
        self, cores: np.ndarray, memory: np.ndarray, names: list[str], rows: np.ndarray
    ) -> None:
        """Spans used by many instructions at once: per span its core, memory (a code into
        ``names``) and a row (first partition, end partition, first byte, end byte, first
        start, last done). A span may repeat: only its earliest start and latest done count."""
        self._many.append((cores, memory, names, rows))

    def lifetimes(self, allocations: Sequence[tuple[Any, ...]]) -> list[AllocationLife]:
        """Live interval of every SBUF/PSUM allocation (see ``allocation_lifetimes``)."""
        listed: dict[tuple[int, str], list[tuple[int, int, int, int, int, int]]] = {}
        for (core, memory, p0, p1, b0, b1), (first, last) in self._spans.items():
            listed.setdefault((core, memory), []).append((p0, p1, b0, b1, first, last))
        groups = {key: [np.array(rows, np.int64)] for key, rows in listed.items()}
        for cores, memory_codes, names, span_rows in self._many:
            width = len(names)
            keys, inverse = np.unique(cores * width + memory_codes, return_inverse=True)
            inverse = inverse.reshape(-1)
            for i, key in enumerate(keys.tolist()):
                group = groups.setdefault((key // width, names[key % width]), [])
                group.append(span_rows[inverse == i])
        arrays = {key: np.concatenate(parts) for key, parts in groups.items()}
        lives = []
        for core, memory, name, p0, parts, offset, size in allocations:
            memory = str(memory)
            if memory == "hbm":
                continue
            rows = arrays.get((core, memory))
            first = last = -1
            if rows is not None:
                hit = (
                    (rows[:, 0] < p0 + parts)
                    & (rows[:, 1] > p0)
                    & (rows[:, 2] < offset + size)
                    & (rows[:, 3] > offset)
                )
                if hit.any():
                    first, last = int(rows[hit, 4].min()), int(rows[hit, 5].max())
            lives.append(AllocationLife(core, memory, name, p0, parts, offset, size, first, last))
        return lives


def allocation_lifetimes(trace: Trace, facts: FactsMemo) -> list[AllocationLife]:
    """Live interval of every on-chip allocation in ``trace.memory_allocations``.

    Rule: an allocation is live from the first start tick to the last done tick of the
    instructions with an operand overlapping it (partition range and byte span per partition both
    intersect; a strided operand counts by its bounding span). Distinct operand spans are
    collapsed first, so the cost is one pass over the instructions plus spans x allocations.
    """
    spans = OperandSpans()
    if trace.memory_allocations:
        for rec in trace.instructions:
            spans.add(rec.core, facts(rec.instruction).spans, rec.start_tick, rec.done_tick)
    return spans.lifetimes(trace.memory_allocations)


def occupancy_steps(
    lives: Sequence[AllocationLife], memory: str, core: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Bytes in use in ``memory`` as a step function: value[i] holds from ticks[i] to ticks[i+1].

    Each byte counts once: buffers that share addresses (an allocator reusing freed space) are
    grouped, and a group occupies the union of its live buffers' (partition x byte) rectangles.
    As the trace cannot tell which of two such buffers an access belongs to, both get the
    lifetime of all accesses to their bytes; counting bytes once keeps the total within capacity.
    Starts at (0, 0); ``core=None`` sums all cores; a buffer freed at the tick another is first
    used does not overlap it.
    """
    live = [
        life
        for life in lives
        if life.memory == memory and life.first_tick >= 0 and (core is None or life.core == core)
    ]
    deltas: dict[int, int] = {0: 0}
    for group in _address_groups(live):
        if len(group) == 1:
            (life,) = group
            deltas[life.first_tick] = deltas.get(life.first_tick, 0) + life.nbytes
            deltas[life.last_tick] = deltas.get(life.last_tick, 0) - life.nbytes
            continue
        for tick, change in _union_changes(group):
            deltas[tick] = deltas.get(tick, 0) + change
    ticks = np.array(sorted(deltas), np.int64)
    level = np.cumsum(np.array([deltas[t] for t in ticks.tolist()], np.int64))
    return ticks, level


def _address_groups(lives: list[AllocationLife]) -> list[list[AllocationLife]]:
    """Connected groups of buffers whose (core, partition, byte) ranges overlap."""
    parent = list(range(len(lives)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    order = sorted(range(len(lives)), key=lambda i: (lives[i].core, lives[i].offset_bytes))
    active: list[int] = []  # sweep over byte offsets: buffers whose byte range is still open
    for i in order:
        a = lives[i]
        active = [
            j
            for j in active
            if lives[j].core == a.core
            and lives[j].offset_bytes + lives[j].size_bytes > a.offset_bytes
        ]
        for j in active:
            b = lives[j]
            if (
                a.start_partition < b.start_partition + b.partitions
                and b.start_partition < a.start_partition + a.partitions
            ):
                parent[root(i)] = root(j)
        active.append(i)
    groups: dict[int, list[AllocationLife]] = {}
    for i, life in enumerate(lives):
        groups.setdefault(root(i), []).append(life)
    return list(groups.values())


def _union_changes(group: list[AllocationLife]) -> list[tuple[int, int]]:
    """(tick, change of the bytes covered) at each tick a buffer of ``group`` starts or ends
    being live: the union of the live buffers' (partition x byte) rectangles, kept up to date
    one buffer at a time on a grid of the group's distinct partition and byte bounds (a count
    of live buffers per cell; a cell counts its area while the count is above zero)."""
    rows = sorted({p for g in group for p in (g.start_partition, g.start_partition + g.partitions)})
    cols = sorted({x for g in group for x in (g.offset_bytes, g.offset_bytes + g.size_bytes)})
    row_at = {p: i for i, p in enumerate(rows)}
    col_at = {x: i for i, x in enumerate(cols)}
    area = np.outer(np.diff(np.array(rows, np.int64)), np.diff(np.array(cols, np.int64)))
    live = np.zeros(area.shape, np.int32)
    events: dict[int, list[tuple[int, AllocationLife]]] = {}
    for life in group:
        if life.last_tick > life.first_tick:  # live for no tick at all: never counted
            events.setdefault(life.first_tick, []).append((1, life))
            events.setdefault(life.last_tick, []).append((-1, life))
    changes = []
    for tick in sorted(events):
        change = 0
        for step, life in sorted(events[tick], key=lambda e: e[0]):  # ends first
            r0, r1 = row_at[life.start_partition], row_at[life.start_partition + life.partitions]
            c0, c1 = col_at[life.offset_bytes], col_at[life.offset_bytes + life.size_bytes]
            cells = live[r0:r1, c0:c1]
            if step > 0:
                change += int(area[r0:r1, c0:c1][cells == 0].sum())
                cells += 1
            else:
                cells -= 1
                change -= int(area[r0:r1, c0:c1][cells == 0].sum())
        changes.append((tick, change))
    return changes
