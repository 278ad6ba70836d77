"""Race checker: conflicting accesses by different engines with no semaphore ordering them.

The simulated-hardware equivalent of a GPU race sanitizer. Every engine (and every DMA queue) is a
thread with a vector clock; waiting on a semaphore joins the clocks of exactly the increments that
satisfied the wait. Two accesses conflict when they touch the same bytes, come from different
threads, and at least one writes; they race when neither is ordered before the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hwsim.errors import RaceError
from hwsim.isa.ap import AccessPattern
from hwsim.isa.regions import Region, region_of

MAX_REPORTED = 20


def _element_bytes(ap: AccessPattern) -> np.ndarray:
    """Byte offsets (within a partition row) of every element of the free pattern."""
    offsets = np.zeros(1, dtype=np.int64)
    for size, stride in zip(ap.free_sizes, ap.free_strides, strict=True):
        offsets = (offsets[:, None] + np.arange(size, dtype=np.int64) * stride).ravel()
    size = ap.dtype.itemsize
    starts = ap.offset_bytes + offsets * size
    return np.unique((starts[:, None] + np.arange(size)).ravel())


def _hbm_bytes(ap: AccessPattern) -> np.ndarray:
    """Byte offsets within its tensor of every element of an HBM pattern (all partitions)."""
    rows = np.arange(ap.partitions, dtype=np.int64) * ap.partition_stride * ap.dtype.itemsize
    return np.unique((rows[:, None] + _element_bytes(ap)[None, :]).ravel())


@dataclass(slots=True)
class _Access:
    region: Region
    ap: AccessPattern
    is_write: bool
    thread: str
    epoch: int
    label: str


class RaceChecker:
    """Tracks accesses during a run; ``raise_if_races`` reports what it found."""

    def __init__(self) -> None:
        self.clocks: dict[str, dict[str, int]] = {}
        self.accesses: dict[tuple[Any, ...], list[_Access]] = {}
        self.races: list[str] = []

    def begin(
        self, core: int, engine: str, pc: int, instruction: Any, waits: Any, sems: Any
    ) -> dict[str, int]:
        """An instruction starts: join the clocks of the waits it passed; check its accesses."""
        thread = f"core{core}.{engine}"
        clock = self.clocks.setdefault(thread, {})
        for sem, value in waits:
            for signaller in sems.clock_reaching(sem, value):
                if signaller:
                    for key, epoch in signaller.items():
                        if clock.get(key, 0) < epoch:
                            clock[key] = epoch
        clock[thread] = clock.get(thread, 0) + 1
        if not instruction.IS_DMA:
            label = f"core {core} {engine}[{pc}] {instruction.label()}"
            self._record(core, instruction, thread, clock, label)
        return dict(clock)

    def dma_clock(
        self, core: int, queue: int, trigger_clock: dict[str, int], instruction: Any
    ) -> dict[str, int]:
        """A DMA transfer starts on its queue after its trigger: its own thread, joined."""
        thread = f"core{core}.dma.q{queue}"
        clock = self.clocks.setdefault(thread, {})
        for key, epoch in trigger_clock.items():
            if clock.get(key, 0) < epoch:
                clock[key] = epoch
        clock[thread] = clock.get(thread, 0) + 1
        label = f"core {core} dma queue {queue} {instruction.label()}"
        self._record(core, instruction, thread, clock, label)
        return dict(clock)

    def _record(
        self, core: int, instruction: Any, thread: str, clock: dict[str, int], label: str
    ) -> None:
        if getattr(instruction, "ORDERS_ONLY", False):  # a barrier: it orders, touches nothing
            return
        epoch = clock[thread]
        writes = instruction.writes()
        written = {id(ap) for ap in writes}
        for ap in (*instruction.reads(), *writes):
            access = _Access(region_of(core, ap), ap, id(ap) in written, thread, epoch, label)
            self._check(access, clock)

    def _check(self, access: _Access, clock: dict[str, int]) -> None:
        entries = self.accesses.setdefault(access.region.key, [])
        kept = []
        for other in entries:
            ordered = clock.get(other.thread, 0) >= other.epoch
            if (
                not ordered
                and other.thread != access.thread
                and (other.is_write or access.is_write)
                and other.region.overlaps(access.region)
                and self._bytes_overlap(other, access)
            ):
                self._report(other, access)
            if (
                ordered
                and access.region.covers(other.region)
                and (access.is_write or not other.is_write)
            ):
                continue  # superseded: anything racing with it races with the new access too
            kept.append(other)
        kept.append(access)
        self.accesses[access.region.key] = kept

    @staticmethod
    def _bytes_overlap(a: _Access, b: _Access) -> bool:
        if a.region.row_bytes != 0 or b.region.row_bytes != 0:
            # HBM: boxes that overlap may still interleave (the column blocks of a transposed
            # tile two cores of a pair write): compare the elements themselves
            return bool(np.intersect1d(_hbm_bytes(a.ap), _hbm_bytes(b.ap)).size)
        return bool(np.intersect1d(_element_bytes(a.ap), _element_bytes(b.ap)).size)

    def _report(self, first: _Access, second: _Access) -> None:
        kinds = ("write" if first.is_write else "read", "write" if second.is_write else "read")
        self.races.append(
            f"{first.label} ({kinds[0]} {first.ap.describe()}) and {second.label} "
            f"({kinds[1]} {second.ap.describe()}) touch the same bytes with no semaphore "
            f"ordering them"
        )

    def raise_if_races(self) -> None:
        if self.races:
            shown = self.races[:MAX_REPORTED]
            more = len(self.races) - len(shown)
            tail = f" (+{more} more)" if more else ""
            raise RaceError(f"{len(self.races)} race(s): " + "; ".join(shown) + tail)
