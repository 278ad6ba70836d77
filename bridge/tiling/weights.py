"""Weights streamed from HBM through an SBUF ring the whole program shares, ahead of their use.

A model run at small batch reads every weight once and does little with it: the DMA engines are
the bottleneck, and every moment they idle between two matmuls is lost. The Neuron compiler
prefetches the next weights while the current op computes. ``WeightStream`` does it by
construction:

- **a ring**: ``TilingOptions.weight_ring_share`` of each SBUF partition, allocated once for the
  program and used by nothing else. The program's weight blocks (in program order, across ops
  and layers) take consecutive places in it, wrapping to its start, so a block's DMA waits only
  for the matmuls that read the bytes it lands on — blocks a ring's length earlier — never for
  an unrelated reader of recycled SBUF (a fresh tile can inherit the last reader of its bytes);
- **a trigger engine of its own**: every weight DMA is triggered by the Sync engine, whose
  stream holds nothing else, on a queue of its own; every other load is triggered elsewhere
  (``ResidentQueues``: ``weight_stream``). An in-order trigger engine waiting for ring space
  would otherwise hold up the loads of the op running now (what made prefetching slower before:
  docs/compiler.md). So the Sync engine runs a ring's worth of weights ahead of TensorE, across
  op boundaries and layers: the weights of the next ops are in SBUF when they start;
- **whole-K blocks**: a block is every K tile of ``block_columns`` columns of a prepared weight
  (at most ``weight_block_share`` of a partition), laid out in HBM as one contiguous run per
  partition (``PreparedLayout``), so each DMA descriptor is a whole run and the matmul
  accumulates a PSUM tile over all of K without reloading anything; the matmul then loops over
  its output rows with the block resident (``MatmulTiler``: a weight is read once per call,
  whatever the batch).

Prefetching shares the DMA engines with the running op's own loads (they are served round-robin,
HARDWARE.md §2.5); with activations on chip (``bridge.residency``) those are few.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hwsim import lang
from hwsim.bridge.values import PreparedMatrix
from hwsim.dtypes import DType
from hwsim.lang import isa as nisa
from hwsim.lang.tiles import Tile, View
from hwsim.library.common import Limits

if TYPE_CHECKING:
    from hwsim.bridge.context import TilingOptions

#: The trigger engine of weight DMAs (its stream holds nothing else: module docstring).
WEIGHT_ENGINE = "sync"


def block_columns(k: int, n: int, itemsize: int, lim: Limits, block_bytes: int) -> int:
    """Columns of a weight block: the most whole PSUM banks of columns (``tile_n``) whose K
    tiles fit ``block_bytes`` per partition (a narrow matrix is one block). A deep matrix whose
    one bank of columns is past ``block_bytes`` (BERT-large's [4096, 1024] down-projection on
    trn1) streams in blocks of the columns that fit, narrower than a bank."""
    tiles = -(-k // lim.tile_k)
    fits = block_bytes // max(1, tiles * itemsize)
    banks = fits // lim.tile_n
    if banks == 0:
        return min(n, max(1, fits))
    return min(n, banks * lim.tile_n)


class WeightStream:
    """The program's weight ring and its DMAs (module docstring)."""

    def __init__(self, lim: Limits, ring_bytes: int, block_bytes: int, queue: int) -> None:
        self.lim = lim
        self.ring_bytes = ring_bytes
        self.block_bytes = block_bytes
        self.queue = queue
        self._rings: dict[str, Tile] = {}
        self._offset: dict[str, int] = {}
        self.blocks_loaded = 0
        self.bytes_loaded = 0

    @property
    def sbuf_bytes(self) -> int:
        """Bytes per partition one dtype's ring holds."""
        return self.ring_bytes

    def reserve(self, dtype: DType) -> Tile:
        """The ring of ``dtype``, allocated now if it is not yet (for the program)."""
        ring = self._rings.get(dtype.name)
        if ring is None:
            shape = (self.lim.pmax, self.ring_bytes // dtype.itemsize)
            ring = self._rings[dtype.name] = lang.ndarray(
                shape, dtype, lang.sbuf, name=f"weights_{dtype.name}"
            )
            self._offset[dtype.name] = 0
        return ring

    def load(self, weight: PreparedMatrix, n0: int) -> View:
        """The block of ``weight`` starting at column ``n0``, at the ring's next free place,
        as [rows, tiles * width] (K tile j of column c at ``[:, j * width + c]``)."""
        layout = weight.layout
        assert layout is not None
        width = min(layout.block, layout.n - n0)
        run = layout.tiles * width
        ring = self.reserve(weight.dtype)
        capacity = ring.shape[1]
        if run > min(capacity, self.block_bytes // weight.dtype.itemsize):
            raise ValueError(
                f"{weight.name}: a block of {run} elements per partition does not fit the "
                f"{self.block_bytes}-byte weight blocks"
            )
        start = self._offset[weight.dtype.name]
        if start + run > capacity:  # blocks do not wrap: the next starts at the ring's start
            start = 0
        self._offset[weight.dtype.name] = start + run
        dst = ring[: layout.rows, start : start + run]
        nisa.dma_copy(dst, weight.block_ap(n0), engine=WEIGHT_ENGINE, queue=self.queue)
        self.blocks_loaded += 1
        self.bytes_loaded += layout.rows * run * weight.dtype.itemsize
        return dst


def weight_block_bytes(lim: Limits, options: TilingOptions) -> int:
    """Most bytes per partition of one weight block on a config
    (``TilingOptions.weight_block_share`` of a partition, whole 128-byte lines)."""
    return int(lim.sbuf_bytes * options.weight_block_share) // 128 * 128


def weight_ring_bytes(lim: Limits, options: TilingOptions) -> int:
    """Bytes per partition of the weight ring (``TilingOptions.weight_ring_share``)."""
    return int(lim.sbuf_bytes * options.weight_ring_share) // 128 * 128
