"""Multi-buffering: ``par_dim`` and block dimensions, NKI's first-class form of buffer rings.

In NKI, ``nl.ndarray((2, nl.par_dim(128), 512), buffer=nl.sbuf)`` is a tensor of two blocks,
each a [128, 512] tile: the dimensions before the ``par_dim`` are block dimensions, and a kernel
writes ``buf[i % 2]`` to take turns. Each block is its own allocation here (a tile of the pool,
with its own place), so the loads into block ``(i + 1) % 2`` need not wait for the compute that
still reads block ``i % 2``, while block ``i % 2``'s next load waits for its previous readers
(WAR, added by the builder): a producer runs up to ``blocks - 1`` uses ahead. Blocks are freed
like tiles (when the ``BlockTile`` dies, or after their last use when memory runs short).

``BlockTile.next()`` hands the blocks out in turn, for a kernel that does not keep a counter
(the hand-made ``BufferRing`` of ``hwsim.library.common`` does the same with plain tiles).
"""

from __future__ import annotations

import math
from typing import Any

from hwsim.dtypes import DType
from hwsim.errors import IllegalInstructionError
from hwsim.lang.tiles import Buffer, Tile, View


class ParDim(int):
    """A dimension marked as the partition dimension (NKI ``nl.par_dim``)."""

    def __repr__(self) -> str:
        return f"par_dim({int(self)})"


def par_dim(size: int) -> ParDim:
    """Mark ``size`` as the partition dimension of an ``ndarray`` shape (NKI ``nl.par_dim``);
    the dimensions before it are block dimensions (one tile each: multi-buffering)."""
    return ParDim(int(size))


def split_block_dims(shape: tuple[int, ...], where: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(block dims, tile shape) of an on-chip ``ndarray`` shape; without a ``par_dim`` the first
    dimension is the partition dimension and there are no block dims."""
    marked = [i for i, n in enumerate(shape) if isinstance(n, ParDim)]
    if not marked:
        return (), tuple(int(n) for n in shape)
    if len(marked) > 1:
        raise IllegalInstructionError(f"{where}: ndarray shape {shape} has more than one par_dim")
    at = marked[0]
    return tuple(int(n) for n in shape[:at]), tuple(int(n) for n in shape[at:])


class BlockTile(Tile):
    """A tensor of block dimensions x [partitions, *free] tiles; index the blocks with ints
    (``buf[i]``, ``buf[i, j]``), then the tile as usual (``buf[i, 0:64, :]``)."""

    def __init__(
        self,
        name: str,
        block_shape: tuple[int, ...],
        blocks: list[Tile],
        dtype: DType,
        buffer: Buffer,
    ) -> None:
        super().__init__(name, (*block_shape, *blocks[0].shape), dtype, buffer)
        self.block_shape = block_shape
        self.blocks = blocks
        self._turn = 0

    def __repr__(self) -> str:
        tile = ", ".join(map(str, self.blocks[0].shape))
        return f"{self.name}: {self.buffer}[{self.block_shape} x par_dim {tile}] {self.dtype}"

    def block_tile(self, *index: int) -> Tile:
        """The tile of block ``index`` (one int per block dimension)."""
        if len(index) != len(self.block_shape):
            raise self._fail(
                f"{len(index)} block indices for {len(self.block_shape)} block dimensions"
            )
        flat = 0
        for position, (value, count) in enumerate(zip(index, self.block_shape, strict=True)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise self._fail(
                    f"block index {value!r} of dimension {position} must be an int "
                    "(an instruction's operand lies in one block)"
                )
            if not -count <= value < count:
                raise self._fail(f"block index {value} out of range for {count} blocks")
            flat = flat * count + (value + count if value < 0 else value)
        return self.blocks[flat]

    def next(self) -> Tile:
        """The next block in turn (a ring over all blocks)."""
        tile = self.blocks[self._turn]
        self._turn = (self._turn + 1) % len(self.blocks)
        return tile

    def __getitem__(self, index: Any) -> View:
        items = index if isinstance(index, tuple) else (index,)
        count = len(self.block_shape)
        tile = self.block_tile(*items[:count])
        return tile.full()[items[count:]] if len(items) > count else tile.full()

    def full(self) -> View:
        raise self._fail("index a block first (buf[i]): an operand is one block's tile")

    def _fail(self, message: str) -> IllegalInstructionError:
        from hwsim.lang.tiles import IndexingError, _where

        return IndexingError(f"{_where()}{self.name}: {message}")

    @property
    def block_count(self) -> int:
        return math.prod(self.block_shape)


def block_ndarray(
    block_dims: tuple[int, ...],
    tile_shape: tuple[int, ...],
    dtype: DType,
    buffer: Buffer,
    name: str,
) -> BlockTile:
    """One tile per block (``ndarray`` with a ``par_dim`` after leading dimensions)."""
    from hwsim.lang.kernel import ndarray  # kernel imports this module

    if any(n < 1 for n in block_dims):
        raise IllegalInstructionError(f"ndarray block dimensions {block_dims} must be positive")
    blocks = []
    for flat in range(math.prod(block_dims)):
        index, rest = [], flat
        for count in reversed(block_dims):
            index.append(rest % count)
            rest //= count
        label = ",".join(map(str, reversed(index)))
        blocks.append(ndarray(tile_shape, dtype, buffer, name=f"{name}[{label}]"))
    return BlockTile(name, block_dims, blocks, dtype, buffer)
