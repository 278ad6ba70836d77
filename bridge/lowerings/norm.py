"""Row statistics: ``native_layer_norm`` and ``var`` / ``var_mean`` (any reduced dims).

Rows are the kept dims (on partitions), the reduced dims lie whole on each tile's free axis, as
the library's layernorm does (``hwsim.library.norm``): VectorE ``bn_stats`` per <= 512 elements
(``bn_stats_fmax`` [S16]) and ``bn_aggr`` give each row's mean and population variance in fp32.
LayerNorm then takes 1/std = ``activation(rsqrt, var, bias=eps)`` and normalises in one ScalarE
pass, ``activation(identity, x, scale=1/std, bias=-mean/std)``, before the weight multiply and
bias add on VectorE; mean and 1/std are stored too (``native_layer_norm``'s other outputs).
``var`` scales the population variance by n / (n - correction).

A row longer than fits SBUF whole (``TilingOptions.row_elements``) is not lowered (no two-pass
variance yet).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from bridge.context import LoweringContext, TensorMeta
from bridge.errors import Reason, Unsupported
from bridge.lowerings.reduction import reduced_dims
from bridge.registry import register_lowering
from bridge.tiling import TilingError, plan
from bridge.tiling.space import TileRef
from bridge.values import HbmValue
from hwsim import lang
from hwsim.isa.compute_base import BN_STATS_FMAX
from hwsim.lang import isa as nisa
from hwsim.lang.tiles import View
from hwsim.library.common import BufferRing, chunks
from kernels import BN_STATS_WIDTH
from kernels.ops import ActivationFunction as Act
from kernels.ops import AluOp

aten = torch.ops.aten

#: Buffers of the per-row-tile operands other than x and the result (weight, bias, temporaries).
ROW_BUFFERS = 2

#: Per tile: (tile, x tile, mean, var, [x tile, *extra tiles]) -> emit the rest.
RowBody = Callable[[TileRef, View, View, View, list[View]], None]


def _row_driver(
    ctx: LoweringContext,
    x: HbmValue,
    dims: Sequence[int],
    outputs: Sequence[HbmValue],
    extras: Sequence[HbmValue],
    body: RowBody,
) -> None:
    """Tile ``x`` with ``dims`` whole on the free axis; per tile load x and ``extras`` (views
    broadcast to x's shape), compute mean and variance, and call ``body``. ``outputs`` (views
    broadcast to x's shape) only take part in the plan: operand k of a tile is
    ``outputs[k]`` for k < len(outputs), then x, then the extras."""
    tile_dtype = ctx.tile_dtype(x.dtype)
    operands = [*outputs, x, *extras]
    # SBUF bytes per row element: x and the result in ``buffers`` tiles, each extra and the fp32
    # temporary in ``ROW_BUFFERS``.
    item = tile_dtype.itemsize
    per_element = 2 * ctx.options.buffers * item + ROW_BUFFERS * (len(extras) * item + 4)
    budget = max(1, min(ctx.options.row_elements, ctx.limits.sbuf_bytes * 3 // 4 // per_element))
    try:
        tiles = plan(
            x.shape,
            [(v.offset, v.strides) for v in operands],
            pmax=ctx.pmax,
            free_budget=budget,
            reduce_dims=dims,
            whole_free=True,
        )
    except TilingError as error:
        raise Unsupported(ctx.call.op, Reason.SHAPE, str(error)) from None
    largest = (max(t.partitions for t in tiles), max(t.free_elements for t in tiles))
    rings = [BufferRing(ctx.options.buffers), *(BufferRing(ROW_BUFFERS) for _ in extras)]
    stats_ring = BufferRing(ctx.options.buffers)
    first_x = len(outputs)
    for tile in tiles:
        p, free = tile.partitions, tile.free_elements
        loaded = []
        for k, ring in enumerate(rings):
            t = ring((p, free), tile_dtype, lang.sbuf, max_shape=largest)
            ctx.queues.load(t, tile.ap(first_x + k, operands[first_x + k]))
            loaded.append(t)
        pieces = chunks(free, BN_STATS_FMAX)
        width = len(pieces) * BN_STATS_WIDTH
        stats = stats_ring((p, width + 2), lang.float32, lang.sbuf)
        for i, (c0, w) in enumerate(pieces):
            chunk = stats[:, i * BN_STATS_WIDTH : (i + 1) * BN_STATS_WIDTH]
            nisa.bn_stats(chunk, loaded[0][:, c0 : c0 + w])
        nisa.bn_aggr(stats[:, width : width + 2], stats[:, 0:width])
        body(tile, loaded[0], stats[:, width : width + 1], stats[:, width + 1 : width + 2], loaded)


def _stat_view(ctx: LoweringContext, meta: TensorMeta, x: HbmValue, dims: list[int]):
    """A new value of ``meta`` viewed as x's shape with stride 0 on ``dims``."""
    value = ctx.new_value(meta.shape, meta.dtype)
    kept = tuple(1 if d in dims else n for d, n in enumerate(x.shape))
    return value, HbmValue.contiguous(value.tile, kept).expand(x.shape)


@register_lowering(aten.native_layer_norm.default, family="norm")
def native_layer_norm(
    ctx: LoweringContext,
    x: HbmValue,
    normalized_shape: Sequence[int],
    weight: HbmValue | None,
    bias: HbmValue | None,
    eps: float,
) -> tuple[HbmValue, HbmValue, HbmValue]:
    """(out, mean, 1/std) of LayerNorm over the last ``len(normalized_shape)`` dims."""
    out_meta, mean_meta, rstd_meta = ctx.out
    dims = list(range(x.ndim - len(normalized_shape), x.ndim))
    out = ctx.new_value(out_meta.shape, out_meta.dtype)
    mean_value, mean_view = _stat_view(ctx, mean_meta, x, dims)
    rstd_value, rstd_view = _stat_view(ctx, rstd_meta, x, dims)
    extras = [v.expand(x.shape) for v in (weight, bias) if v is not None]
    eps_tile = lang.ndarray((ctx.pmax, 1), lang.float32, lang.sbuf)
    nisa.memset(eps_tile, float(eps))
    small, rows = BufferRing(ctx.options.buffers), BufferRing(ROW_BUFFERS)
    results = BufferRing(ctx.options.buffers)

    def body(tile: TileRef, xt: View, mean: View, var: View, loaded: list[View]) -> None:
        p, free = xt.shape
        scalars = small((p, 2), lang.float32, lang.sbuf)
        rstd, shift = scalars[:, 0:1], scalars[:, 1:2]
        nisa.activation(rstd, Act.rsqrt, var, bias=eps_tile[:p, :])
        nisa.tensor_scalar(shift, mean, AluOp.multiply, rstd, op1=AluOp.multiply, operand1=-1.0)
        xn = rows((p, free), lang.float32, lang.sbuf)
        nisa.activation(xn, Act.identity, xt, bias=shift, scale=rstd)
        result = results((p, free), ctx.tile_dtype(out.dtype), lang.sbuf)
        affine = loaded[1:]
        if weight is not None:
            nisa.tensor_tensor(xn if bias is not None else result, xn, affine[0], AluOp.multiply)
        if bias is not None:
            nisa.tensor_tensor(result, xn, affine[-1], AluOp.add)
        if weight is None and bias is None:
            nisa.tensor_copy(result, xn)
        ctx.queues.store(tile.ap(0, out), result)
        ctx.queues.store(tile.ap_rows(1, mean_view), mean)
        ctx.queues.store(tile.ap_rows(2, rstd_view), rstd)

    _row_driver(ctx, x, dims, [out, mean_view, rstd_view], extras, body)
    return out, mean_value, rstd_value


def _correction(kwargs: dict[str, Any]) -> float:
    value = kwargs.get("correction")
    return 1.0 if value is None else float(value)


def _variance(
    ctx: LoweringContext, x: HbmValue, dim: Any, correction: float, with_mean: bool
) -> Any:
    metas: tuple[Any, ...] = tuple(ctx.out) if with_mean else (ctx.out,)
    dims = reduced_dims(dim, x.ndim)
    count = math.prod(x.shape[d] for d in dims)
    scale = count / (count - correction) if count != correction else math.inf
    var_value, var_view = _stat_view(ctx, metas[0], x, dims)
    outputs = [var_view]
    if with_mean:
        mean_value, mean_view = _stat_view(ctx, metas[1], x, dims)
        outputs.append(mean_view)
    results = BufferRing(ctx.options.buffers)

    def body(tile: TileRef, xt: View, mean: View, var: View, loaded: list[View]) -> None:
        scaled = results((xt.shape[0], 1), lang.float32, lang.sbuf)
        nisa.tensor_scalar(scaled, var, AluOp.multiply, scale)
        ctx.queues.store(tile.ap_rows(0, var_view), scaled)
        if with_mean:
            ctx.queues.store(tile.ap_rows(1, mean_view), mean)

    _row_driver(ctx, x, dims, outputs, [], body)
    return (var_value, mean_value) if with_mean else var_value


@register_lowering(aten.var_mean.correction, family="norm")
def var_mean(ctx: LoweringContext, x: HbmValue, dim: Any = None, **kwargs: Any):
    return _variance(ctx, x, dim, _correction(kwargs), with_mean=True)


@register_lowering(aten.var.correction, family="norm")
def var(ctx: LoweringContext, x: HbmValue, dim: Any = None, **kwargs: Any):
    return _variance(ctx, x, dim, _correction(kwargs), with_mean=False)
