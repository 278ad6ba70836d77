"""Byte regions of access patterns, for dependency tracking (builder) and race checking.

A region is a 2-D byte box: rows (partitions on chip; rows of ``partition_stride`` elements in an
HBM tensor) x bytes within a row. Boxes of the same row pitch intersect exactly for row-strided
tiles, the common case; other patterns fall back to their flat byte interval (conservative).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hwsim.isa.ap import AccessPattern, MemorySpace

_FLAT_ROW = 1 << 62  # row pitch of a region that is only a flat byte interval


@dataclass(frozen=True, slots=True)
class Region:
    key: tuple[Any, ...]  # (core, memory) on chip; ("hbm", tensor) in HBM
    row_bytes: int  # 0 on chip (rows are partitions)
    row0: int
    row1: int
    col0: int
    col1: int

    def flat(self) -> tuple[int, int]:
        return self.row0 * self.row_bytes + self.col0, (self.row1 - 1) * self.row_bytes + self.col1

    def overlaps(self, other: Region) -> bool:
        if self.key != other.key:
            return False
        if self.row_bytes == other.row_bytes:
            return (
                self.row0 < other.row1
                and other.row0 < self.row1
                and self.col0 < other.col1
                and other.col0 < self.col1
            )
        a0, a1 = self.flat()
        b0, b1 = other.flat()
        return a0 < b1 and b0 < a1

    def intersection(self, other: Region) -> Region | None:
        """The box both overlapping boxes touch, if they have one pitch (None otherwise)."""
        if self.key != other.key or self.row_bytes != other.row_bytes:
            return None
        return Region(
            self.key,
            self.row_bytes,
            max(self.row0, other.row0),
            min(self.row1, other.row1),
            max(self.col0, other.col0),
            min(self.col1, other.col1),
        )

    def covers(self, other: Region) -> bool:
        return (
            self.key == other.key
            and self.row_bytes == other.row_bytes
            and self.row0 <= other.row0
            and other.row1 <= self.row1
            and self.col0 <= other.col0
            and other.col1 <= self.col1
        )


#: (core, memory) -> the key of its regions, made once (enum ``.value`` is a slow property).
_ON_CHIP_KEYS: dict[tuple[int, MemorySpace], tuple[int, str]] = {}


def hbm_interval(tensor: str, first: int, last: int) -> Region:
    """The bytes [first, last) of HBM tensor ``tensor`` as a flat interval."""
    return Region(("hbm", tensor), _FLAT_ROW, 0, 1, first, last)


def region_of(core: int, ap: AccessPattern) -> Region:
    """The byte box an operand touches."""
    first, last = ap.byte_span()
    memory = ap.memory
    if memory is not MemorySpace.HBM:
        key = _ON_CHIP_KEYS.get((core, memory))
        if key is None:
            key = _ON_CHIP_KEYS[(core, memory)] = (core, memory.value)
        start = ap.start_partition
        return Region(key, 0, start, start + ap.partitions, first, last)
    row_bytes = ap.partition_stride * ap.dtype.itemsize
    if ap.partitions > 1 and row_bytes > 0:
        low, high = ap.free_extent_elements()
        col0 = ap.offset_bytes % row_bytes + low * ap.dtype.itemsize
        col1 = col0 + (high - low + 1) * ap.dtype.itemsize
        if col0 >= 0 and col1 <= row_bytes:
            row0 = ap.offset_bytes // row_bytes
            return Region(("hbm", ap.tensor), row_bytes, row0, row0 + ap.partitions, col0, col1)
    return hbm_interval(ap.tensor, first, last)
