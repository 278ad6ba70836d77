"""The recorded stream a scheduler reorders: instructions in program order, plus the marks that
constrain reordering (barriers, ``no_reorder`` regions) and the HBM placements whose position in
the order matters.

A front end records into an ``InstructionStream`` instead of emitting straight into a
``ProgramBuilder``; ``replay`` emits the items into the builder in the order a scheduler chose,
and the builder then inserts the semaphores that order needs (dependencies are recomputed on the
new order, never carried over from program order).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from hwsim.builder import ProgramBuilder
from hwsim.errors import HwsimError
from hwsim.isa.base import Instruction


@dataclass(frozen=True)
class Barrier:
    """Every item recorded before stays before every item recorded after, in every engine's
    stream (a ``sequential_range`` iteration boundary). Ordering only: it adds no semaphore."""

    reason: str = ""


@dataclass(frozen=True)
class PlaceHbm:
    """``ProgramBuilder.place_hbm(tensor, address_bytes, earlier)`` at this point of the stream:
    the scratch tensor takes over bytes the ``earlier`` tensors held (their accesses so far stay
    before it, its accesses after it)."""

    tensor: str
    address_bytes: int
    earlier: tuple[str, ...]


Item = Instruction | Barrier | PlaceHbm


class InstructionStream:
    """Items in program order. ``regions[i]`` is the id of the (outermost) ``no_reorder`` block
    item ``i`` was recorded in (0: none); ``edges`` are explicit (before, after) item index
    pairs a caller added (NKI's ``with_schedule``)."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.regions: list[int] = []
        self.edges: list[tuple[int, int]] = []
        self._open: list[int] = []  # the no_reorder blocks open now, innermost last
        self._next_region = 1
        self._index: dict[int, int] = {}  # id(item) -> its index (items are kept alive)

    def __len__(self) -> int:
        return len(self.items)

    def add(self, item: Item) -> int:
        """Record an item; returns its index."""
        self.items.append(item)
        self.regions.append(self._open[-1] if self._open else 0)
        self._index.setdefault(id(item), len(self.items) - 1)
        return len(self.items) - 1

    def index_of(self, item: Item) -> int:
        """The index of a recorded item (the first, if it was recorded twice)."""
        found = self._index.get(id(item))
        if found is None:
            raise HwsimError(f"{item!r} was not recorded in this stream")
        return found

    def barrier(self, reason: str = "") -> None:
        self.add(Barrier(reason))

    def place_hbm(self, tensor: str, address_bytes: int, earlier: Sequence[str]) -> None:
        self.add(PlaceHbm(tensor, address_bytes, tuple(earlier)))

    def edge(self, before: int, after: int) -> None:
        """Keep item ``before`` ahead of item ``after`` (indices from ``add``)."""
        if not 0 <= before < after < len(self.items):
            raise HwsimError(
                f"schedule edge ({before}, {after}): both must be recorded items and the first "
                f"must come first in program order (0 <= before < after < {len(self.items)})"
            )
        self.edges.append((before, after))

    @contextlib.contextmanager
    def no_reorder(self) -> Iterator[None]:
        """Instructions recorded inside keep their program order among themselves (nested
        blocks belong to the outermost: NKI adds edges between every pair in the block)."""
        if self._open:
            self._open.append(self._open[0])
        else:
            self._open.append(self._next_region)
            self._next_region += 1
        try:
            yield
        finally:
            self._open.pop()


def replay(builder: ProgramBuilder, items: Sequence[Item], order: Sequence[int]) -> None:
    """Emit ``items`` into ``builder`` in ``order`` (a permutation of their indices)."""
    if sorted(order) != list(range(len(items))):
        raise HwsimError(f"schedule order must be a permutation of the {len(items)} recorded items")
    for index in order:
        item = items[index]
        if isinstance(item, PlaceHbm):
            builder.place_hbm(item.tensor, item.address_bytes, item.earlier)
        elif isinstance(item, Instruction):
            builder.emit(item)
