"""Convolution (``aten.convolution``, 1-D and 2-D, any stride, padding, dilation, groups) as an
implicit GEMM on TensorE.

Per group, with input channels on partitions (chunks of <= 128 = K tiles):

    out[co, n, oh, ow] = sum over ci chunks, taps (kh, kw) of
        w[co, ci, kh, kw] * x[n, ci, oh * sh - ph + kh * dh, ow * sw - pw + kw * dw]

is, per output block (<= 512 outputs: one PSUM bank) and per block of <= 128 output channels,
one PSUM accumulation group of ``ci chunks x KH x KW`` ``nc_matmul``: the stationary operand is
the tap's weights [ci, co], the moving operand the tap's shifted view of the block's input
window [ci, images, rows, cols] (``bridge.tiling.windows``; strides and dilation are steps of
that view). The window is loaded once per block with one strided DMA per ci chunk, clipped to
the input; its padding is zero-filled on chip, so nothing is read out of bounds. Weights are
loaded once as [ci, co, tap] (runs of KH*KW contiguous elements) and stay resident for as many
output-channel blocks as fit in half the matmul share of SBUF; the windows are reloaded once per
such group. PSUM is evacuated by ScalarE with the bias fused (``activation(identity, bias=)``),
or alternately by VectorE/ScalarE without bias. Under a ``ChannelEpilogue`` (``passes.conv_bn``:
conv + eval batch norm [+ ReLU]) the evacuation applies a per-channel scale and shift and the
activation in the same one ScalarE instruction.

TensorE cost: ``groups x output blocks x co blocks x ci chunks x KH x KW`` matmuls, each
[ci <= 128, co <= 128] x [ci, <= 512 outputs].

Grouped convolutions run group by group on TensorE; a depthwise one (one input channel per
group) then uses one PE row per matmul — correct, but a VectorE formulation would be faster.
Transposed convolutions and 3-D convolutions are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from hwsim import lang
from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.errors import BridgeError, Reason, Unsupported
from hwsim.bridge.registry import OpCall, register_lowering
from hwsim.bridge.tiling.space import TilingError, hbm_ap
from hwsim.bridge.tiling.windows import AxisGeometry, OutputBlock, plan_blocks
from hwsim.bridge.values import HbmValue
from hwsim.dtypes import DType
from hwsim.kernels.ops import ActivationFunction as Act
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing, Evacuator, chunks

aten = torch.ops.aten

#: Window tiles in flight: the next block's window loads while this one's matmuls run.
WINDOW_BUFFERS = 2


@dataclass(frozen=True)
class ChannelEpilogue:
    """Set as ``LoweringContext.epilogue`` while a convolution lowers (``passes.conv_bn``): its
    PSUM evacuation becomes ``activation(func, acc, scale=s[co], bias=t[co])`` with a per
    output channel scale and shift (an eval batch norm folded with the conv's bias) instead of
    the bias add. ``columns(chunks)``, called once with the conv's blocks of output channels
    (first channel, count), emits their [channels, 1] fp32 scale and shift into SBUF and maps
    each block's first channel to them; groups must be 1."""

    func: Act
    columns: Callable[[Sequence[tuple[int, int]]], dict[int, tuple[lang.View, lang.View]]]


def _conv_check(call: OpCall) -> None:
    x, w = call.args[0], call.args[1]
    transposed = call.args[6] if len(call.args) > 6 else False
    if transposed:
        raise Unsupported(
            call.op,
            Reason.SHAPE,
            "transposed convolution (ConvTranspose) is not lowered: it would need a scatter of "
            "each input over the output (or a zero-stuffed input); only forward convolutions are",
        )
    if x.dim() not in (3, 4) or w.dim() != x.dim():
        raise Unsupported(
            call.op,
            Reason.SHAPE,
            f"{x.dim() - 2}-D convolution (input {tuple(x.shape)}): only 1-D and 2-D are lowered",
        )


@dataclass(frozen=True)
class ConvShape:
    """One group's convolution: x [N, C_in, H, W], w [C_out, C_in, KH, KW] -> out
    [N, C_out, OH, OW]."""

    batch: int
    c_in: int
    c_out: int
    rows: AxisGeometry
    cols: AxisGeometry
    out_rows: int
    out_cols: int

    @property
    def taps(self) -> int:
        return self.rows.kernel * self.cols.kernel


@register_lowering(aten.convolution.default, family="conv", check=_conv_check)
def convolution(
    ctx: LoweringContext,
    x: HbmValue,
    weight: HbmValue,
    bias: HbmValue | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
) -> HbmValue:
    """out = conv(x, weight) + bias, NC(H)W like torch; 1-D runs as 2-D with H = 1."""
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    stride, dilation = _pairs(stride, x.ndim, 1), _pairs(dilation, x.ndim, 1)
    padding = _pairs(padding, x.ndim, 0)
    out4 = out
    if x.ndim == 3:  # [N, C, L] -> [N, C, 1, L]
        x, weight, out4 = x.unsqueeze(2), weight.unsqueeze(2), out.unsqueeze(2)
    c_in_group, c_out_group = weight.shape[1], weight.shape[0] // groups
    shape = ConvShape(
        x.shape[0],
        c_in_group,
        c_out_group,
        AxisGeometry(x.shape[2], weight.shape[2], stride[0], padding[0], dilation[0]),
        AxisGeometry(x.shape[3], weight.shape[3], stride[1], padding[1], dilation[1]),
        out4.shape[2],
        out4.shape[3],
    )
    epilogue = ctx.epilogue if isinstance(ctx.epilogue, ChannelEpilogue) else None
    if epilogue is not None and (groups != 1 or bias is not None):
        raise BridgeError("a channel epilogue needs groups=1 and the bias folded into it")
    conv = _GroupConv(ctx, shape, ctx.matmul_dtype(out.dtype), epilogue)
    for g in range(groups):
        ci, co = g * c_in_group, g * c_out_group
        conv.emit(
            x.slice(1, ci, ci + c_in_group),
            weight.slice(0, co, co + c_out_group),
            bias.slice(0, co, co + c_out_group) if bias is not None else None,
            out4.slice(1, co, co + c_out_group),
        )
    return out


def _pairs(values: Sequence[int], ndim: int, trivial: int) -> tuple[int, int]:
    """(rows, cols) of a per-spatial-dim argument; a 1-D conv's rows take ``trivial``."""
    values = [int(v) for v in values]
    if ndim == 3:
        return (trivial, values[0])
    return (values[0], values[-1])


class _GroupConv:
    """The tiling of one group's convolution (shared by all groups: same shapes)."""

    def __init__(
        self,
        ctx: LoweringContext,
        shape: ConvShape,
        dtype: DType,
        epilogue: ChannelEpilogue | None = None,
    ) -> None:
        self.epilogue = epilogue
        self.ctx, self.shape, self.dtype = ctx, shape, dtype
        lim = ctx.limits
        item = dtype.itemsize
        self.ci_chunks = chunks(shape.c_in, lim.tile_k)
        share = int(lim.sbuf_bytes * ctx.options.matmul_sbuf_share)
        # Weights: [ci, ci chunk, co, tap] per partition, up to half the share.
        per_co = len(self.ci_chunks) * shape.taps * item
        resident_co = (share // 2) // per_co
        if resident_co < 1:
            raise Unsupported(
                "convolution",
                Reason.SHAPE,
                f"one output channel's weights ({shape.c_in} input channels x {shape.taps} taps) "
                f"need {per_co} bytes per SBUF partition, more than half of the matmul share "
                f"({share} bytes)",
            )
        co_block = min(lim.tile_m, shape.c_out, resident_co)
        self.co_chunks = chunks(shape.c_out, co_block)
        self.columns = epilogue.columns(self.co_chunks) if epilogue is not None else None
        per_group = max(1, resident_co // co_block)
        self.co_groups = [
            self.co_chunks[i : i + per_group] for i in range(0, len(self.co_chunks), per_group)
        ]
        weight_bytes = min(resident_co, len(self.co_chunks) * co_block) * per_co
        rows, cols = shape.rows, shape.cols

        def window_bytes(images: int, r: int, c: int) -> int:
            size = images * rows.window_size(r) * cols.window_size(c)
            return WINDOW_BUFFERS * len(self.ci_chunks) * size * item

        try:
            self.blocks = plan_blocks(
                shape.batch,
                shape.out_rows,
                shape.out_cols,
                max_elements=lim.tile_n,
                block_bytes=window_bytes,
                budget_bytes=share - weight_bytes,
            )
        except TilingError as error:
            raise Unsupported("convolution", Reason.SHAPE, f"input window: {error}") from None
        largest = max(self.blocks, key=lambda b: b.elements)
        self.result_shape = (co_block, largest.images, largest.rows, largest.cols)
        self.windows = BufferRing(WINDOW_BUFFERS)
        self.psum = BufferRing(max(2, lim.psum_banks // 2))
        self.results = BufferRing(2)
        self.evacuate = Evacuator()

    def emit(self, x: HbmValue, w: HbmValue, bias: HbmValue | None, out: HbmValue) -> None:
        bias_tile = self._load_bias(bias) if bias is not None else None
        for group in self.co_groups:
            weights = self._load_weights(w, group)
            for block in self.blocks:
                window = self._load_window(x, block)
                co_local = 0  # the chunk's first column in the group's weight tile
                for co0, mt in group:
                    acc = self._accumulate(weights, window, block, co_local, mt)
                    index = self.co_chunks.index((co0, mt))
                    self._store(acc, out, block, co0, mt, bias_tile, index)
                    co_local += mt

    # ---- loads ---------------------------------------------------------------------------------
    def _load_weights(self, w: HbmValue, group: list[tuple[int, int]]) -> lang.Tile:
        """SBUF [ci, ci chunk, co, tap] = w[co, ci, kh, kw] for the group's output channels."""
        tk = self.ctx.limits.tile_k
        co_first = group[0][0]
        co_total = sum(mt for _, mt in group)
        kh, kw = self.shape.rows.kernel, self.shape.cols.kernel
        tile = lang.ndarray((tk, len(self.ci_chunks), co_total, kh * kw), self.dtype, lang.sbuf)
        s_co, s_ci, s_kh, s_kw = w.strides
        for cc, (ci0, cw) in enumerate(self.ci_chunks):
            src = hbm_ap(
                w,
                w.offset + co_first * s_co + ci0 * s_ci,
                cw,
                s_ci,
                (co_total, kh, kw),
                (s_co, s_kh, s_kw),
            )
            self.ctx.queues.load(tile[:cw, cc, :, :], src, engine=self.ctx.queues.store_engine)
        return tile

    def _load_bias(self, bias: HbmValue) -> lang.Tile:
        """SBUF [co, co chunk] fp32: one bias per partition, for the evacuation's bias."""
        tm = self.ctx.limits.tile_m
        tile = lang.ndarray((tm, len(self.co_chunks)), lang.float32, lang.sbuf)
        (s_co,) = bias.strides
        for i, (co0, mt) in enumerate(self.co_chunks):
            src = hbm_ap(bias, bias.offset + co0 * s_co, mt, s_co, (1,), (1,))
            self.ctx.queues.load(tile[:mt, i : i + 1], src, engine=self.ctx.queues.store_engine)
        return tile

    def _load_window(self, x: HbmValue, block: OutputBlock) -> lang.View:
        """SBUF [ci, ci chunk, images, window rows, window cols]: the inputs ``block`` reads,
        padding zero-filled on chip."""
        rows = self.shape.rows.window(block.row0, block.rows)
        cols = self.shape.cols.window(block.col0, block.cols)
        tk = self.ctx.limits.tile_k
        shape = (tk, len(self.ci_chunks), block.images, rows.size, cols.size)
        tile = self.windows(shape, self.dtype, lang.sbuf)
        if rows.clipped or cols.clipped:
            nisa.memset(tile, 0.0, engine="gpsimd")
        if rows.hi == rows.lo or cols.hi == cols.lo:
            return tile  # the whole window is padding
        s_n, s_c, s_h, s_w = x.strides
        for cc, (ci0, cw) in enumerate(self.ci_chunks):
            src = hbm_ap(
                x,
                x.offset
                + block.n0 * s_n
                + ci0 * s_c
                + rows.first_input * s_h
                + cols.first_input * s_w,
                cw,
                s_c,
                (block.images, rows.hi - rows.lo, cols.hi - cols.lo),
                (s_n, s_h * rows.step, s_w * cols.step),
            )
            self.ctx.queues.load(tile[:cw, cc, :, rows.lo : rows.hi, cols.lo : cols.hi], src)
        return tile

    # ---- compute and store ---------------------------------------------------------------------
    def _accumulate(
        self, weights: lang.Tile, window: lang.View, block: OutputBlock, co_local: int, mt: int
    ) -> lang.View:
        """PSUM [mt, images, rows, cols] = sum over ci chunks and taps (one accumulation group)."""
        shape = self.shape
        acc = self.psum((mt, block.images, block.rows, block.cols), lang.float32, lang.psum)
        steps = [
            (cc, kh, kw)
            for cc in range(len(self.ci_chunks))
            for kh in range(shape.rows.kernel)
            for kw in range(shape.cols.kernel)
        ]
        for i, (cc, kh, kw) in enumerate(steps):
            cw = self.ci_chunks[cc][1]
            tap = kh * shape.cols.kernel + kw
            moving = window[
                :cw, cc, :, shape.rows.tap(kh, block.rows), shape.cols.tap(kw, block.cols)
            ]
            nisa.nc_matmul(
                acc, weights[:cw, cc, co_local : co_local + mt, tap], moving, accumulate=i > 0
            )
        return acc

    def _store(
        self,
        acc: lang.View,
        out: HbmValue,
        block: OutputBlock,
        co0: int,
        mt: int,
        bias_tile: lang.Tile | None,
        index: int,
    ) -> None:
        result_dtype = self.ctx.tile_dtype(out.dtype)
        shape = (mt, block.images, block.rows, block.cols)
        result = self.results(shape, result_dtype, lang.sbuf, max_shape=self.result_shape)
        if self.epilogue is not None and self.columns is not None:  # folded BN (+ ReLU)
            scale, shift = self.columns[co0]
            nisa.activation(result, self.epilogue.func, acc, scale=scale, bias=shift)
        elif bias_tile is not None:
            nisa.activation(result, Act.identity, acc, bias=bias_tile[:mt, index : index + 1])
        else:
            self.evacuate(result, acc)
        s_n, s_c, s_h, s_w = out.strides
        dst = hbm_ap(
            out,
            out.offset + block.n0 * s_n + co0 * s_c + block.row0 * s_h + block.col0 * s_w,
            mt,
            s_c,
            (block.images, block.rows, block.cols),
            (s_n, s_h, s_w),
        )
        self.ctx.queues.store(dst, result)
