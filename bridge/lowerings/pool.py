"""Pooling: ``max_pool2d_with_indices`` (values and torch's int64 indices) and
``_adaptive_avg_pool2d``, with image planes (N x C) on partitions and space on the free axis.

Max pool: per block of outputs (``bridge.tiling.windows``) the input window is loaded once per
128 planes, clipped to the input, with its padding (and what ``ceil_mode`` reads past the end)
filled with -inf on chip. The max is one VectorE ``tensor_tensor(max)`` per tap over the tap's
strided view of the window. The index torch returns is ``ih * W + iw`` of the first maximum in
tap order (kh outer, kw inner). Among the taps of one output that lie inside the input, that
flat index grows with the tap, so "first maximum" is "smallest flat index among taps equal to
the maximum", computed as

    best[o] = min over taps t of (x_t[o] == max[o]) * (c_t - BIG)          2 VectorE ops per tap
    index[o] = best[o] + BIG + base[o]                                     1 VectorE op

where c_t = kh * dilation_h * W + kw * dilation_w is the tap's offset from the window's corner,
base[o] = (oh * sh - ph) * W + (ow * sw - pw) comes from one GpSimdE ``iota`` per block, and
BIG > every c_t keeps the products of matching taps negative. Indices are exact while
H * W < 2**24 (fp32 integers). Cost per block of 128 planes: 3 x taps + 1 VectorE instructions.
Not as torch: a NaN is not propagated as the maximum, and a window whose inputs are all -inf
may report a padding position.

Adaptive average pool (torch's windows: rows [floor(i * H / OH), ceil((i + 1) * H / OH))):
when the windows tile the input exactly (H % OH == 0 and W % OW == 0) one 2-axis
``tensor_reduce`` and one scale per block; otherwise separably, per output column a reduce over
its input columns, then per output row a reduce over its rows, each scaled by 1 / count
(2 x (rows + cols) VectorE instructions per block). ``(1, 1)`` arrives as ``mean.dim``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import torch

from hwsim import lang
from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import FLOAT_DTYPES
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.registry import OpCall, register_lowering
from hwsim.bridge.tiling.space import TilingError, hbm_ap
from hwsim.bridge.tiling.windows import AxisGeometry, AxisWindow, OutputBlock, plan_blocks
from hwsim.bridge.values import HbmValue
from hwsim.dtypes import DType
from hwsim.kernels.ops import AluOp, ReduceOp
from hwsim.lang import isa as nisa
from hwsim.lang.tiles import as_ap
from hwsim.library.common import BufferRing, chunks

aten = torch.ops.aten

#: Tiles of each kind in flight (the next block loads while this one computes).
POOL_BUFFERS = 2


@dataclass(frozen=True)
class Planes:
    """A run of image planes of one tensor: [planes, H, W] with a uniform plane stride."""

    value: HbmValue  # [planes, H, W]

    @property
    def count(self) -> int:
        return self.value.shape[0]

    def ap(
        self,
        p0: int,
        p: int,
        row0: int,
        rows: int,
        col0: int,
        cols: int,
        row_step: int = 1,
        col_step: int = 1,
    ):
        s_p, s_h, s_w = self.value.strides
        offset = self.value.offset + p0 * s_p + row0 * s_h + col0 * s_w
        return hbm_ap(self.value, offset, p, s_p, (rows, cols), (s_h * row_step, s_w * col_step))


def _planes(values: Sequence[HbmValue]) -> Iterator[list[Planes]]:
    """Matching runs of planes of tensors shaped alike ([N, C, H, W] or [C, H, W]): all of them
    at once when N and C merge in every tensor, else one image at a time."""
    if values[0].ndim == 3:
        yield [Planes(v) for v in values]
        return
    n, c = values[0].shape[:2]
    merged = [v.view((n * c, *v.shape[2:])) for v in values]
    if all(m is not None for m in merged):
        yield [Planes(m) for m in merged]  # type: ignore[arg-type]
        return
    for i in range(n):
        yield [Planes(v.select(0, i)) for v in values]


def _pool_check(call: OpCall) -> None:
    x = call.args[0]
    if x.dim() not in (3, 4):
        raise Unsupported(call.op, Reason.SHAPE, f"input {tuple(x.shape)} is not [N,] C, H, W")
    if not x.dtype.is_floating_point:
        raise Unsupported(call.op, Reason.DTYPE, f"input dtype {x.dtype}: pooling of floats only")
    h, w = x.shape[-2:]
    if h * w >= 2**24:
        raise Unsupported(
            call.op, Reason.SHAPE, f"a {h}x{w} plane: indices past 2**24 are not exact in fp32"
        )


def _pair(values: Sequence[int] | int, default: int) -> tuple[int, int]:
    if isinstance(values, int):
        return values, values
    values = list(values) or [default]
    return int(values[0]), int(values[-1])


# ---- max pool -------------------------------------------------------------------------------


@register_lowering(
    aten.max_pool2d_with_indices.default,
    family="pool",
    dtypes=FLOAT_DTYPES | {torch.int64},
    check=_pool_check,
)
def max_pool2d_with_indices(
    ctx: LoweringContext,
    x: HbmValue,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    dilation: Sequence[int] = (1,),
    ceil_mode: bool = False,
) -> tuple[HbmValue, HbmValue]:
    """(values, indices) of 2-D max pooling; indices are ``ih * W + iw`` within each plane."""
    values_meta, indices_meta = ctx.out
    kh, kw = _pair(kernel_size, 1)
    sh, sw = _pair(stride, 0) if list(stride) else (kh, kw)  # torch: stride defaults to kernel
    ph, pw = _pair(padding, 0)
    dh, dw = _pair(dilation, 1)
    height, width = x.shape[-2:]
    rows = AxisGeometry(height, kh, sh, ph, dh)
    cols = AxisGeometry(width, kw, sw, pw, dw)
    values = ctx.new_value(values_meta.shape, values_meta.dtype)
    indices = ctx.new_value(indices_meta.shape, indices_meta.dtype)
    pool = _MaxPool(ctx, rows, cols, values_meta.shape[-2:], ctx.tile_dtype(x.dtype))
    for src, dst_values, dst_indices in _planes([x, values, indices]):
        for p0, p in chunks(src.count, ctx.pmax):
            for block in pool.blocks:
                pool.emit(src, dst_values, dst_indices, p0, p, block)
    return values, indices


class _MaxPool:
    """Per-block max pooling with indices (module docstring)."""

    def __init__(
        self,
        ctx: LoweringContext,
        rows: AxisGeometry,
        cols: AxisGeometry,
        out_shape: tuple[int, int],
        dtype: DType,
    ) -> None:
        self.ctx, self.rows, self.cols, self.dtype = ctx, rows, cols, dtype
        item = dtype.itemsize
        # fp32 per output: the equality mask, the running best, the index base, the index.
        per_output = item + 4 * 4

        def block_bytes(images: int, r: int, c: int) -> int:
            window = rows.window_size(r) * cols.window_size(c) * item
            return POOL_BUFFERS * (window + per_output * r * c)

        try:
            self.blocks = plan_blocks(
                1,
                *out_shape,
                max_elements=ctx.options.free_elements,
                block_bytes=block_bytes,
                budget_bytes=ctx.limits.sbuf_bytes // 2,
            )
        except TilingError as error:
            raise Unsupported("max_pool2d", Reason.SHAPE, str(error)) from None
        self.taps = [(a, b) for a in range(rows.kernel) for b in range(cols.kernel)]
        offsets = [a * rows.dilation * cols.size + b * cols.dilation for a, b in self.taps]
        self.big = float(max(offsets) + 1)
        self.tap_offsets = offsets
        self.windows, self.maxima = BufferRing(POOL_BUFFERS), BufferRing(POOL_BUFFERS)
        self.masks, self.bests = BufferRing(POOL_BUFFERS), BufferRing(POOL_BUFFERS)
        self.bases, self.indices = BufferRing(POOL_BUFFERS), BufferRing(POOL_BUFFERS)

    def emit(
        self, src: Planes, values: Planes, indices: Planes, p0: int, p: int, block: OutputBlock
    ) -> None:
        r, c = block.rows, block.cols
        wr, wc = self.rows.window(block.row0, r), self.cols.window(block.col0, c)
        window = self._load(src, p0, p, wr, wc)
        views = [window[:, self.rows.tap(a, r), self.cols.tap(b, c)] for a, b in self.taps]
        out = self.maxima((p, r, c), self.dtype, lang.sbuf)
        if len(views) == 1:
            nisa.tensor_copy(out, views[0])
        else:
            nisa.tensor_tensor(out, views[0], views[1], AluOp.max)
            for view in views[2:]:
                nisa.tensor_tensor(out, out, view, AluOp.max)
        mask = self.masks((p, r, c), lang.float32, lang.sbuf)
        best = self.bests((p, r, c), lang.float32, lang.sbuf)
        for t, view in enumerate(views):
            nisa.tensor_tensor(mask, view, out, AluOp.is_equal)
            weight = self.tap_offsets[t] - self.big  # < 0: a matching tap lowers the minimum
            if t == 0:
                nisa.tensor_scalar(best, mask, AluOp.multiply, weight)
            else:
                nisa.scalar_tensor_tensor(best, mask, AluOp.multiply, weight, AluOp.min, best)
        base = self.bases((p, r, c), lang.float32, lang.sbuf)
        width = self.cols.size
        corner = (block.row0 * self.rows.stride - self.rows.padding) * width + (
            block.col0 * self.cols.stride - self.cols.padding
        )
        nisa.iota(
            base,
            steps=(self.rows.stride * width, self.cols.stride),
            offset=int(corner + self.big),
        )
        index = self.indices((p, r, c), lang.int32, lang.sbuf)
        nisa.tensor_tensor(index, best, base, AluOp.add)
        self.ctx.queues.store(values.ap(p0, p, block.row0, r, block.col0, c), out)
        self.ctx.queues.store(indices.ap(p0, p, block.row0, r, block.col0, c), index)

    def _load(self, src: Planes, p0: int, p: int, wr: AxisWindow, wc: AxisWindow) -> lang.View:
        """SBUF [p, window rows, window cols], padding -inf."""
        tile = self.windows((p, wr.size, wc.size), self.dtype, lang.sbuf)
        if wr.clipped or wc.clipped:
            nisa.memset(tile, -math.inf, engine="gpsimd")
        if wr.hi > wr.lo and wc.hi > wc.lo:
            ap = src.ap(
                p0,
                p,
                wr.first_input,
                wr.hi - wr.lo,
                wc.first_input,
                wc.hi - wc.lo,
                wr.step,
                wc.step,
            )
            self.ctx.queues.load(tile[:, wr.lo : wr.hi, wc.lo : wc.hi], ap)
        return tile


# ---- adaptive average pool ------------------------------------------------------------------


def adaptive_range(i: int, size: int, out: int) -> tuple[int, int]:
    """torch's adaptive window of output i: [floor(i * size / out), ceil((i + 1) * size / out))."""
    return (i * size) // out, -(-((i + 1) * size) // out)


@register_lowering(aten._adaptive_avg_pool2d.default, family="pool", check=_pool_check)
def adaptive_avg_pool2d(ctx: LoweringContext, x: HbmValue, output_size: Sequence[int]) -> HbmValue:
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    height, width = x.shape[-2:]
    out_h, out_w = meta.shape[-2:]
    dtype = ctx.tile_dtype(x.dtype)
    uniform = height % out_h == 0 and width % out_w == 0

    def block_bytes(images: int, r: int, c: int) -> int:
        rows_in = -(-r * height // out_h) + 1
        cols_in = -(-c * width // out_w) + 1
        sums = rows_in * c * 4  # per output column, its rows' sums (fp32)
        return POOL_BUFFERS * (rows_in * cols_in * dtype.itemsize + sums + r * c * 4)

    try:
        blocks = plan_blocks(
            1,
            out_h,
            out_w,
            max_elements=ctx.options.free_elements,
            block_bytes=block_bytes,
            budget_bytes=ctx.limits.sbuf_bytes // 2,
        )
    except TilingError as error:
        raise Unsupported(ctx.call.op, Reason.SHAPE, str(error)) from None
    rings = [BufferRing(POOL_BUFFERS) for _ in range(3)]
    for src, dst in _planes([x, out]):
        for p0, p in chunks(src.count, ctx.pmax):
            for block in blocks:
                (r0, _), (_, r1) = (
                    adaptive_range(i, height, out_h)
                    for i in (block.row0, block.row0 + block.rows - 1)
                )
                (c0, _), (_, c1) = (
                    adaptive_range(j, width, out_w)
                    for j in (block.col0, block.col0 + block.cols - 1)
                )
                window = rings[0]((p, r1 - r0, c1 - c0), dtype, lang.sbuf)
                ctx.queues.load(window, src.ap(p0, p, r0, r1 - r0, c0, c1 - c0))
                result = rings[2]((p, block.rows, block.cols), lang.float32, lang.sbuf)
                if uniform:
                    _uniform_mean(window, result, height // out_h, width // out_w)
                else:
                    sums = rings[1]((p, block.cols, r1 - r0), lang.float32, lang.sbuf)
                    _separable_mean(
                        window, sums, result, block, (r0, c0), (height, width), (out_h, out_w)
                    )
                ctx.queues.store(
                    dst.ap(p0, p, block.row0, block.rows, block.col0, block.cols), result
                )
    return out


def _uniform_mean(window: lang.View, result: lang.View, kh: int, kw: int) -> None:
    """Windows of kh x kw tiling the block: one reduce over the two innermost dims of the
    window seen as [p, rows, cols, kh, kw], then the 1 / count scale."""
    _, rows, cols = result.shape
    width = cols * kw
    grouped = replace(
        as_ap(window, "adaptive_avg_pool2d window"),
        free_sizes=(rows, cols, kh, kw),
        free_strides=(kh * width, kw, width, 1),
    )
    nisa.tensor_reduce(result, ReduceOp.add, grouped, axes=2)
    nisa.tensor_scalar(result, result, AluOp.multiply, 1.0 / (kh * kw))


def _separable_mean(
    window: lang.View,
    sums: lang.View,
    result: lang.View,
    block: OutputBlock,
    corner: tuple[int, int],
    size: tuple[int, int],
    out_size: tuple[int, int],
) -> None:
    """Per output column j: sums[:, j, :] = mean over its input columns (every window row);
    per output row i: result[:, i, :] = mean over its input rows of sums."""
    (r0, c0), (height, width), (out_h, out_w) = corner, size, out_size
    for j in range(block.cols):
        a, b = adaptive_range(block.col0 + j, width, out_w)
        nisa.tensor_reduce(sums[:, j, :], ReduceOp.add, window[:, :, a - c0 : b - c0])
        nisa.tensor_scalar(sums[:, j, :], sums[:, j, :], AluOp.multiply, 1.0 / (b - a))
    for i in range(block.rows):
        a, b = adaptive_range(block.row0 + i, height, out_h)
        nisa.tensor_reduce(result[:, i, :], ReduceOp.add, sums[:, :, a - r0 : b - r0])
        nisa.tensor_scalar(result[:, i, :], result[:, i, :], AluOp.multiply, 1.0 / (b - a))
