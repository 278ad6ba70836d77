"""What the library kernels share: tile limits, buffer rings, DMA queue plans, transposed loads.

Everything here is written in the kernel language (``hwsim.lang``) and runs while a kernel is
being built; sizes come from the config the kernel is built for, so the same kernel tiles itself
for trn1, trn2 or ``tiny``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from hwsim import lang
from hwsim.config import HardwareConfig
from hwsim.cost.planning import dma_transpose_is_faster as transpose_faster
from hwsim.dtypes import DType
from hwsim.dtypes import dtype as lookup_dtype
from hwsim.errors import HwsimError
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.kernels.ops import AluOp, ReduceOp
from hwsim.lang import isa as nisa
from hwsim.lang.tiles import Buffer, Tile, View

Operand = Tile | View
#: What a DMA may read or write: a tile, a view, or an access pattern built directly.
Source = Tile | View | AccessPattern


class UnsupportedShapeError(HwsimError):
    """A library kernel was called with shapes or dtypes it does not support (says which)."""


def require(condition: bool, kernel: str, message: str) -> None:
    """Raise ``UnsupportedShapeError`` naming the kernel when ``condition`` does not hold."""
    if not condition:
        raise UnsupportedShapeError(f"{kernel}: {message}")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def chunks(total: int, size: int) -> list[tuple[int, int]]:
    """(start, length) of consecutive pieces of at most ``size`` covering ``range(total)``."""
    return [(start, min(size, total - start)) for start in range(0, total, size)]


@dataclass(frozen=True)
class Limits:
    """Tile limits of the config being built for (NKI's ``nl.tile_size``)."""

    pmax: int  # partitions of SBUF (and of a VectorE/ScalarE tile)
    tile_k: int  # contraction rows of one matmul
    tile_m: int  # stationary free size (output partitions of one matmul)
    tile_n: int  # moving free size (fp32 elements of one PSUM bank)
    psum_banks: int
    sbuf_bytes: int  # bytes per SBUF partition


def limits(config: HardwareConfig | None = None) -> Limits:
    """Limits of ``config``, or of the config the current kernel is being built for."""
    config = config or lang.config()
    te = config.tensor_engine
    bank_fp32 = config.psum.bytes_per_partition // config.psum.banks // 4
    return Limits(
        pmax=config.sbuf.partitions,
        tile_k=min(te.rows, config.sbuf.partitions),
        tile_m=min(te.stationary_free_max, te.cols, config.psum.partitions),
        tile_n=min(te.moving_free_max, bank_fp32),
        psum_banks=config.psum.banks,
        sbuf_bytes=config.sbuf.bytes_per_partition,
    )


class BufferRing:
    """``buffers`` tiles used in rotation: multi-buffering with no allocator churn.

    The first ``buffers`` calls allocate; later calls hand out the same tiles again in turn (as
    a view of the requested shape), and the builder makes the new writer wait for the readers of
    the previous contents (WAR) — so a producer (DMA, matmul) runs up to ``buffers - 1`` uses
    ahead of its consumers. Allocating once keeps long-lived tiles from landing in the holes a
    rotating buffer leaves (first-fit fragmentation would otherwise make buffers alias
    unpredictably). A request larger than the slot's tile re-allocates that slot.
    """

    def __init__(self, buffers: int) -> None:
        self.buffers = max(1, buffers)
        self._tiles: list[Tile] = []
        self._next = 0
        #: The view handed out per (slot, shape), with the tile it views: the same object each
        #: time round, so a ``lang.repeat`` body capturing it compares equal at once.
        self._views: dict[tuple[int, tuple[int, ...]], tuple[Tile, View]] = {}

    def __call__(
        self,
        shape: tuple[int, ...],
        dtype: str | DType,
        buffer: Buffer,
        *,
        max_shape: tuple[int, ...] | None = None,
    ) -> View:
        """A [shape] view of the next buffer; ``max_shape`` sizes the buffers when the shapes
        asked for vary (so a slot never has to grow while a view of it is still in use)."""
        shape = tuple(shape)
        alloc = tuple(max_shape) if max_shape is not None else shape
        if len(self._tiles) < self.buffers:
            slot = len(self._tiles)
            tile = lang.ndarray(alloc, dtype, buffer)
            self._tiles.append(tile)
        else:
            slot = self._next
            self._next = (self._next + 1) % self.buffers
            tile = self._tiles[slot]
            fits = len(tile.shape) == len(shape) and all(
                n <= have for n, have in zip(shape, tile.shape, strict=True)
            )
            if not fits or tile.dtype != lookup_dtype(dtype) or tile.buffer is not buffer:
                tile = self._tiles[slot] = lang.ndarray(alloc, dtype, buffer)
        cached = self._views.get((slot, shape))
        if cached is not None and cached[0] is tile:
            return cached[1]
        view = tile[tuple(slice(0, n) for n in shape)]
        self._views[(slot, shape)] = (tile, view)
        return view

    def release(self) -> None:
        """Drop the tiles (their memory returns to the pool)."""
        self._tiles.clear()
        self._views.clear()
        self._next = 0


class DmaQueues:
    """Which engine triggers a DMA and on which queue, so stores never block prefetches.

    Streamed loads are triggered by the Sync engine (its stream does nothing else) and rotate
    over ``load_queues`` queues; stores are triggered by another engine (GpSimdE by default,
    idle in most kernels) on their own queue: a store waits for its data, and on its own trigger
    engine and queue that wait holds up no load [S1][S12]. Loads that happen once at the start
    (resident weights) may be triggered by the store engine on a side queue, so the Sync
    engine's trigger time (600 ns per DMA on trn2 [S2][S13]) goes to the streamed operand.
    """

    def __init__(self, load_queues: int = 1, store_engine: str = "gpsimd") -> None:
        queues = lang.config().dma.queues_per_engine
        self.load_queues = max(1, min(load_queues, queues - 2))
        self.store_queue = min(self.load_queues, queues - 1)
        self.side_queue = min(self.load_queues + 1, queues - 1)
        self.store_engine = store_engine
        self._next = itertools.count()

    def _queue(self, engine: str) -> int:
        if engine == "sync":
            return next(self._next) % self.load_queues
        return self.side_queue

    def load(self, dst: Operand, src: Source, *, engine: str = "sync") -> None:
        nisa.dma_copy(dst, src, engine=engine, queue=self._queue(engine))

    def load_transposed(self, dst: Operand, src: Source, *, engine: str = "sync") -> None:
        nisa.dma_transpose(dst, src, engine=engine, queue=self._queue(engine))

    def store(self, dst: Source, src: Operand) -> None:
        nisa.dma_copy(dst, src, engine=self.store_engine, queue=self.store_queue)

    def rows_on_chip(self, src: Source, rows: int, align: int) -> list[tuple[Operand, int]] | None:
        """SBUF tiles that already hold ``src``, a [rows, columns] block, on partitions
        [0, rows) in its dtype, for a reader that can use them where they are: per piece, the
        tile's columns and the first column of ``src`` they hold (a multiple of ``align``).
        None: nothing holds it, and it must be loaded (plain queues keep nothing on chip)."""
        del src, rows, align
        return None


class Evacuator:
    """Copy PSUM results to SBUF, alternating VectorE and ScalarE so neither limits TensorE.

    ScalarE copies with ``activation(copy)`` (NeuronCore-v2 has no ScalarE ``tensor_copy``
    [S15]); both cast to the destination dtype with round-to-nearest-even.
    """

    def __init__(self, engines: tuple[str, ...] = ("vector", "scalar")) -> None:
        self._engines = itertools.cycle(engines)

    def __call__(self, dst: Operand, src: Operand) -> None:
        if next(self._engines) == "scalar":
            nisa.activation(dst, lang.ActivationFunction.copy, src)
        else:
            nisa.tensor_copy(dst, src)


#: The ALU op that merges two partial results of a reduction.
COMBINE = {ReduceOp.add: AluOp.add, ReduceOp.max: AluOp.max, ReduceOp.min: AluOp.min}


def reduce_into(
    acc: Operand, src: Operand, op: ReduceOp, *, first: bool, partials: BufferRing
) -> None:
    """Reduce src [P, F] along its free axis into acc [P, 1]: the first chunk of a row block
    writes acc, a later one reduces into a tile of ``partials`` that is then merged into acc."""
    if first:
        nisa.tensor_reduce(acc, op, src)
    else:
        part = partials(acc.shape, acc.dtype, lang.sbuf)
        nisa.tensor_reduce(part, op, src)
        nisa.tensor_tensor(acc, acc, part, COMBINE[op])


def partition_broadcast(src: Tile, partitions: int) -> AccessPattern:
    """A 1-D HBM tensor [D] read as [partitions, D] (partition stride 0), for one DMA that
    replicates a vector (gamma, beta) on every partition."""
    require(
        src.memory is MemorySpace.HBM and src.ndim == 1,
        "partition_broadcast",
        f"expected a 1-D HBM tensor, got {src!r}",
    )
    return AccessPattern(
        MemorySpace.HBM,
        src.dtype,
        0,
        partitions,
        0,
        (src.shape[0],),
        (1,),
        0,
        src.name,
    )


def column(src: Tile, start: int, count: int) -> AccessPattern:
    """Elements [start, start + count) of a 1-D HBM tensor as [count, 1]: one per partition
    (a per-channel bias or scale). Indexing a 1-D view gives one row [1, count] instead."""
    require(
        src.memory is MemorySpace.HBM
        and src.ndim == 1
        and start >= 0
        and count > 0
        and start + count <= src.shape[0],
        "column",
        f"expected a 1-D HBM tensor with at least {start + count} elements, got {src!r}",
    )
    return AccessPattern(
        MemorySpace.HBM, src.dtype, 0, count, start * src.dtype.itemsize, (1,), (1,), 1, src.name
    )


def row_tiles(
    src: Tile, row0: int, tile_rows: int, count: int, col0: int, cols: int
) -> AccessPattern:
    """HBM rows [row0, row0 + count * tile_rows) of a 2-D tensor, columns [col0, col0 + cols),
    read as [tile_rows, count, cols]: element (p, j, c) = src[row0 + j * tile_rows + p, col0 + c].

    One DMA then fills ``count`` consecutive K tiles of an SBUF [tile_rows, tiles, cols] tile.
    (View indexing cannot split a dimension, so this builds the access pattern directly.)
    """
    require(
        src.memory is MemorySpace.HBM and src.ndim == 2,
        "row_tiles",
        f"expected a 2-D HBM tensor, got {src!r}",
    )
    require(
        row0 >= 0
        and tile_rows > 0
        and count > 0
        and row0 + count * tile_rows <= src.shape[0]
        and col0 >= 0
        and cols > 0
        and col0 + cols <= src.shape[1],
        "row_tiles",
        f"rows [{row0}, {row0 + count * tile_rows}) x cols [{col0}, {col0 + cols}) fall outside "
        f"{src!r}",
    )
    width = src.shape[1]
    return AccessPattern(
        MemorySpace.HBM,
        src.dtype,
        0,
        tile_rows,
        (row0 * width + col0) * src.dtype.itemsize,
        (count, cols),
        (tile_rows * width, 1),
        width,
        src.name,
    )


def dma_transpose_is_faster(
    rows: int, cols: int, dtype: DType, config: HardwareConfig | None = None
) -> bool:
    """Whether a transposing DMA beats a plain DMA plus TensorE transposes on this config (the
    cost model's estimate, ``hwsim.cost.planning.dma_transpose_is_faster``). Only 2-byte dtypes
    can be DMA-transposed [S15]."""
    if dtype.itemsize != 2:
        return False
    config = config or lang.config()
    lim = limits(config)
    return transpose_faster(config, rows, cols, dtype.itemsize, lim.tile_m, lim.tile_k)


class TransposedLoader:
    """Load a block of an HBM matrix transposed into SBUF: dst[k, j, r] = src[r, j*tile_k + k].

    ``mode`` 'dma' uses one ``dma_transpose`` per k tile (2-byte dtypes); 'tensor' loads row
    blocks with plain DMAs, transposes [rows, tile_k] blocks on TensorE into PSUM (several per
    bank) and copies each bank back to SBUF in one instruction; 'auto' picks the cheaper on this
    config (``dma_transpose_is_faster``).
    """

    #: Row blocks of the TensorE path in SBUF at once, so their loads run ahead of the transposes.
    STAGING_BUFFERS = 4

    def __init__(self, queues: DmaQueues, mode: str = "auto") -> None:
        require(mode in ("auto", "dma", "tensor"), "TransposedLoader", f"unknown mode {mode!r}")
        self.queues = queues
        self.mode = mode
        self.lim = limits()
        self.psum_buffers = 2  # PSUM banks the TensorE path rotates over
        self.psum = BufferRing(self.psum_buffers)
        self.staging = BufferRing(self.STAGING_BUFFERS)  # row blocks in flight
        self.copy = Evacuator(("vector",))
        config = lang.config()
        self.bank_bytes = config.psum.bytes_per_partition // config.psum.banks

    def release(self) -> None:
        """Free the PSUM and staging buffers of the TensorE path (when all loads are issued)."""
        self.psum.release()
        self.staging.release()

    def use_dma(self, src: Tile) -> bool:
        if self.mode == "auto":
            return dma_transpose_is_faster(src.shape[0], src.shape[1], src.dtype)
        return self.mode == "dma"

    def load(
        self,
        dst: Operand,
        src: Tile,
        row0: int,
        rows: int,
        col0: int,
        cols: int,
        *,
        engine: str = "sync",
    ) -> None:
        """dst: an SBUF [tile_k, cdiv(cols, tile_k), >= rows] tile or view; src: HBM [R, C].

        Fills dst[:w_j, j, :rows] with src[row0:row0+rows, col0 + j*tile_k : ... + w_j]^T,
        w_j = tile_k except for a shorter last k tile.
        """
        tk = self.lim.tile_k
        pieces = chunks(cols, tk)
        if self.use_dma(src):
            for j, (c, w) in enumerate(pieces):
                self.queues.load_transposed(
                    dst[:w, j, :rows],
                    src[row0 : row0 + rows, col0 + c : col0 + c + w],
                    engine=engine,
                )
            return
        tk = self.lim.tile_k
        for r0, r in chunks(rows, min(self.lim.tile_m, self.lim.pmax)):
            block = src[row0 + r0 : row0 + r0 + r, col0 : col0 + cols]
            held = self.queues.rows_on_chip(block, r, tk)
            if held is not None:  # transposed from where it is: a staging copy would add an
                # engine pass, and a staging buffer whose reuse waits for its last reader
                for rows_held, first in held:
                    tiles = cdiv(rows_held.shape[1], tk)
                    self.transpose(dst[:, first // tk : first // tk + tiles, :], rows_held, r0, r)
                continue
            staging = self.staging((r, cols), src.dtype, lang.sbuf)
            self.queues.load(staging, block, engine=engine)
            self.transpose(dst, staging, r0, r)

    def transpose(self, dst: Operand, rows: Operand, r0: int, r: int) -> None:
        """dst[:w_j, j, r0:r0+r] = rows[:, j*tile_k : ...]ᵀ for SBUF ``rows`` [r, cols]
        (r <= tile_m): TensorE transposes into PSUM (several per bank, in ``rows``' dtype),
        one copy per bank back into ``dst`` (casting to its dtype)."""
        tk = self.lim.tile_k
        pieces = chunks(rows.shape[1], tk)
        group = max(1, self.bank_bytes // (r * rows.dtype.itemsize))
        for g0 in range(0, len(pieces), group):
            part = pieces[g0 : g0 + group]
            ps = self.psum((tk, len(part), r), rows.dtype, lang.psum)
            for i, (c, w) in enumerate(part):
                nisa.nc_transpose(ps[:w, i, :], rows[:, c : c + w])
            full = sum(1 for _, w in part if w == tk)
            if full:
                self.copy(dst[:, g0 : g0 + full, r0 : r0 + r], ps[:, 0:full, :])
            if full < len(part):
                w = part[-1][1]
                self.copy(dst[:w, g0 + full, r0 : r0 + r], ps[:w, full, :])


#: Row tiles in flight for row-wise kernels: load, compute and store of three tiles overlap;
#: two (double buffering) when three do not fit.
ROW_BUFFERS = (3, 2)
#: Share of SBUF row-wise kernels may fill (the rest: statistics, constants, granules).
ROW_SBUF_SHARE = 0.75


def row_buffers(kernel: str, columns: int, per_buffer: int, fixed: int = 0) -> int:
    """How many row tiles of ``columns`` elements a row-wise kernel can keep in flight.

    per_buffer: bytes per column of one row tile's buffers; fixed: bytes per column held once
    (replicated parameters). Raises UnsupportedShapeError when even two do not fit, or when a
    row exceeds a VectorE/ScalarE operand (64K elements from SBUF [S1]).
    """
    lim = limits()
    budget = int(lim.sbuf_bytes * ROW_SBUF_SHARE)
    require(
        columns <= 64 * 1024,
        kernel,
        f"{columns} elements per row exceed a VectorE/ScalarE operand (64K from SBUF [S1])",
    )
    for buffers in ROW_BUFFERS:
        if columns * (buffers * per_buffer + fixed) <= budget:
            return buffers
    most = budget // (ROW_BUFFERS[-1] * per_buffer + fixed)
    raise UnsupportedShapeError(
        f"{kernel}: rows of {columns} elements do not fit SBUF double-buffered "
        f"({columns * (ROW_BUFFERS[-1] * per_buffer + fixed)} of {budget} bytes per partition); "
        f"at most {most} elements per row on {lang.config().chip.name}"
    )
