"""Which output units of an op a physical core emits when a graph is lowered for a logical
NeuronCore of several cores (``bridge.lnc``); the tile drivers iterate ``ctx.split.mine``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


def share(units: int, core: int, cores: int) -> tuple[int, int]:
    """[lo, hi) of ``units`` that core ``core`` of ``cores`` takes: contiguous blocks, the
    earlier cores taking the larger ones (one unit: core 0 alone)."""
    return -(-units * core // cores), -(-units * (core + 1) // cores)


class CoreSplit:
    """Which units of the node being lowered this core emits (``mine``)."""

    def __init__(self, core: int = 0, cores: int = 1) -> None:
        self.core = core
        self.cores = cores
        #: The node being lowered splits its units between the cores.
        self.active = False
        self._depth = 0

    def mine(self, units: Sequence[T]) -> Iterator[T]:
        """This core's block of ``units`` (all of them when the node does not split, or inside
        a unit already handed out: a batch product's tiles)."""
        if not self.active or self._depth:
            yield from units
            return
        lo, hi = share(len(units), self.core, self.cores)
        for unit in units[lo:hi]:
            self._depth += 1
            try:
                yield unit
            finally:
                self._depth -= 1

    @property
    def outside(self) -> bool:
        """Whether a split node is emitting outside the units handed out."""
        return self.active and self._depth == 0
