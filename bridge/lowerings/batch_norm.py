"""Batch norm over channel dim 1: eval (``_native_batch_norm_legit_no_training``) and training
(``_native_batch_norm_legit_functional``) forward, with channels on partitions.

Both become one ScalarE pass ``activation(identity, x, scale=s[c], bias=t[c])`` per tile with
per-partition (= per-channel) scale and shift, folded once per chunk of <= 128 channels:

    s = weight * rsqrt(var + eps),   t = bias - mean * s

Eval mode takes mean and var from the running statistics; its two other outputs are the empty
tensors torch returns. Training mode first computes each channel's mean and population variance
over N and the spatial dims (VectorE ``bn_stats`` per <= 512 elements of every tile, one
``bn_aggr``; the tiles are read twice, once for the statistics and once to normalise), and
returns them as torch does: ``save_mean``, ``save_invstd = rsqrt(var + eps)``, and the updated
running statistics ``(1 - momentum) * running + momentum * batch`` (the variance unbiased,
times n / (n - 1)).

Eager ``F.batch_norm`` dispatches ``native_batch_norm``: eval is the eval lowering above; training
without running statistics returns (out, save_mean, save_invstd). Training *with* running
statistics is refused: torch updates them in place although the schema does not mark it, and a
lowering never writes its inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hwsim import lang
from hwsim.bridge.context import LoweringContext
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.registry import OpCall, register_lowering
from hwsim.bridge.tiling.space import TileRef, hbm_ap, plan
from hwsim.bridge.values import HbmValue
from hwsim.dtypes import DType
from hwsim.isa.compute_base import BN_STATS_FMAX
from hwsim.kernels import BN_STATS_WIDTH
from hwsim.kernels.ops import ActivationFunction as Act
from hwsim.kernels.ops import AluOp
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing, chunks

aten = torch.ops.aten

#: Per-channel [c, 1] fp32 columns a chunk needs: mean, var, weight, bias, eps, scale, shift,
#: invstd, and the two updated running statistics.
COLUMNS = 10


def _bn_check(call: OpCall) -> None:
    x = call.args[0]
    if x.dim() < 2:
        raise Unsupported(call.op, Reason.SHAPE, f"input {tuple(x.shape)} has no channel dim 1")


class ChannelTiles:
    """Tiles of tensors shaped like x [N, C, *spatial] with channels on partitions: per chunk of
    <= 128 channels, [channels, free] tiles over N and the spatial dims."""

    def __init__(self, ctx: LoweringContext, x: HbmValue, operands: Sequence[HbmValue]) -> None:
        self.ctx = ctx
        self.operands = list(operands)
        rest = (x.shape[0], *x.shape[2:])
        strides = [(v.offset, (v.strides[0], *v.strides[2:])) for v in self.operands]
        budget = ctx.free_budget(2, 4)
        # One-row tiles of the non-channel dims; the channel chunk becomes the partition dim.
        self.tiles: list[TileRef] = plan(rest, strides, pmax=1, free_budget=budget)
        self.largest = max(t.free_elements for t in self.tiles)
        self.channel_chunks = chunks(x.shape[1], ctx.pmax)

    def ap(self, tile: TileRef, k: int, c0: int, cw: int):
        value = self.operands[k]
        s_c = value.strides[1]
        return hbm_ap(
            value, tile.offsets[k] + c0 * s_c, cw, s_c, tile.free_sizes, tile.free_strides[k]
        )


def _column(ctx: LoweringContext, dst: lang.View, value: HbmValue, c0: int, cw: int) -> None:
    """dst[cw, 1] = value[c0 : c0 + cw] (a per-channel vector, one element per partition)."""
    (stride,) = value.strides
    ctx.queues.load(dst, hbm_ap(value, value.offset + c0 * stride, cw, stride, (1,), (1,)))


def _fold(
    ctx: LoweringContext,
    cols: lang.View,
    mean: lang.View,
    var: lang.View,
    weight: HbmValue | None,
    bias: HbmValue | None,
    eps: float,
    c0: int,
) -> tuple[lang.View, lang.View, lang.View]:
    """(scale, shift, invstd) [cw, 1] of one channel chunk; ``cols`` holds the scratch."""
    cw = cols.shape[0]
    eps_col, invstd, scale, shift = (cols[:, i : i + 1] for i in range(4, 8))
    nisa.memset(eps_col, float(eps))
    nisa.activation(invstd, Act.rsqrt, var, bias=eps_col)
    if weight is not None:
        w = cols[:, 2:3]
        _column(ctx, w, weight, c0, cw)
        nisa.tensor_tensor(scale, invstd, w, AluOp.multiply)
    else:
        nisa.tensor_copy(scale, invstd)
    if bias is not None:
        b = cols[:, 3:4]
        _column(ctx, b, bias, c0, cw)
        nisa.scalar_tensor_tensor(
            shift, mean, AluOp.multiply, scale, AluOp.subtract, b, reverse1=True
        )
    else:
        nisa.tensor_scalar(shift, mean, AluOp.multiply, scale, op1=AluOp.multiply, operand1=-1.0)
    return scale, shift, invstd


def channel_affine(
    ctx: LoweringContext,
    channel_chunks: Sequence[tuple[int, int]],
    weight: HbmValue | None,
    bias: HbmValue | None,
    running_mean: HbmValue,
    running_var: HbmValue,
    eps: float,
    conv_bias: HbmValue | None = None,
) -> dict[int, tuple[lang.View, lang.View]]:
    """Per chunk (first channel -> [cw, 1] fp32 (scale, shift)) of the eval batch norm
    ``y = x * s + t`` (``_fold``), with a preceding conv bias b folded in as t' = b * s + t:
    what ``conv.ChannelEpilogue`` applies on the conv's PSUM evacuation (``passes.conv_bn``).
    The columns stay in SBUF for the whole conv (one tile of ``COLUMNS`` per chunk)."""
    most = max(cw for _, cw in channel_chunks)
    tile = lang.ndarray((most, len(channel_chunks) * COLUMNS), lang.float32, lang.sbuf)
    columns: dict[int, tuple[lang.View, lang.View]] = {}
    for i, (c0, cw) in enumerate(channel_chunks):
        cols = tile[:cw, i * COLUMNS : (i + 1) * COLUMNS]
        mean, var = cols[:, 0:1], cols[:, 1:2]
        _column(ctx, mean, running_mean, c0, cw)
        _column(ctx, var, running_var, c0, cw)
        scale, shift, _ = _fold(ctx, cols, mean, var, weight, bias, eps, c0)
        if conv_bias is not None:  # column 8 (eval has no running-statistics update)
            folded = cols[:, 8:9]
            _column(ctx, folded, conv_bias, c0, cw)
            nisa.scalar_tensor_tensor(folded, folded, AluOp.multiply, scale, AluOp.add, shift)
            shift = folded
        columns[c0] = (scale, shift)
    return columns


def _normalize(
    ctx: LoweringContext,
    tiles: ChannelTiles,
    c0: int,
    cw: int,
    scale: lang.View,
    shift: lang.View,
    dtype: DType,
) -> None:
    """out = x * scale + shift for one channel chunk (operand 0 is out, 1 is x)."""
    loads, results = BufferRing(ctx.options.buffers), BufferRing(ctx.options.buffers)
    for tile in tiles.tiles:
        shape = (cw, tile.free_elements)
        largest = (cw, tiles.largest)
        x = loads(shape, dtype, lang.sbuf, max_shape=largest)
        ctx.queues.load(x, tiles.ap(tile, 1, c0, cw))
        y = results(shape, dtype, lang.sbuf, max_shape=largest)
        nisa.activation(y, Act.identity, x, scale=scale, bias=shift)
        ctx.queues.store(tiles.ap(tile, 0, c0, cw), y)


@register_lowering(
    aten._native_batch_norm_legit_no_training.default, family="batch_norm", check=_bn_check
)
def batch_norm_eval(
    ctx: LoweringContext,
    x: HbmValue,
    weight: HbmValue | None,
    bias: HbmValue | None,
    running_mean: HbmValue,
    running_var: HbmValue,
    momentum: float,
    eps: float,
) -> tuple[HbmValue, HbmValue, HbmValue]:
    """(out, empty, empty): batch norm with the running statistics (``momentum`` unused: no
    statistics are updated)."""
    out_meta, mean_meta, rstd_meta = ctx.out
    out = ctx.new_value(out_meta.shape, out_meta.dtype)
    dtype = ctx.tile_dtype(x.dtype)
    tiles = ChannelTiles(ctx, x, [out, x])
    params = BufferRing(2)
    for c0, cw in tiles.channel_chunks:
        cols = params((cw, COLUMNS), lang.float32, lang.sbuf)
        mean, var = cols[:, 0:1], cols[:, 1:2]
        _column(ctx, mean, running_mean, c0, cw)
        _column(ctx, var, running_var, c0, cw)
        scale, shift, _ = _fold(ctx, cols, mean, var, weight, bias, eps, c0)
        _normalize(ctx, tiles, c0, cw, scale, shift, dtype)
    empty_mean = ctx.new_value(mean_meta.shape, mean_meta.dtype)
    empty_rstd = ctx.new_value(rstd_meta.shape, rstd_meta.dtype)
    return out, empty_mean, empty_rstd


@register_lowering(
    aten._native_batch_norm_legit_functional.default, family="batch_norm", check=_bn_check
)
def batch_norm_train(
    ctx: LoweringContext,
    x: HbmValue,
    weight: HbmValue | None,
    bias: HbmValue | None,
    running_mean: HbmValue,
    running_var: HbmValue,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[HbmValue, ...]:
    """(out, save_mean, save_invstd, new_running_mean, new_running_var)."""
    if not training:
        raise Unsupported(
            ctx.call.op, Reason.SHAPE, "training=False (eval graphs use _no_training)"
        )
    return _train(ctx, x, weight, bias, (running_mean, running_var), momentum, eps)


def _native_check(call: OpCall) -> None:
    _bn_check(call)
    running_mean, running_var, training = (
        call.args[i] if len(call.args) > i else call.kwargs.get(name)
        for i, name in ((3, "running_mean"), (4, "running_var"), (5, "training"))
    )
    if training and (running_mean is not None or running_var is not None):
        raise Unsupported(
            call.op,
            Reason.MUTATION,
            "training=True updates running_mean/running_var in place (its schema does not say "
            "so); torch.compile's functionalized graphs use _native_batch_norm_legit_functional",
        )
    if not training and (running_mean is None or running_var is None):
        raise Unsupported(call.op, Reason.SHAPE, "eval batch norm without running statistics")


@register_lowering(aten.native_batch_norm.default, family="batch_norm", check=_native_check)
def native_batch_norm(
    ctx: LoweringContext,
    x: HbmValue,
    weight: HbmValue | None,
    bias: HbmValue | None,
    running_mean: HbmValue | None,
    running_var: HbmValue | None,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[HbmValue, ...]:
    """What eager ``F.batch_norm`` dispatches. Eval: (out, empty, empty) as
    ``_native_batch_norm_legit_no_training``; training without running statistics (nothing to
    update in place): (out, save_mean, save_invstd) as ``_native_batch_norm_legit_functional``."""
    if not training:
        assert running_mean is not None and running_var is not None  # _native_check
        return batch_norm_eval(ctx, x, weight, bias, running_mean, running_var, momentum, eps)
    return _train(ctx, x, weight, bias, None, momentum, eps)


def _train(
    ctx: LoweringContext,
    x: HbmValue,
    weight: HbmValue | None,
    bias: HbmValue | None,
    running: tuple[HbmValue, HbmValue] | None,
    momentum: float,
    eps: float,
) -> tuple[HbmValue, ...]:
    """Training forward: (out, save_mean, save_invstd), plus the updated running statistics
    when ``running`` (the current ones) is given."""
    results = tuple(ctx.new_value(m.shape, m.dtype) for m in ctx.out)
    out, save_mean, save_invstd = results[:3]
    dtype = ctx.tile_dtype(x.dtype)
    tiles = ChannelTiles(ctx, x, [out, x])
    count = x.numel // x.shape[1]
    pieces = sum(len(chunks(t.free_elements, BN_STATS_FMAX)) for t in tiles.tiles)
    stats_bytes = (pieces * BN_STATS_WIDTH + 2) * 4
    if stats_bytes > ctx.limits.sbuf_bytes // 4:
        raise Unsupported(
            ctx.call.op,
            Reason.SHAPE,
            f"{count} elements per channel need {stats_bytes} bytes of bn_stats per partition, "
            f"more than a quarter of SBUF ({ctx.limits.sbuf_bytes // 4}); no two-level "
            "aggregation yet",
        )
    params, loads = BufferRing(2), BufferRing(ctx.options.buffers)
    for c0, cw in tiles.channel_chunks:
        stats = lang.ndarray((cw, pieces * BN_STATS_WIDTH + 2), lang.float32, lang.sbuf)
        width = pieces * BN_STATS_WIDTH
        piece = 0
        for tile in tiles.tiles:
            shape = (cw, tile.free_elements)
            xt = loads(shape, dtype, lang.sbuf, max_shape=(cw, tiles.largest))
            ctx.queues.load(xt, tiles.ap(tile, 1, c0, cw))
            for f0, f in chunks(tile.free_elements, BN_STATS_FMAX):
                chunk = stats[:, piece * BN_STATS_WIDTH : (piece + 1) * BN_STATS_WIDTH]
                nisa.bn_stats(chunk, xt[:, f0 : f0 + f])
                piece += 1
        nisa.bn_aggr(stats[:, width : width + 2], stats[:, 0:width])
        mean, var = stats[:, width : width + 1], stats[:, width + 1 : width + 2]
        cols = params((cw, COLUMNS), lang.float32, lang.sbuf)
        scale, shift, invstd = _fold(ctx, cols, mean, var, weight, bias, eps, c0)
        _normalize(ctx, tiles, c0, cw, scale, shift, dtype)
        if running is not None:
            unbiased = count / (count - 1) if count > 1 else float("inf")
            for old, batch, new, correction in zip(
                running, (mean, var), results[3:], (1.0, unbiased), strict=True
            ):
                _running_update(ctx, cols, old, batch, new, momentum, correction, c0)
        for value, column in ((save_mean, mean), (save_invstd, invstd)):
            _store_column(ctx, value, column, c0)
    return results


def _running_update(
    ctx: LoweringContext,
    cols: lang.View,
    running: HbmValue,
    batch: lang.View,
    out: HbmValue,
    momentum: float,
    correction: float,
    c0: int,
) -> None:
    """out = (1 - momentum) * running + momentum * correction * batch, for one chunk."""
    cw = cols.shape[0]
    old, new = cols[:, 8:9], cols[:, 9:10]
    _column(ctx, old, running, c0, cw)
    nisa.tensor_scalar(old, old, AluOp.multiply, 1.0 - momentum)
    nisa.scalar_tensor_tensor(new, batch, AluOp.multiply, momentum * correction, AluOp.add, old)
    _store_column(ctx, out, new, c0)


def _store_column(ctx: LoweringContext, value: HbmValue, column: lang.View, c0: int) -> None:
    cw = column.shape[0]
    ctx.queues.store(hbm_ap(value, value.offset + c0, cw, 1, (1,), (1,)), column)
