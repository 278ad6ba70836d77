"""SBUF and PSUM pools of the kernel language: first-fit allocation with reuse, partition-aware.

A tile of P partitions reserves a box: partitions [start, start + P) x bytes [offset, offset +
size) of every one of them. Where a tile may start follows the hardware's tensor placement rule
(HARDWARE.md §1.4 [S1]): P > 64 starts at partition 0, 32 < P <= 64 at 0 or 64, P <= 32 at 0, 32,
64 or 96 (quadrant starts; scaled to the config's partition count). The allocator prefers
partition 0 at any byte offset, first fit (so every kernel that fitted when tiles reserved all
128 partitions gets the very same addresses), and only when partition 0 is full tries the other
starts: four [1, N] tiles then share one byte range instead of taking four.

PSUM tiles take whole banks in every partition, since a matmul result must sit in one bank [S1]
and its rows are TensorE's output columns, which start at partition 0.

Blocks are freed when their tile is garbage-collected (CPython frees a tile as soon as nothing
refers to it, e.g. when a loop variable is rebound), so loops reuse memory deterministically;
the builder's dependency tracking then inserts the WAR waits that reuse needs. When that is not
enough, the kernel's memory planner (``hwsim.lang.planner``) frees tiles after their last use
and spills.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hwsim.errors import HwsimError

#: Allocation granularity in SBUF (bytes per partition). Assumption: keeps every dtype aligned
#: and DMA descriptors on 64-byte boundaries; no source gives the compiler's exact rule.
SBUF_ALIGN_BYTES = 64


class OutOfMemoryError(HwsimError):
    """SBUF or PSUM has no room for a new tile; the message lists the live tiles."""


@dataclass
class Block:
    """A live allocation: partitions [start_partition, start_partition + partitions) x bytes
    [offset, offset + size) of each. ``partitions == 0`` means every partition of the pool."""

    memory: str
    name: str
    offset: int
    size: int
    where: str  # kernel source location of the allocation
    live: bool = True
    start_partition: int = 0
    partitions: int = 0
    #: What the tile holds, for a spill's DMA: its dtype, elements per partition and
    #: partition count (``partitions`` is 0 in a pool that is not partition-aware).
    dtype: Any = None
    elements: int = 0
    tile_partitions: int = 0

    def overlaps(self, other: Block, pool_partitions: int) -> bool:
        """Whether two blocks share a byte of some partition."""
        if not (self.offset < other.offset + other.size and other.offset < self.offset + self.size):
            return False
        if not pool_partitions:  # a pool that is not partition-aware: every tile spans all
            return True
        return _rows_overlap(
            self.start_partition,
            self.partitions or pool_partitions,
            other.start_partition,
            other.partitions or pool_partitions,
        )


def least_recent_cover(
    live: list[Block],
    dead: list[tuple[Block, int]],
    need: int,
    rows: int,
    starts: tuple[int, ...],
    offsets: list[int],
    capacity: int,
    pool_partitions: int,
) -> tuple[int, int, int] | None:
    """Where a tile of ``need`` bytes in ``rows`` partitions (0: all) can go without touching
    ``live`` blocks, among the byte ``offsets`` (ascending) and partition ``starts``: the place
    whose latest-used ``dead`` block it covers (block, last use) was used longest ago, then the
    lowest offset, then the first start. Returns (that last use or -1, offset, start), or None.
    All trial places at once, as arrays: a memory planner asks this for every placement."""
    offs = np.array([o for o in offsets if o + need <= capacity], dtype=np.int64)
    if not len(offs):
        return None
    ends = offs + need

    def columns(blocks: list[Block]) -> tuple[np.ndarray, ...]:
        lo = np.array([b.offset for b in blocks], dtype=np.int64)
        hi = lo + np.array([b.size for b in blocks], dtype=np.int64)
        p0 = np.array([b.start_partition for b in blocks], dtype=np.int64)
        p1 = p0 + np.array([b.partitions or pool_partitions for b in blocks], dtype=np.int64)
        return lo, hi, p0, p1

    def covering(cols: tuple[np.ndarray, ...], start: int) -> np.ndarray:
        lo, hi, p0, p1 = cols
        hit = (lo[None, :] < ends[:, None]) & (offs[:, None] < hi[None, :])
        if pool_partitions:  # a partition-aware pool: the rows must meet too
            hit &= ((p0 < start + (rows or pool_partitions)) & (start < p1))[None, :]
        return hit

    live_cols = columns(live)
    dead_cols = columns([b for b, _ in dead])
    last = np.array([used for _, used in dead], dtype=np.int64)
    best: tuple[int, int, int] | None = None
    for start in starts:
        free = ~covering(live_cols, start).any(axis=1)
        if not free.any():
            continue
        latest = np.where(covering(dead_cols, start), last[None, :], -1).max(axis=1, initial=-1)
        latest = np.where(free, latest, np.iinfo(np.int64).max)
        index = int(np.argmin(latest))  # the first minimum: the lowest offset among equals
        key = (int(latest[index]), int(offs[index]), start)
        if best is None or key < best:
            best = key
    return best


def _rows_overlap(start0: int, count0: int, start1: int, count1: int) -> bool:
    return start0 < start1 + count1 and start1 < start0 + count0


def placement_starts(partitions: int, total: int) -> tuple[int, ...]:
    """The partitions a tile of ``partitions`` rows may start at, preferred first (HARDWARE.md
    §1.4: > half -> 0; > quarter -> 0 or half; else the quadrant starts) [S1]."""
    quadrant = max(1, total // 4)
    if partitions > total // 2 or total < 4:
        return (0,)
    if partitions > quadrant:
        return (0, total // 2)
    return tuple(range(0, total, quadrant))


@dataclass
class Pool:
    """One memory's allocator. ``partitions`` > 0 makes it partition-aware (a tile reserves only
    its own partitions); 0 keeps every tile across all partitions (PSUM)."""

    memory: str
    capacity: int  # bytes per partition
    granule: int  # allocation unit (64 B in SBUF, one bank in PSUM)
    blocks: list[Block] = field(default_factory=list)  # live, sorted by offset
    peak_bytes: int = 0  # the most bytes in use in any one partition
    partitions: int = 0
    #: Bytes in use at each placement start (blocks start only there, so the fullest partition
    #: is one of them): kept up to date by insert and free.
    _usage: dict[int, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        starts = placement_starts(1, self.partitions) if self.partitions else (0,)
        self._usage = dict.fromkeys(starts, 0)

    def rounded(self, size: int) -> int:
        """``size`` bytes per partition rounded up to the allocation unit."""
        return -(-size // self.granule) * self.granule

    def allocate(self, name: str, size: int, where: str, partitions: int | None = None) -> Block:
        """A first-fit block of ``size`` bytes in each of ``partitions`` partitions (all when
        None or when the pool is not partition-aware); OutOfMemoryError if there is none."""
        block = self.try_allocate(name, size, where, partitions)
        if block is None:
            raise OutOfMemoryError(self.oom_message(name, size, where, partitions))
        return block

    def try_allocate(
        self,
        name: str,
        size: int,
        where: str,
        partitions: int | None = None,
        prefer_start: int = 0,
    ) -> Block | None:
        """Like ``allocate``, but None when there is no room; ``prefer_start`` is tried first
        if it is a legal start (a reloaded tile goes back to its partitions if it can)."""
        need = self.rounded(size)
        rows = self._rows(partitions)
        starts = placement_starts(rows, self.partitions) if self.partitions else (0,)
        if prefer_start in starts and prefer_start != starts[0]:
            starts = (prefer_start, *(s for s in starts if s != prefer_start))
        for start in starts:
            offset = self._first_fit(need, start, rows)
            if offset is not None:
                block = Block(self.memory, name, offset, need, where, True, start, rows)
                return self._insert(block)
        return None

    def _rows(self, partitions: int | None) -> int:
        if not self.partitions or partitions is None:
            return 0
        return partitions

    def _first_fit(self, need: int, start: int, rows: int) -> int | None:
        """The lowest byte offset where ``need`` bytes are free in partitions [start, +rows)."""
        cursor = 0
        total = self.partitions
        for block in self.blocks:
            if rows and not _rows_overlap(
                start, rows, block.start_partition, block.partitions or total
            ):
                continue
            if block.offset - cursor >= need:
                return cursor
            cursor = max(cursor, block.offset + block.size)
        return cursor if self.capacity - cursor >= need else None

    def reserve(
        self,
        name: str,
        offset: int,
        size: int,
        where: str,
        partitions: int | None = None,
        start_partition: int = 0,
    ) -> Block:
        """Explicit placement: take [offset, offset + size) (of partitions [start_partition,
        +partitions) in a partition-aware pool) if it is free."""
        if offset < 0 or offset + size > self.capacity:
            raise OutOfMemoryError(
                f"{where}: {name} at bytes [{offset}, {offset + size}) is outside {self.memory} "
                f"({self.capacity} bytes per partition)"
            )
        rows = self._rows(partitions)
        block = Block(
            self.memory, name, offset, size, where, True, start_partition if rows else 0, rows
        )
        for other in self.blocks:
            if other.overlaps(block, self.partitions):
                raise OutOfMemoryError(
                    f"{where}: {name} at bytes [{offset}, {offset + size}) overlaps live tile "
                    f"{other.name} ({other.where})"
                )
        return self._insert(block)

    def _insert(self, block: Block) -> Block:
        index = 0
        while index < len(self.blocks) and self.blocks[index].offset <= block.offset:
            index += 1
        self.blocks.insert(index, block)
        self._count(block, block.size)
        self.peak_bytes = max(self.peak_bytes, self.used_bytes())
        return block

    def _count(self, block: Block, size: int) -> None:
        """Add ``size`` to the usage of the placement starts ``block`` covers."""
        rows = block.partitions or self.partitions
        for row in self._usage:
            if not rows or block.start_partition <= row < block.start_partition + rows:
                self._usage[row] += size

    def used_bytes(self) -> int:
        """Bytes in use in the fullest partition."""
        return max(self._usage.values()) if self.blocks else 0

    def free(self, block: Block) -> None:
        if block.live:
            block.live = False
            self.blocks.remove(block)
            self._count(block, -block.size)

    def oom_message(self, name: str, size: int, where: str, partitions: int | None = None) -> str:
        used = self.used_bytes()
        free = self.capacity - used
        why = "none of the free space is in one piece" if free >= size else f"only {free} are free"
        rows = self._rows(partitions)
        what = (
            f"{size} bytes in each of {rows} partitions" if rows else f"{size} bytes per partition"
        )
        live = "; ".join(
            f"{b.name} {b.size} B at {b.offset}{self._rows_text(b)} ({b.where})"
            for b in self.blocks
        )
        return (
            f"{where}: out of {self.memory.upper()}: {name} needs {what} of "
            f"{self.capacity}, {why}. Live tiles: {live}"
        )

    _oom_message = oom_message  # the name before the planner used it

    def _rows_text(self, block: Block) -> str:
        if not self.partitions or not block.partitions:
            return ""
        return (
            f" partitions {block.start_partition}..{block.start_partition + block.partitions - 1}"
        )
