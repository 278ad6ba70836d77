"""``linalg_vector_norm`` over any dims (wav2vec 2.0's weight norm, ``torch.norm``, gradient
clipping): one pass over x, reduced dims on the free axis and kept dims on partitions, as
``reduce_tiles`` places them.

Per tile, by ord: 2 is one ScalarE ``activation_reduce`` (square, summed along the free axis),
1 the same with ``abs``; +-inf is ScalarE ``abs`` then a VectorE max/min ``tensor_reduce``; 0
counts ``x != 0``; any other p sums GpSimdE ``power(|x|, p)``. Partials of a reduced span wider
than one tile combine in fp32; the root (``sqrt``, or ``power(., 1 / p)``) is taken once per row.

Sums accumulate in fp32 (torch's CPU kernel in fp64), so results agree to fp32 rounding; a sum
of squares past FLT_MAX is inf where torch's double accumulator is not.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from hwsim import lang
from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.lowerings.reduction import reduced_dims
from hwsim.bridge.registry import OpCall, register_lowering
from hwsim.bridge.tiling.space import plan
from hwsim.bridge.values import HbmValue
from hwsim.kernels.ops import ActivationFunction as Act
from hwsim.kernels.ops import AluOp, ReduceOp
from hwsim.lang import isa as nisa
from hwsim.library.common import COMBINE, BufferRing

aten = torch.ops.aten


def _norm_check(call: OpCall) -> None:
    ord_ = call.args[1] if len(call.args) > 1 else call.kwargs.get("ord", 2)
    if isinstance(ord_, complex) or not isinstance(ord_, (int, float)):
        raise Unsupported(call.op, Reason.SHAPE, f"ord={ord_!r}: a real number is needed")
    dtype = call.kwargs.get("dtype")
    if dtype is not None and dtype != call.args[0].dtype:
        raise Unsupported(call.op, Reason.DTYPE, f"dtype={dtype} for a {call.args[0].dtype} input")


def _reduce_op(p: float) -> ReduceOp:
    if p == math.inf:
        return ReduceOp.max
    if p == -math.inf:
        return ReduceOp.min
    return ReduceOp.add


def _partial(part: Any, scratch: Any, x: Any, p: float) -> None:
    """part[P, 1] = this tile's contribution to the norm of order p."""
    if p in (1.0, 2.0):
        nisa.activation_reduce(scratch, Act.square if p == 2.0 else Act.abs, x, reduce_res=part)
    elif p == 0.0:
        nisa.tensor_scalar(scratch, x, AluOp.not_equal, 0.0)
        nisa.tensor_reduce(part, ReduceOp.add, scratch)
    else:
        nisa.activation(scratch, Act.abs, x)
        if math.isfinite(p):
            nisa.tensor_scalar(scratch, scratch, AluOp.power, p, engine="gpsimd")
        nisa.tensor_reduce(part, _reduce_op(p), scratch)


def _root(acc: Any, p: float) -> None:
    if p == 2.0:
        nisa.activation(acc, Act.sqrt, acc)
    elif math.isfinite(p) and p not in (0.0, 1.0):
        nisa.tensor_scalar(acc, acc, AluOp.power, 1.0 / p, engine="gpsimd")


@register_lowering(aten.linalg_vector_norm.default, family="reduction", check=_norm_check)
def linalg_vector_norm(
    ctx: LoweringContext,
    x: HbmValue,
    ord: float = 2.0,
    dim: Any = None,
    keepdim: bool = False,
    *,
    dtype: Any = None,
) -> HbmValue:
    """(sum |x|^ord)^(1 / ord) over ``dim`` (all dims when None); max / min |x| for +-inf."""
    p = float(ord)
    meta: TensorMeta = ctx.out
    dims = reduced_dims(dim, x.ndim)
    out = ctx.new_value(meta.shape, meta.dtype)
    kept = tuple(1 if d in dims else n for d, n in enumerate(x.shape))
    broadcast = HbmValue.contiguous(out.tile, kept).expand(x.shape)
    tile_dtype = ctx.tile_dtype(x.dtype)
    tiles = plan(
        x.shape,
        [(broadcast.offset, broadcast.strides), (x.offset, x.strides)],
        pmax=ctx.pmax,
        free_budget=ctx.free_budget(2, 4),
        reduce_dims=dims,
    )
    rows = max(t.partitions for t in tiles)
    free = max(t.free_elements for t in tiles)
    loads, scratch_ring = BufferRing(ctx.options.buffers), BufferRing(ctx.options.buffers)
    partials, accs = BufferRing(ctx.options.buffers), BufferRing(ctx.options.buffers)
    acc: Any = None
    for tile in tiles:
        shape = (tile.partitions, tile.free_elements)
        slot = loads(shape, tile_dtype, lang.sbuf, max_shape=(rows, free))
        xt = ctx.queues.load_resident(slot, tile.ap(1, x))
        scratch = scratch_ring(shape, lang.float32, lang.sbuf, max_shape=(rows, free))
        if tile.first:
            acc = accs((tile.partitions, 1), lang.float32, lang.sbuf, max_shape=(rows, 1))
            _partial(acc, scratch, xt, p)
        else:
            part = partials((tile.partitions, 1), lang.float32, lang.sbuf, max_shape=(rows, 1))
            _partial(part, scratch, xt, p)
            nisa.tensor_tensor(acc, acc, part, COMBINE[_reduce_op(p)])
        if tile.last:
            _root(acc, p)
            ctx.queues.store(tile.ap_rows(0, broadcast), acc)
    return out
