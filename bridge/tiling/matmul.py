"""Matmul tiling over strided HBM operands: out[M, N] = a[M, K] @ b[K, N] (+ bias), batched.

TensorE computes dst[M, N] (+)= stationary[K, M].T @ moving[K, N] with K on partitions [S15]:
both operands need the contraction dim K on partitions. Per [M <= 128, N <= 512] output tile
(one PSUM bank of fp32), the K tiles (<= 128 rows each) accumulate in PSUM (``accumulate=True``
after the first), so K of any size needs no SBUF partial sums. The limits come from the config
(``hwsim.library.common.limits``: stationary <= 128, moving <= 512, PSUM bank size).

Operands arrive as strided views, and how one gets K onto partitions depends on its layout:

- the K dim is not the contiguous one (e.g. b = W^T of a row-major W^T buffer, or a = x^T): one
  DMA per K block reads [128 K rows, k tiles, columns] directly;
- K is the contiguous dim (e.g. a = x row-major, b = W^T as a view of nn.Linear's W[N, K]): the
  operand is transposed on the way in by the library's ``TransposedLoader`` (TensorE transposes
  through PSUM, or ``dma_transpose`` for 2-byte dtypes, whichever is cheaper on the config).

K is processed in blocks sized to ``TilingOptions.matmul_sbuf_share`` of SBUF; when the whole K of
a stationary block fits, it is loaded once per M block and reused for every N block. Operands are
cast to the precision's compute dtype on load; PSUM accumulates in fp32; the result is evacuated
by VectorE/ScalarE (with the bias add and alpha/beta scaling fused into that copy) and cast to the
output dtype by the store.

A row-major moving operand is loaded for several PSUM tiles at once (``moving_group``), so each
row of its DMA is a descriptor long enough to saturate the DMA engines, with fewer transfers.

Not done yet (next steps): keeping the moving operand resident across M blocks, fp8 double-row,
and swapping operands when M is tiny (a skinny stationary wastes PE columns).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from hwsim import lang
from hwsim.bridge.context import LoweringContext
from hwsim.bridge.errors import BridgeError
from hwsim.bridge.tiling.space import hbm_ap
from hwsim.bridge.values import HbmValue, PreparedMatrix
from hwsim.dtypes import DType
from hwsim.isa.ap import AccessPattern
from hwsim.kernels.ops import AluOp
from hwsim.lang import isa as nisa
from hwsim.lang.tiles import Tile, View
from hwsim.library.common import BufferRing, Evacuator, Limits, TransposedLoader, cdiv, chunks

Operand = Tile | View


class HbmMatrix:
    """A 2-D strided HBM view as the library's loaders index it: ``m[r0:r1, c0:c1]`` gives the
    access pattern of that block (rows on partitions), plus ``shape`` and ``dtype``."""

    def __init__(self, value: HbmValue) -> None:
        if value.ndim != 2:
            raise ValueError(f"HbmMatrix needs a 2-D view, got shape {value.shape}")
        self.value = value
        self.shape = value.shape
        self.dtype = value.dtype

    def __getitem__(self, index: tuple[slice, slice]) -> AccessPattern:
        rows, cols = index
        r0, r1 = _bounds(rows, self.shape[0])
        c0, c1 = _bounds(cols, self.shape[1])
        return self.block(r0, r1 - r0, c0, c1 - c0)

    def block(self, r0: int, rows: int, c0: int, cols: int) -> AccessPattern:
        """Rows [r0, r0 + rows) x columns [c0, c0 + cols), which must lie inside the matrix."""
        inside_rows = 0 <= r0 < r0 + rows <= self.shape[0]
        if not (inside_rows and 0 <= c0 < c0 + cols <= self.shape[1]):
            raise ValueError(
                f"HbmMatrix {self.value.name}: block rows [{r0}, {r0 + rows}) x columns "
                f"[{c0}, {c0 + cols}) is not inside its shape {self.shape}"
            )
        s0, s1 = self.value.strides
        return hbm_ap(self.value, self.value.offset + r0 * s0 + c0 * s1, rows, s0, (cols,), (s1,))


def _bounds(index: slice, size: int) -> tuple[int, int]:
    """[start, stop) of a unit-step slice, unclamped (``block`` checks them against the shape)."""
    if index.step not in (None, 1):
        raise ValueError(f"HbmMatrix slices take unit steps, got {index}")
    start = 0 if index.start is None else index.start
    return start, size if index.stop is None else index.stop


@dataclass
class KOperand:
    """One matmul operand seen as [K, X] (K on partitions): stationary a^T or moving b."""

    view: HbmValue  # [K, X]
    dtype: DType  # on-chip dtype

    def transposed(self) -> bool:
        """Whether K is the contiguous dim (so a plain DMA would read one element per K row)."""
        k_stride, x_stride = self.view.strides
        return k_stride == 1 and x_stride != 1 and self.view.shape[1] > 1


#: Share of SBUF per partition one matmul's tiles may take in all (operands and epilogue); the
#: rest is for tiles other ops of the graph still hold (a named assumption, not a hardware rule).
_SBUF_USABLE = 0.9
#: Most of SBUF per partition a row bias held for a whole product may take (fp32: 6,144
#: columns on trn1); a wider one is loaded per output tile. A tiling choice, not a hardware rule.
ROW_BIAS_SBUF_SHARE = 1 / 8
#: Most of SBUF per partition the stationary aᵀ of every row block of a streamed-weight product
#: may take to be kept across weight blocks (``MatmulTiler._emit_streamed``); a tiling choice.
STATIONARY_SBUF_SHARE = 1 / 4
#: Most of SBUF per partition the staging ring of a transposed load may take with whole rows of
#: K; past it, K is staged in pieces of the DMA's saturating descriptor size (each piece is a
#: DMA of its own, so short rows stay whole). A tiling choice, not a hardware rule.
STAGING_SBUF_SHARE = 1 / 4


def stationary_kept(lim: Limits, m: int, k: int, itemsize: int) -> bool:
    """Whether a streamed-weight product keeps the stationary aᵀ [K, M] of every row block
    across its weight blocks (``STATIONARY_SBUF_SHARE``), rather than loading it per block."""
    per_rows = cdiv(k, lim.tile_k) * lim.tile_m * itemsize
    return len(chunks(m, lim.tile_m)) * per_rows <= int(lim.sbuf_bytes * STATIONARY_SBUF_SHARE)


class MatmulTiler:
    """Emits one [M, K] @ [K, N] product into an [M, N] output view (see module docstring)."""

    def __init__(self, ctx: LoweringContext, compute_dtype: DType) -> None:
        self.ctx = ctx
        self.lim = ctx.limits
        self.dtype = compute_dtype
        mode = ctx.options.transpose
        if compute_dtype.itemsize != 2 and mode == "auto":
            mode = "tensor"  # dma_transpose moves 2-byte dtypes only [S15]
        self.loader = TransposedLoader(ctx.queues, mode=mode)
        self.lhs_ring = BufferRing(2)
        self.rhs_ring = BufferRing(ctx.options.buffers)
        self.psum = BufferRing(2)
        self._psum_used = False  # the PSUM ring is sized by the first product's group
        self.results = ctx.queues.result_ring(ctx.options.buffers)
        self.biases = BufferRing(2)
        self.evacuate = Evacuator()

    def _per_k_tile_bytes(self, m: int, n: int, transposing: bool) -> int:
        """Bytes per partition of one K tile of the operand blocks (both rings)."""
        item = self.dtype.itemsize
        per_k_tile = 2 * m * item + self.ctx.options.buffers * n * item
        if transposing:  # the TransposedLoader's staging rows (4 buffers of one K block)
            per_k_tile += 4 * self.lim.tile_k * 4
        return per_k_tile

    def _epilogue_bytes(self, n: int, out_item: int, bias: bool) -> int:
        """Bytes per partition of the result ring and the fp32 bias ring for [*, n] tiles."""
        return self.ctx.options.buffers * n * out_item + (2 * n * 4 if bias else 0)

    def _bias_rows(self, bias: HbmValue | None, m: int, n: int) -> Operand | None:
        """A bias that is one row for every output row (nn.Linear's), as one SBUF tile
        [min(m, P), n] for the whole product, loaded before its matmuls (the load may replicate
        the row on chip: ``residency.broadcast``); None for any other bias, or one too wide to
        hold (``ROW_BIAS_SBUF_SHARE``): its tiles are loaded per output tile."""
        if bias is None or bias.strides[0] != 0:
            return None
        if n * 4 > int(self.lim.sbuf_bytes * ROW_BIAS_SBUF_SHARE):
            return None
        rows = min(m, self.lim.tile_m)
        tile = lang.ndarray((rows, n), lang.float32, lang.sbuf)
        self.ctx.queues.load(tile, HbmMatrix(bias).block(0, rows, 0, n))
        return tile

    def tile_n(self, m: int, n: int, transposing: bool, out_item: int, bias: bool) -> int:
        """Output columns per tile: the PSUM bank's (moving free) limit, halved until one K
        tile of operands and the epilogue's rings fit SBUF (small configs)."""
        cap = int(self.lim.sbuf_bytes * _SBUF_USABLE)
        tn = min(n, self.lim.tile_n)
        while tn > 1 and (
            self._per_k_tile_bytes(m, tn, transposing) + self._epilogue_bytes(tn, out_item, bias)
            > cap
        ):
            tn = cdiv(tn, 2)
        return tn

    def k_tiles_per_block(self, m: int, n: int, transposing: bool, epilogue_bytes: int = 0) -> int:
        """K tiles per block so the operand blocks fit the configured share of SBUF, and what
        the epilogue's rings leave of it."""
        lim = self.lim
        share = int(lim.sbuf_bytes * self.ctx.options.matmul_sbuf_share)
        budget = min(share, int(lim.sbuf_bytes * _SBUF_USABLE) - epilogue_bytes)
        return max(1, budget // self._per_k_tile_bytes(m, n, transposing))

    def moving_group(self, tn: int, n: int, moving: KOperand) -> int:
        """PSUM tiles whose moving columns one DMA brings in (1 if the operand is transposed
        on the way in: the loader's descriptors run along K, not along N).

        A row of a [K rows, tn columns] block is one DMA descriptor of ``tn * itemsize``
        bytes; below the size at which the config's descriptor-efficiency curve saturates
        (``dma.descriptor_efficiency``: 4 KiB on the presets [S11][S12]) the transfer runs
        below bandwidth, and every transfer pays the start latency. Loading the columns of
        several PSUM tiles per DMA makes the rows long enough to saturate, with fewer
        transfers, as a compiler batches PSUM banks per operand load. The group is bounded
        by the PSUM banks (double-buffered) and by N.
        """
        if moving.transposed() or moving.view.strides[1] != 1:
            return 1
        row_bytes = tn * self.dtype.itemsize
        group = max(1, -(-self._saturating_descriptor_bytes() // row_bytes))
        group = min(group, cdiv(n, tn), max(1, self.lim.psum_banks // 2))
        return group

    def _staging_k_tiles(self, dtype: DType) -> int:
        """K tiles per transposed load of an operand: rows of at least the DMA's saturating
        descriptor size (``moving_group``'s reasoning), at least one tile."""
        row_bytes = self.lim.tile_k * dtype.itemsize
        return max(1, -(-self._saturating_descriptor_bytes() // row_bytes))

    def _saturating_descriptor_bytes(self) -> int:
        """The smallest descriptor size at which the config's DMA reaches full efficiency."""
        curve = sorted(
            (int(size), float(fraction))
            for size, fraction in self.ctx.config.dma.descriptor_efficiency.items()
        )
        if not curve:
            return 0
        best = max(fraction for _, fraction in curve)
        return next(size for size, fraction in curve if fraction >= best)

    def emit(
        self,
        a: HbmValue,
        b: HbmValue,
        out: HbmValue,
        bias: HbmValue | None = None,
        alpha: float = 1.0,
        beta: float = 1.0,
    ) -> None:
        """out[M, N] = alpha * a[M, K] @ b[K, N] + beta * bias[M, N] (bias a broadcast view)."""
        if isinstance(b, PreparedMatrix):
            self._emit_streamed(a, b, out, bias, alpha, beta)
            return
        (m, k), (_, n) = a.shape, b.shape
        lhs = KOperand(a.transpose(0, 1), self.dtype)
        rhs = KOperand(b, self.dtype)
        lim = self.lim
        transposing = lhs.transposed() or rhs.transposed()
        out_item = self.ctx.tile_dtype(out.dtype).itemsize
        tm = min(m, lim.tile_m)
        tn = self.tile_n(tm, n, transposing, out_item, bias is not None)
        group = self.moving_group(tn, n, rhs)
        while group > 1 and (
            self._per_k_tile_bytes(tm, group * tn, transposing)
            + self._epilogue_bytes(tn, out_item, bias is not None)
            > int(lim.sbuf_bytes * _SBUF_USABLE) // 2
        ):
            group -= 1  # a group must leave SBUF room for K blocks of a useful size
        if group > 1 and not self._psum_used:  # room for a group in flight and the next
            self.psum = BufferRing(2 * group)
        self._psum_used = True
        bias_rows = self._bias_rows(bias, m, n)
        epilogue = self._epilogue_bytes(tn, out_item, bias is not None)
        if bias_rows is not None:
            epilogue += n * 4
        per_block = self.k_tiles_per_block(tm, group * tn, transposing, epilogue)
        k_blocks = chunks(k, per_block * lim.tile_k)
        m_blocks, n_groups = chunks(m, lim.tile_m), chunks(n, group * tn)
        split = self.ctx.split  # at LNC > 1: this core's M blocks, or N groups when M is one
        by_rows = len(m_blocks) >= len(n_groups)
        for m0, mt in split.mine(m_blocks) if by_rows else m_blocks:
            resident = None
            if len(k_blocks) == 1:  # all of K fits: load the stationary block once per M block
                resident = self._load(lhs, self.lhs_ring, *k_blocks[0], m0, mt)
            for g0, gw in n_groups if by_rows else split.mine(n_groups):
                n_tiles = chunks(gw, tn)
                accs = [self.psum((mt, nt), lang.float32, lang.psum) for _, nt in n_tiles]
                for kb, (k0, kc) in enumerate(k_blocks):
                    stationary = resident or self._load(lhs, self.lhs_ring, k0, kc, m0, mt)
                    moving = self._load(rhs, self.rhs_ring, k0, kc, g0, gw)
                    for acc, (c0, nt) in zip(accs, n_tiles, strict=True):
                        for j, (_, w) in enumerate(chunks(kc, lim.tile_k)):
                            nisa.nc_matmul(
                                acc,
                                stationary[:w, j, :mt],
                                moving[:w, j, c0 : c0 + nt],
                                accumulate=kb > 0 or j > 0,
                            )
                for acc, (c0, nt) in zip(accs, n_tiles, strict=True):
                    n0 = g0 + c0
                    row = None if bias_rows is None else bias_rows[:mt, n0 : n0 + nt]
                    self._epilogue(acc, out, bias, alpha, beta, m0, mt, n0, nt, row)

    def _emit_streamed(
        self,
        a: HbmValue,
        weight: PreparedMatrix,
        out: HbmValue,
        bias: HbmValue | None,
        alpha: float,
        beta: float,
    ) -> None:
        """``emit`` with a weight prepared at compile time (``passes.prepare_constants``): each
        block of its columns, all of K, comes from the program's weight stream once
        (``tiling.weights``), and every block of output rows is computed against it; the
        stationary aᵀ of each row block is kept for the next weight block when all fit
        ``STATIONARY_SBUF_SHARE``, else loaded again."""
        layout = weight.layout
        stream = self.ctx.weights
        assert layout is not None and stream is not None
        (m, k), n = a.shape, weight.shape[1]
        lim = self.lim
        lhs = KOperand(a.transpose(0, 1), self.dtype)
        rows = chunks(m, lim.tile_m)
        keep = stationary_kept(lim, m, k, self.dtype.itemsize)
        ring = BufferRing(len(rows)) if keep else self.lhs_ring
        kept: dict[int, Operand] = {}
        if not self._psum_used:  # PSUM tiles in flight: what the transposing loader and a
            # row broadcast (2 banks each) leave, at most two per bank of the block
            spare = max(2, lim.psum_banks - 4)
            self.psum = BufferRing(min(spare, 2 * cdiv(layout.block, lim.tile_n)))
        self._psum_used = True
        bias_rows = self._bias_rows(bias, m, n)
        k_pieces = chunks(k, lim.tile_k)
        blocks = list(layout.blocks())
        split = self.ctx.split  # at LNC > 1: this core's weight blocks, or row blocks
        by_rows = len(rows) > len(blocks)
        for n0, width in blocks if by_rows else split.mine(blocks):
            block = stream.load(weight, n0)  # [rows, tiles * width]
            for m0, mt in split.mine(rows) if by_rows else rows:
                stationary = kept.get(m0) or self._load(lhs, ring, 0, k, m0, mt)
                if keep:
                    kept[m0] = stationary
                for c0, nt in chunks(width, lim.tile_n):
                    acc = self.psum((mt, nt), lang.float32, lang.psum)
                    for j, (_, w) in enumerate(k_pieces):
                        columns = block[:w, j * width + c0 : j * width + c0 + nt]
                        nisa.nc_matmul(acc, stationary[:w, j, :mt], columns, accumulate=j > 0)
                    col = n0 + c0
                    row = None if bias_rows is None else bias_rows[:mt, col : col + nt]
                    self._epilogue(acc, out, bias, alpha, beta, m0, mt, col, nt, row)

    def _load(
        self,
        operand: KOperand,
        ring: BufferRing | None,
        k0: int,
        kc: int,
        x0: int,
        xc: int,
        into: Operand | None = None,
    ) -> Operand:
        """SBUF [tile_k, K tiles, xc] holding operand[k0:k0+kc, x0:x0+xc] with K on partitions:
        a tile of ``ring``, or ``into`` (a view of a larger tile, filled by plain loads)."""
        tk = self.lim.tile_k
        tiles = cdiv(kc, tk)
        on_chip = self.transposed(operand, k0)
        if on_chip is not None:  # a norm's rows, transposed in its prologue
            block = on_chip[:, k0 // tk : k0 // tk + tiles, x0 : x0 + xc]
            if into is None:
                return block
            nisa.tensor_copy(into, block)
            return into
        dst = into if into is not None else ring((tk, tiles, xc), self.dtype, lang.sbuf)  # type: ignore[misc]
        if operand.transposed():
            # The loader reads [X rows, K cols] blocks of the operand's transpose (K contiguous),
            # through a staging tile per block: in pieces of K whose rows are just long enough
            # to saturate the DMA, so a long K does not hold a staging ring of whole rows.
            source = HbmMatrix(operand.view.transpose(0, 1))
            ring_bytes = self.loader.STAGING_BUFFERS * kc * source.dtype.itemsize
            whole = ring_bytes <= int(self.lim.sbuf_bytes * STAGING_SBUF_SHARE)
            per_load = tiles if whole else self._staging_k_tiles(source.dtype)
            for j0, tj in chunks(tiles, per_load):
                c0, cw = k0 + j0 * tk, min(kc - j0 * tk, tj * tk)
                self.loader.load(dst[:, j0 : j0 + tj, :], source, x0, xc, c0, cw)  # type: ignore[arg-type]
            return dst
        view = operand.view
        k_stride, x_stride = view.strides
        full = kc // tk
        base, tile_step = view.offset + k0 * k_stride + x0 * x_stride, tk * k_stride
        if full:
            src = hbm_ap(view, base, tk, k_stride, (full, xc), (tile_step, x_stride))
            if full == tiles and into is None:  # one load fills the block: it may be a
                return self.ctx.queues.load_resident(dst, src)  # resident tile itself
            self.ctx.queues.load(dst[:, 0:full, :], src)
        if kc % tk:
            w = kc % tk
            src = hbm_ap(view, base + full * tile_step, w, k_stride, (xc,), (x_stride,))
            self.ctx.queues.load(dst[:w, full, :], src)
        return dst

    def transposed(self, operand: KOperand, k0: int = 0) -> Operand | None:
        """The norm prologue's xᵀ (``tiling.prologue``) that is ``operand`` in this product's
        dtype, for K from ``k0`` (a whole K tile), or None; an error if the norm's rows were
        never stored and it is not that."""
        held = self.ctx.transposed.get(operand.view.tile.name)
        if held is None:
            return None
        found = held.operand(operand.view, self.dtype) if k0 % self.lim.tile_k == 0 else None
        if found is None and not held.store:
            raise BridgeError(
                f"{operand.view.tile.name} is only on chip, as xᵀ in "
                f"{held.dtype.name}, and this matmul reads it as {operand.view.shape} with "
                f"strides {operand.view.strides} in {self.dtype.name} "
                "(passes.norm_prologue admitted a reader it does not feed)"
            )
        return found

    def _epilogue(
        self,
        acc: Operand,
        out: HbmValue,
        bias: HbmValue | None,
        alpha: float,
        beta: float,
        m0: int,
        mt: int,
        n0: int,
        nt: int,
        bias_row: Operand | None = None,
    ) -> None:
        """PSUM -> SBUF (fusing alpha, beta * bias) -> HBM; ``bias_row``: this tile's bias,
        already in SBUF (``_bias_rows``)."""
        result = self.results((mt, nt), self.ctx.tile_dtype(out.dtype), lang.sbuf)
        if bias is not None:
            bias_tile: Operand = self.biases((mt, nt), lang.float32, lang.sbuf)
            if bias_row is not None and beta == 1.0:
                bias_tile = bias_row
            elif bias_row is not None:
                nisa.tensor_scalar(bias_tile, bias_row, AluOp.multiply, beta)
            else:
                self.ctx.queues.load(bias_tile, HbmMatrix(bias).block(m0, mt, n0, nt))
            if beta != 1.0 and bias_row is None:
                nisa.tensor_scalar(bias_tile, bias_tile, AluOp.multiply, beta)
            if alpha != 1.0:
                nisa.scalar_tensor_tensor(result, acc, AluOp.multiply, alpha, AluOp.add, bias_tile)
            else:
                nisa.tensor_tensor(result, acc, bias_tile, AluOp.add)
        elif alpha != 1.0:
            nisa.tensor_scalar(result, acc, AluOp.multiply, alpha)
        else:
            self.evacuate(result, acc)
        if self.ctx.epilogue is not None:  # fused elementwise work on the tile (passes.fusion)
            result = self.ctx.epilogue(result, out, m0, mt, n0, nt)
        self.ctx.queues.store(HbmMatrix(out).block(m0, mt, n0, nt), result)


def emit_matmul(
    ctx: LoweringContext,
    a: HbmValue,
    b: HbmValue,
    out: HbmValue,
    *,
    bias: HbmValue | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
) -> None:
    """out[*B, M, N] = alpha * a[*B, M, K] @ b[*B, K, N] + beta * bias (broadcast to out).

    All operands are views of equal batch dims (broadcast batch dims have stride 0); one 2-D
    product per batch index, all sharing one tiler (its buffers and PSUM banks rotate across
    batches, so consecutive products overlap).
    """
    compute = ctx.matmul_dtype(out.dtype)
    tiler = MatmulTiler(ctx, compute)
    batch = out.shape[:-2]
    products = list(itertools.product(*(range(n) for n in batch)))
    split = len(products) >= ctx.split.cores  # at LNC > 1: whole products per core
    for index in ctx.split.mine(products) if split else products:
        a2, b2, o2 = (_select(v, index) for v in (a, b, out))
        bias2 = _select(bias, index) if bias is not None else None
        tiler.emit(a2, b2, o2, bias2, alpha, beta)


def _select(value: HbmValue, index: tuple[int, ...]) -> HbmValue:
    for i in index:
        value = value.select(0, i)
    return value
