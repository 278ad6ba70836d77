"""Reductions (sum, mean, amax, amin, max, min, any, all over any dims) and softmax /
log_softmax.

Reduced dims go on the free axis of each tile and kept dims on partitions (``reduce_tiles``), so
any set of dims reduces with VectorE ``tensor_reduce``; reduced dims larger than one tile are
accumulated across tiles in fp32. Softmax with its whole row in one tile (``row_tiles``) is the
library softmax's instruction sequence (``hwsim.library.softmax``): -max by ``tensor_reduce``,
exp and the row sum in one ScalarE ``activation_reduce``, ``reciprocal``, one multiply. A row
longer than one tile (the config's SBUF budget decides, while lowering) is an online softmax over
chunks in two passes (``_chunked``). ``_safe_softmax`` (what sdpa with a mask emits) gives 0 for
rows that are all -inf.

``any`` / ``all`` are max / min of ``x != 0`` (bool tensors are already 0/1). ``amax`` /
``amin`` / ``max`` / ``min`` of integers reduce in int32, exactly (generation's positions).

Limits: a reduction of everything runs on one partition (no cross-partition second stage yet).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from hwsim import lang
from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import HW_INT32, HW_UINT8, MOVABLE_DTYPES, NUMERIC_DTYPES
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.registry import OpCall, register_lowering
from hwsim.bridge.tiling import map_tiles, reduce_tiles, row_tiles
from hwsim.bridge.tiling.drivers import Operand, row_tile_bytes
from hwsim.bridge.tiling.rows import RowPlan, plan_rows, row_budget
from hwsim.bridge.values import HbmValue
from hwsim.kernels.ops import ActivationFunction as Act
from hwsim.kernels.ops import AluOp, ReduceOp
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing

aten = torch.ops.aten
FLT_MAX = float(torch.finfo(torch.float32).max)


def reduced_dims(dim: Any, ndim: int) -> list[int]:
    """The reduced dims, wrapped; None or [] means all dims (torch's convention). A 0-d tensor
    has none: torch accepts dim 0 or -1 for it and reduces nothing."""
    if dim is None or ndim == 0:
        return list(range(ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return list(range(ndim))
    return sorted({d % ndim for d in dims})


def _dtype_check(call: OpCall) -> None:
    dtype = call.kwargs.get("dtype")
    if dtype is not None and dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise Unsupported(call.op, Reason.DTYPE, f"accumulation dtype={dtype}")


def _reduce(
    ctx: LoweringContext, x: HbmValue, dim: Any, keepdim: bool, op: ReduceOp, mean: bool
) -> HbmValue:
    meta: TensorMeta = ctx.out
    dims = reduced_dims(dim, x.ndim)
    out = ctx.new_value(meta.shape, meta.dtype)
    kept_shape = tuple(1 if d in dims else n for d, n in enumerate(x.shape))
    broadcast = HbmValue.contiguous(out.tile, kept_shape).expand(x.shape)
    count = math.prod(x.shape[d] for d in dims)
    reduce_tiles(ctx, x, broadcast, dims, op, scale=1.0 / count if mean else None)
    return out


# The ``.default`` overloads reduce every dim: they pass no ``dim``.
@register_lowering(aten.sum.dim_IntList, aten.sum.default, check=_dtype_check)
def sum_dims(
    ctx: LoweringContext, x: HbmValue, dim: Any = None, keepdim: bool = False, **_: Any
) -> HbmValue:
    return _reduce(ctx, x, dim, keepdim, ReduceOp.add, mean=False)


@register_lowering(aten.mean.dim, aten.mean.default, check=_dtype_check)
def mean_dims(
    ctx: LoweringContext, x: HbmValue, dim: Any = None, keepdim: bool = False, **_: Any
) -> HbmValue:
    return _reduce(ctx, x, dim, keepdim, ReduceOp.add, mean=True)


@register_lowering(aten.amax.default, dtypes=NUMERIC_DTYPES)
def amax(ctx: LoweringContext, x: HbmValue, dim: Sequence[int] = (), keepdim: bool = False):
    return _reduce(ctx, x, dim, keepdim, ReduceOp.max, mean=False)


@register_lowering(aten.amin.default, dtypes=NUMERIC_DTYPES)
def amin(ctx: LoweringContext, x: HbmValue, dim: Sequence[int] = (), keepdim: bool = False):
    return _reduce(ctx, x, dim, keepdim, ReduceOp.min, mean=False)


@register_lowering(aten.max.default, dtypes=NUMERIC_DTYPES)
def max_all(ctx: LoweringContext, x: HbmValue) -> HbmValue:
    """The largest element (``x.max()``: generation's ``cache_position.max()``)."""
    return _reduce(ctx, x, None, False, ReduceOp.max, mean=False)


@register_lowering(aten.min.default, dtypes=NUMERIC_DTYPES)
def min_all(ctx: LoweringContext, x: HbmValue) -> HbmValue:
    return _reduce(ctx, x, None, False, ReduceOp.min, mean=False)


def _nonzero(ctx: LoweringContext, x: HbmValue, is_bool: bool) -> HbmValue:
    """x != 0 as 0/1 (x itself when it is a bool tensor)."""
    if is_bool:
        return x
    flags = ctx.new_value(x.shape, HW_UINT8)
    operand = ctx.tile_dtype(x.dtype) if x.dtype.is_float else HW_INT32

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        nisa.tensor_scalar(dst, srcs[0], AluOp.not_equal, 0.0)

    map_tiles(ctx, flags, [x], compute, tile_dtype=HW_INT32, input_dtypes=[operand])
    return flags


def _truth(op: ReduceOp):
    def lower(ctx: LoweringContext, x: HbmValue, dim: Any = None, keepdim: bool = False):
        flags = _nonzero(ctx, x, ctx.arg_meta(0).dtype == torch.bool)
        return _reduce(ctx, flags, dim, keepdim, op, mean=False)

    lower.__qualname__ = f"truth[{op.name}]"
    return lower


for _op, _overloads in (
    (ReduceOp.max, (aten.any.dim, aten.any.dims, aten.any.default)),
    (ReduceOp.min, (aten.all.dim, aten.all.dims, aten.all.default)),
):
    register_lowering(*_overloads, family="reduction", dtypes=MOVABLE_DTYPES)(_truth(_op))


# ---- softmax --------------------------------------------------------------------------------


def _softmax_check(call: OpCall) -> None:
    if len(call.args) > 2 and call.args[2]:
        raise Unsupported(call.op, Reason.DTYPE, "half_to_float=True (a CUDA-only variant)")


def _row_op(ctx: LoweringContext, x: HbmValue, dim: int, log: bool, safe: bool = False) -> HbmValue:
    """softmax or log_softmax along ``dim``; ``safe``: rows that are all -inf give 0, not NaN.
    Rows that fit one tile take the library sequence; longer rows go by chunks (``_chunked``)."""
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    dim = dim % max(1, x.ndim)
    budget = row_budget(ctx, row_tile_bytes(ctx, x.dtype, temporaries=1))
    rows = plan_rows(ctx, x.shape, [out, x], [dim], budget)
    if rows.chunked:
        _chunked(ctx, x, out, rows, log, safe)
        return out
    stats_ring, temp_ring = BufferRing(ctx.options.buffers), BufferRing(2)

    def compute(y: Operand, xt: Operand) -> None:
        p, free = xt.shape[0], xt.shape[1]
        stats = stats_ring((p, 3), lang.float32, lang.sbuf)  # -max, sum, 1/sum or log(sum)
        neg_max, total, last = stats[:, 0:1], stats[:, 1:2], stats[:, 2:3]
        nisa.tensor_reduce(neg_max, ReduceOp.max, xt, negate=True)
        if safe:  # an all -inf row: -max = +inf would give exp(-inf + inf) = NaN; use FLT_MAX
            nisa.tensor_scalar(neg_max, neg_max, AluOp.min, FLT_MAX)
        e = temp_ring((p, free), lang.float32, lang.sbuf)
        nisa.activation_reduce(e, Act.exp, xt, bias=neg_max, reduce_res=total)
        if log:  # y = (x - max) - log(sum)
            nisa.activation(last, Act.log, total)
            nisa.tensor_scalar(y, xt, AluOp.add, neg_max, op1=AluOp.subtract, operand1=last)
        elif safe:  # y = e / max(sum, 1): a sum is >= 1 (exp(0) at the max) or 0 (all -inf)
            nisa.tensor_scalar(
                last, total, AluOp.max, 1.0, op1=AluOp.divide, operand1=1.0, reverse1=True
            )
            nisa.tensor_scalar(y, e, AluOp.multiply, last)
        else:  # y = e / sum
            nisa.reciprocal(last, total)
            nisa.tensor_scalar(y, e, AluOp.multiply, last)

    row_tiles(ctx, x, out, dim, compute, temporaries=1)
    return out


def _chunked(
    ctx: LoweringContext, x: HbmValue, out: HbmValue, rows: RowPlan, log: bool, safe: bool
) -> None:
    """Softmax of rows longer than one tile, in two passes over each row's k chunks.

    Pass 1 (online softmax, fp32): m = running max, s = running sum of exp(x - m); per chunk
    m' = max(m, max(chunk)), s = s * exp(m - m') + sum(exp(chunk - m')). -m is clamped to
    FLT_MAX, so chunks that are all -inf (masks) add 0 instead of NaN. Pass 2 re-reads each chunk:
    softmax y = exp(x - m - log s) in one ScalarE activation, log_softmax y = x - m - log s in
    one VectorE tensor_scalar; ``safe`` takes log(max(s, 1)) (s >= 1 unless the row is all -inf).

    Instructions per row tile (VectorE + ScalarE): pass 1 takes 3 for the first chunk
    (tensor_reduce, clamp, activation_reduce) and 5 for each other (tensor_reduce, new max,
    exp(m - m'), activation_reduce, s update); then log s (+ max(s, 1) if safe, + bias
    subtract for softmax), and 1 per chunk in pass 2. softmax: 6k, log_softmax: 6k - 1,
    _safe_softmax: 6k + 1; DMA: 2k loads, k stores. Three passes (max, sum, write) would take
    5k - 2 + 2 instructions but read every chunk three times: the row ops are DMA-bound.
    """
    tile_dtype = ctx.tile_dtype(x.dtype)
    loads, stores = BufferRing(ctx.options.buffers), BufferRing(ctx.options.buffers)
    temps, stats_ring = BufferRing(2), BufferRing(ctx.options.buffers)
    for group in rows.groups:
        p = group[0].partitions
        # -m (two slots, ping-pong), -max(chunk), s, sum(chunk), rescale, log s / bias
        stats = stats_ring((p, 7), lang.float32, lang.sbuf)
        neg_max, new_max, chunk_max = stats[:, 0:1], stats[:, 1:2], stats[:, 2:3]
        total, part, rescale, last = stats[:, 3:4], stats[:, 4:5], stats[:, 5:6], stats[:, 6:7]
        for tile in group:
            xt = loads((p, tile.free_elements), tile_dtype, lang.sbuf, max_shape=rows.largest)
            ctx.queues.load(xt, tile.ap(1, x))
            e = temps((p, tile.free_elements), lang.float32, lang.sbuf, max_shape=rows.largest)
            if tile.first:
                nisa.tensor_reduce(neg_max, ReduceOp.max, xt, negate=True)
                nisa.tensor_scalar(neg_max, neg_max, AluOp.min, FLT_MAX)
                nisa.activation_reduce(e, Act.exp, xt, bias=neg_max, reduce_res=total)
                continue
            nisa.tensor_reduce(chunk_max, ReduceOp.max, xt, negate=True)
            nisa.tensor_scalar(new_max, chunk_max, AluOp.min, neg_max)
            nisa.activation(rescale, Act.exp, neg_max, bias=new_max, scale=-1.0)  # exp(m - m')
            nisa.activation_reduce(e, Act.exp, xt, bias=new_max, reduce_res=part)
            nisa.tensor_scalar(total, total, AluOp.multiply, rescale, op1=AluOp.add, operand1=part)
            neg_max, new_max = new_max, neg_max
        if safe:
            nisa.tensor_scalar(total, total, AluOp.max, 1.0)
        nisa.activation(last, Act.log, total)
        if not log:  # bias = -m - log s
            nisa.tensor_tensor(last, neg_max, last, AluOp.subtract)
        for tile in group:
            xt = loads((p, tile.free_elements), tile_dtype, lang.sbuf, max_shape=rows.largest)
            ctx.queues.load(xt, tile.ap(1, x))
            y = stores((p, tile.free_elements), tile_dtype, lang.sbuf, max_shape=rows.largest)
            if log:
                nisa.tensor_scalar(y, xt, AluOp.add, neg_max, op1=AluOp.subtract, operand1=last)
            else:
                nisa.activation(y, Act.exp, xt, bias=last)
            ctx.queues.store(tile.ap(0, out), y)


def softmax_rows(ctx: LoweringContext, x: HbmValue, dim: int, safe: bool) -> HbmValue:
    """softmax of x along ``dim`` as one row pass (``passes.reduction_fusion`` lowers the
    decomposed softmax chains with it); ``safe``: rows that are all -inf give 0."""
    return _row_op(ctx, x, dim, log=False, safe=safe)


@register_lowering(aten._softmax.default, check=_softmax_check)
def softmax(ctx: LoweringContext, x: HbmValue, dim: int, half_to_float: bool = False):
    return _row_op(ctx, x, dim, log=False)


@register_lowering(aten._log_softmax.default, check=_softmax_check)
def log_softmax(ctx: LoweringContext, x: HbmValue, dim: int, half_to_float: bool = False):
    return _row_op(ctx, x, dim, log=True)


def _safe_softmax_check(call: OpCall) -> None:
    dtype = call.args[2] if len(call.args) > 2 else call.kwargs.get("dtype")
    if dtype is not None and dtype != call.args[0].dtype:
        raise Unsupported(
            call.op, Reason.DTYPE, f"dtype={dtype} for a {call.args[0].dtype} input (no upcast)"
        )


@register_lowering(aten._safe_softmax.default, check=_safe_softmax_check)
def safe_softmax(ctx: LoweringContext, x: HbmValue, dim: int, dtype: Any = None) -> HbmValue:
    """softmax where a row that is entirely -inf (fully masked attention) gives zeros: -max is
    clamped to FLT_MAX (exp(-inf) = 0 instead of NaN) and the sum to >= 1 before its
    reciprocal; two [rows, 1] instructions more than softmax."""
    return _row_op(ctx, x, dim, log=False, safe=True)
