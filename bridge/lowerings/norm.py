"""Row statistics: ``native_layer_norm`` and ``var`` / ``var_mean`` (any reduced dims).

Rows are the kept dims (on partitions), the reduced dims lie whole on each tile's free axis, as
the library's layernorm does (``hwsim.library.norm``): VectorE ``bn_stats`` per <= 512 elements
(``bn_stats_fmax`` [S16]) and ``bn_aggr`` give each row's mean and population variance in fp32.
LayerNorm then takes 1/std = ``activation(rsqrt, var, bias=eps)`` and normalises in one ScalarE
pass, ``activation(identity, x, scale=1/std, bias=-mean/std)``, before the weight multiply and
bias add on VectorE; mean and 1/std are stored too (``native_layer_norm``'s other outputs).
``var`` scales the population variance by n / (n - correction).

A row longer than fits SBUF whole (``TilingOptions.row_elements``, or the SBUF budget of the
config) goes by chunks (``bridge.tiling.rows``) in two passes: ``bn_stats`` of every chunk's
<= 512-element pieces into one row of statistics and a single ``bn_aggr`` (what the hardware
offers for this: bn_aggr merges any number of (count, mean, M2) groups exactly), then the
normalise pass re-reads each chunk (with its weight and bias). Per chunk of c elements:
ceil(c / 512) bn_stats, then the normalise pass's 1 ScalarE + up to 2 VectorE instructions, as
for a whole row; per row tile 1 bn_aggr, plus 4 instructions each time the statistics tile
(1/32 of SBUF) fills and folds into one group. ``var`` needs only the first pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from hwsim import lang
from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.lowerings.reduction import reduced_dims
from hwsim.bridge.registry import register_lowering
from hwsim.bridge.tiling.broadcast import repeats_rows_of
from hwsim.bridge.tiling.rows import plan_rows, row_budget
from hwsim.bridge.tiling.space import TileRef
from hwsim.bridge.values import HbmValue
from hwsim.isa.ap import AccessPattern
from hwsim.isa.compute_base import BN_STATS_FMAX
from hwsim.kernels import BN_GROUP_WIDTH, BN_STATS_WIDTH
from hwsim.kernels.ops import ActivationFunction as Act
from hwsim.kernels.ops import AluOp
from hwsim.lang import isa as nisa
from hwsim.lang.tiles import View
from hwsim.library.common import BufferRing, chunks

aten = torch.ops.aten

#: A chunked row's statistics take at most 1/STATS_BYTES_SHARE of SBUF per partition (folded
#: when full).
STATS_BYTES_SHARE = 32

#: Buffers of the per-row-tile operands other than x and the result (weight, bias, temporaries).
ROW_BUFFERS = 2

#: Per row tile, once its statistics are known: (first tile, mean, var) -> state for
#: ``RowApply`` (stores the per-row outputs). mean and var are [partitions, 1] fp32.
RowFinish = Callable[[TileRef, View, View], Any]
#: Per tile of the row (the whole row, or each chunk): (tile, [x, *extras] tiles, state).
RowApply = Callable[[TileRef, list[View], Any], None]


def _row_driver(
    ctx: LoweringContext,
    x: HbmValue,
    dims: Sequence[int],
    outputs: Sequence[HbmValue],
    extras: Sequence[HbmValue],
    finish: RowFinish,
    apply: RowApply | None = None,
) -> None:
    """Tile ``x`` with ``dims`` (the row) on the free axis; per row tile compute each row's mean
    and variance, call ``finish``, then ``apply`` with x and ``extras`` (views broadcast to x's
    shape) loaded. ``outputs`` (views broadcast to x's shape) only take part in the plan:
    operand k of a tile is ``outputs[k]`` for k < len(outputs), then x, then the extras.

    A row that fits one tile is loaded once (statistics and ``apply`` on the same tiles); a
    longer row goes by chunks in two passes (``_chunked_stats``, then ``apply`` per chunk)."""
    tile_dtype = ctx.tile_dtype(x.dtype)
    operands = [*outputs, x, *extras]
    # SBUF bytes per row element: x and the result in ``buffers`` tiles, each extra and the fp32
    # temporary in ``ROW_BUFFERS`` (statistics alone: only x).
    item = tile_dtype.itemsize
    per_element = 2 * ctx.options.buffers * item + ROW_BUFFERS * (len(extras) * item + 4)
    if apply is None:
        per_element = ctx.options.buffers * item
    rows = plan_rows(ctx, x.shape, operands, dims, row_budget(ctx, per_element))
    rings = [BufferRing(ctx.options.buffers), *(BufferRing(ROW_BUFFERS) for _ in extras)]
    stats_ring = BufferRing(ctx.options.buffers)
    first_x = len(outputs)

    held: dict[int, tuple[AccessPattern, View]] = {}  # per operand: what its ring holds last

    def load(tile: TileRef, count: int) -> list[View]:
        loaded = []
        for k, ring in enumerate(rings[:count]):
            ap = tile.ap(first_x + k, operands[first_x + k])
            last = held.get(k)
            if last is not None and repeats_rows_of(ap, last[0]):  # a gamma's row again
                loaded.append(last[1][: ap.partitions])
                continue
            shape = (tile.partitions, tile.free_elements)
            t = ring(shape, tile_dtype, lang.sbuf, max_shape=rows.largest)
            ctx.queues.load(t, ap)
            held[k] = (ap, t)
            loaded.append(t)
        return loaded

    for group in ctx.split.mine(rows.groups):
        if len(group) == 1:  # the whole row in one tile: load once
            loaded = load(group[0], len(rings))
            state = finish(group[0], *_whole_row_stats(loaded[0], stats_ring))
            if apply is not None:
                apply(group[0], loaded, state)
            continue
        mean, var = _chunked_stats(ctx, group, lambda t: load(t, 1)[0], stats_ring)
        state = finish(group[0], mean, var)
        if apply is not None:
            for tile in group:
                apply(tile, load(tile, len(rings)), state)


def _whole_row_stats(xt: View, stats_ring: BufferRing) -> tuple[View, View]:
    """(mean, variance) [partitions, 1] of rows whole in ``xt``: ``bn_stats`` of every <= 512
    elements, one ``bn_aggr``."""
    p, free = xt.shape
    pieces = chunks(free, BN_STATS_FMAX)
    width = len(pieces) * BN_STATS_WIDTH
    stats = stats_ring((p, width + 2), lang.float32, lang.sbuf)
    for i, (c0, w) in enumerate(pieces):
        nisa.bn_stats(stats[:, i * BN_STATS_WIDTH : (i + 1) * BN_STATS_WIDTH], xt[:, c0 : c0 + w])
    nisa.bn_aggr(stats[:, width : width + 2], stats[:, 0:width])
    return stats[:, width : width + 1], stats[:, width + 1 : width + 2]


def _chunked_stats(
    ctx: LoweringContext,
    group: list[TileRef],
    load: Callable[[TileRef], View],
    stats_ring: BufferRing,
) -> tuple[View, View]:
    """(mean, variance) [partitions, 1] of rows given as chunks: ``bn_stats`` of every <= 512
    elements of each chunk into one row of statistics, ``bn_aggr`` over all of them.

    The statistics tile holds ``STATS_BYTES_SHARE`` of SBUF per partition; when it is full its
    groups fold into one (count, mean, M2) group — ``bn_aggr``, then count, mean and
    M2 = variance * count written back, 4 instructions — so rows of any length fit."""
    p = group[0].partitions
    most = max(len(chunks(t.free_elements, BN_STATS_FMAX)) for t in group) * BN_STATS_WIDTH
    share = ctx.limits.sbuf_bytes // STATS_BYTES_SHARE // 4
    width = max(share - share % BN_GROUP_WIDTH, BN_GROUP_WIDTH + most)
    stats = stats_ring((p, width + 2), lang.float32, lang.sbuf)
    aggregate = stats[:, width : width + 2]
    used, count = 0, 0
    for tile in group:
        pieces = chunks(tile.free_elements, BN_STATS_FMAX)
        if used + len(pieces) * BN_STATS_WIDTH > width:  # fold what is there into one group
            nisa.bn_aggr(aggregate, stats[:, 0:used])
            nisa.memset(stats[:, 0:1], float(count))
            nisa.tensor_copy(stats[:, 1:2], aggregate[:, 0:1])
            nisa.tensor_scalar(stats[:, 2:3], aggregate[:, 1:2], AluOp.multiply, float(count))
            used = BN_GROUP_WIDTH
        xt = load(tile)
        for c0, w in pieces:
            nisa.bn_stats(stats[:, used : used + BN_STATS_WIDTH], xt[:, c0 : c0 + w])
            used += BN_STATS_WIDTH
        count += tile.free_elements
    nisa.bn_aggr(aggregate, stats[:, 0:used])
    return aggregate[:, 0:1], aggregate[:, 1:2]


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
    out, stats = layer_norm(ctx, x, len(normalized_shape), weight, bias, eps, with_stats=True)
    assert stats is not None
    return out, *stats


def layer_norm(
    ctx: LoweringContext,
    x: HbmValue,
    normalized_dims: int,
    weight: HbmValue | None,
    bias: HbmValue | None,
    eps: float,
    with_stats: bool,
    taken: RowsTaken | None = None,
) -> tuple[HbmValue, tuple[HbmValue, HbmValue] | None]:
    """LayerNorm's output and, ``with_stats``, its (mean, 1/std) values; without them (nothing
    uses them: ``passes.reduction_fusion``) no row statistic is stored. ``ctx.out`` is the
    node's three metas, or the output's alone without stats. ``taken``: a consumer of each
    result tile on chip (``passes.norm_prologue``), which may also say it is not stored."""
    out_meta = ctx.out[0] if with_stats else ctx.out
    dims = list(range(x.ndim - normalized_dims, x.ndim))
    out = ctx.new_value(out_meta.shape, out_meta.dtype)
    outputs = [out]
    stats = None
    if with_stats:
        mean_value, mean_view = _stat_view(ctx, ctx.out[1], x, dims)
        rstd_value, rstd_view = _stat_view(ctx, ctx.out[2], x, dims)
        outputs += [mean_view, rstd_view]
        stats = (mean_value, rstd_value)
    extras = [v.expand(x.shape) for v in (weight, bias) if v is not None]
    eps_tile = lang.ndarray((ctx.pmax, 1), lang.float32, lang.sbuf)
    nisa.memset(eps_tile, float(eps))
    small, rows = BufferRing(ctx.options.buffers), BufferRing(ROW_BUFFERS)
    results = BufferRing(ctx.options.buffers)

    def finish(tile: TileRef, mean: View, var: View) -> tuple[View, View]:
        scalars = small((tile.partitions, 2), lang.float32, lang.sbuf)
        rstd, shift = scalars[:, 0:1], scalars[:, 1:2]
        nisa.activation(rstd, Act.rsqrt, var, bias=eps_tile[: tile.partitions, :])
        nisa.tensor_scalar(shift, mean, AluOp.multiply, rstd, op1=AluOp.multiply, operand1=-1.0)
        if with_stats:
            ctx.queues.store(tile.ap_rows(1, outputs[1]), mean)
            ctx.queues.store(tile.ap_rows(2, outputs[2]), rstd)
        return rstd, shift

    def apply(tile: TileRef, loaded: list[View], scalars: tuple[View, View]) -> None:
        rstd, shift = scalars
        xt, affine = loaded[0], loaded[1:]
        p, free = xt.shape
        xn = rows((p, free), lang.float32, lang.sbuf)
        nisa.activation(xn, Act.identity, xt, bias=shift, scale=rstd)
        result = results((p, free), ctx.tile_dtype(out.dtype), lang.sbuf)
        if weight is not None:
            nisa.tensor_tensor(xn if bias is not None else result, xn, affine[0], AluOp.multiply)
        if bias is not None:
            nisa.tensor_tensor(result, xn, affine[-1], AluOp.add)
        if weight is None and bias is None:
            nisa.tensor_copy(result, xn)
        _give(ctx, taken, tile, out, result)

    _row_driver(ctx, x, dims, outputs, extras, finish, apply)
    return out, stats


def rms_norm(
    ctx: LoweringContext,
    x: HbmValue,
    weight: HbmValue | None,
    eps: float,
    taken: RowsTaken | None = None,
) -> HbmValue:
    """RMS norm over the last dim, ``[w *] x * rsqrt(mean(x ** 2) + eps)``, as one row pass
    (``passes.reduction_fusion`` lowers Llama's decomposed chain with it): the row's mean and
    population variance from ``bn_stats``/``bn_aggr`` give mean(x ** 2) = var + mean ** 2, then
    per row tile 1/rms = ``activation(rsqrt, var + mean ** 2, bias=eps)`` and one VectorE
    instruction ``(x * 1/rms) * w`` (``tensor_scalar`` without a weight). ``taken``: as
    ``layer_norm``'s."""
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    dims = [x.ndim - 1]
    extras = [weight.expand(x.shape)] if weight is not None else []
    eps_tile = lang.ndarray((ctx.pmax, 1), lang.float32, lang.sbuf)
    nisa.memset(eps_tile, float(eps))
    small, results = BufferRing(ctx.options.buffers), BufferRing(ctx.options.buffers)

    def finish(tile: TileRef, mean: View, var: View) -> View:
        scalars = small((tile.partitions, 2), lang.float32, lang.sbuf)
        square, rstd = scalars[:, 0:1], scalars[:, 1:2]
        nisa.scalar_tensor_tensor(square, mean, AluOp.multiply, mean, AluOp.add, var)
        nisa.activation(rstd, Act.rsqrt, square, bias=eps_tile[: tile.partitions, :])
        return rstd

    def apply(tile: TileRef, loaded: list[View], rstd: View) -> None:
        xt = loaded[0]
        result = results(xt.shape, ctx.tile_dtype(out.dtype), lang.sbuf)
        if weight is not None:
            nisa.scalar_tensor_tensor(result, xt, AluOp.multiply, rstd, AluOp.multiply, loaded[1])
        else:
            nisa.tensor_scalar(result, xt, AluOp.multiply, rstd)
        _give(ctx, taken, tile, out, result)

    _row_driver(ctx, x, dims, [out], extras, finish, apply)
    return out


class RowsTaken(Protocol):
    """A consumer of a norm's result tiles on chip (``tiling.prologue``)."""

    #: Whether the rows are stored to HBM too (something else reads them there).
    store: bool

    def take(self, tile: TileRef, out: HbmValue, result: View) -> None:
        """Use result tile ``result`` (rows ``tile`` of ``out``) while it is in SBUF."""


def _give(
    ctx: LoweringContext, taken: RowsTaken | None, tile: TileRef, out: HbmValue, result: View
) -> None:
    """A result tile to HBM (unless its consumer on chip says not to) and to that consumer."""
    if taken is None or taken.store:
        ctx.queues.store(tile.ap(0, out), result)
    if taken is not None:
        taken.take(tile, out, result)


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

    def finish(tile: TileRef, mean: View, var: View) -> None:
        scaled = results((tile.partitions, 1), lang.float32, lang.sbuf)
        nisa.tensor_scalar(scaled, var, AluOp.multiply, scale)
        ctx.queues.store(tile.ap_rows(0, var_view), scaled)
        if with_mean:
            ctx.queues.store(tile.ap_rows(1, mean_view), mean)

    _row_driver(ctx, x, dims, outputs, [], finish)
    return (var_value, mean_value) if with_mean else var_value


@register_lowering(aten.var_mean.correction, family="norm")
def var_mean(ctx: LoweringContext, x: HbmValue, dim: Any = None, **kwargs: Any):
    return _variance(ctx, x, dim, _correction(kwargs), with_mean=True)


@register_lowering(aten.var.correction, family="norm")
def var(ctx: LoweringContext, x: HbmValue, dim: Any = None, **kwargs: Any):
    return _variance(ctx, x, dim, _correction(kwargs), with_mean=False)
