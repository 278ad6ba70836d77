"""Loading the operand tiles of a tile loop: broadcast operands compact, repeated ones once.

An operand broadcast over the iteration space reads its HBM bytes with stride 0 on the dims it
repeats over (``HbmValue.expand``). Moved that way, a DMA pays one descriptor per element: an
``amax`` [rows, 1] read over 128 columns is 128 descriptors of 4 bytes per row instead of one.
What the Neuron compiler does instead, and what ``OperandLoader`` does:

- **free-dim broadcast:** only the compact part is moved (the repeated free dims of size 1: a
  [P, 1] column, a [P, k, 1, m] block), into a small SBUF tile, and the compute reads it through
  a stride-0 view of the full tile shape (``lang.broadcast_to``); the engines cost the view like
  any operand of that shape (``hwsim.cost.streaming`` counts elements, not bytes fetched);
- **partition-dim broadcast** (a bias row read by every partition): SBUF cannot repeat a
  partition on chip (each partition is its own lane), so the row still arrives by one DMA with
  partition stride 0, one descriptor per partition row (as efficient per byte as a dense tile;
  a ones-vector matmul would add a TensorE pass and a PSUM evacuation per tile, and the DMA's
  fixed latency is paid either way: ``docs/compiler.md``);
- **repeated tiles:** when a tile's operand pattern is exactly the one the loader moved last
  (a bias row for every row block, a mask for every head), that SBUF tile is read again with
  no DMA, unless the loop's output tensor is the operand's own (an in-place op overwrites it);
  so is its first partitions when the pattern is the same partition-broadcast row on fewer
  partitions (the last row block of 69 rows after blocks of 128: ViT's 197 tokens).
"""

from __future__ import annotations

from dataclasses import replace

from hwsim import lang
from hwsim.bridge.context import LoweringContext
from hwsim.dtypes import DType
from hwsim.isa.ap import AccessPattern
from hwsim.lang.tiles import Tile, View
from hwsim.library.common import BufferRing

Operand = Tile | View


def compact(ap: AccessPattern) -> tuple[AccessPattern, tuple[int, ...]] | None:
    """For an HBM pattern that repeats free dims (stride 0, size > 1): the pattern of its compact
    part (those dims of size 1) and the SBUF tile shape that holds it, [P, *free sizes]; None
    when no free dim repeats."""
    repeats = [n > 1 and s == 0 for n, s in zip(ap.free_sizes, ap.free_strides, strict=True)]
    if not any(repeats):
        return None
    sizes = tuple(1 if r else n for n, r in zip(ap.free_sizes, repeats, strict=True))
    moved = AccessPattern(
        ap.memory,
        ap.dtype,
        ap.start_partition,
        ap.partitions,
        ap.offset_bytes,
        sizes,
        ap.free_strides,
        ap.partition_stride,
        ap.tensor,
    )
    return moved, (ap.partitions, *sizes)


class OperandLoader:
    """One operand's tiles in a tile loop, in SBUF rings of ``buffers`` (module docstring).

    written: the HBM tensor the loop stores to; an operand read from it is never reused.
    """

    def __init__(self, ctx: LoweringContext, buffers: int, *, written: str) -> None:
        self.ctx = ctx
        self.written = written
        self.dense = BufferRing(buffers)
        self.compact = BufferRing(buffers)
        self._last: tuple[AccessPattern, DType, Operand] | None = None
        self.dmas = 0  # loads emitted (tests and reports)

    def __call__(
        self, ap: AccessPattern, dtype: DType, shape: tuple[int, int], largest: tuple[int, int]
    ) -> Operand:
        """The operand's [P, free] tile for ``ap`` in ``dtype`` (``shape``: its [P, N] size,
        ``largest``: the loop's largest, which sizes the ring's buffers)."""
        last = self._last
        if last is not None and last[0] == ap and last[1] == dtype:
            return last[2]
        if last is not None and last[1] == dtype and repeats_rows_of(ap, last[0]):
            return last[2][: ap.partitions]  # a broadcast row: its partitions are all alike
        found = compact(ap)
        operand: Operand
        if found is None:
            slot = self.dense(shape, dtype, lang.sbuf, max_shape=largest)
            # the residency pass may hand back the SBUF tile a store left the bytes in
            operand = self.ctx.queues.load_resident(slot, ap)
        else:
            moved, tile_shape = found
            bound = (max(largest[0], tile_shape[0]), *tile_shape[1:])
            tile = self.compact(tile_shape, dtype, lang.sbuf, max_shape=bound)
            self.ctx.queues.load(tile, moved)
            operand = lang.broadcast_to(tile, (ap.partitions, *ap.free_sizes))
        self.dmas += 1
        if ap.tensor != self.written:
            self._last = (ap, dtype, operand)
        return operand


def repeats_rows_of(ap: AccessPattern, moved: AccessPattern) -> bool:
    """Whether ``ap`` reads the first partitions of what ``moved`` read: the same row, which
    every partition repeats (partition stride 0), on as many partitions or fewer (the last row
    block of a loop, of fewer rows, reads a bias or a gamma the blocks before it moved)."""
    if ap.partition_stride != 0 or moved.partition_stride != 0 or ap.partitions > moved.partitions:
        return False
    return replace(ap, partitions=moved.partitions) == moved
