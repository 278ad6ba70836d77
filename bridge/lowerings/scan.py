"""``cumsum`` along one dim: a log-step (Hillis-Steele) scan on each tile's free axis.

Rows (every other dim) go on partitions and the scanned dim lies whole on the free axis. Step k
adds the row shifted by 2**k to itself, ping-ponging between two SBUF tiles: ceil(log2 n)
instructions of n elements each (the first 2**k elements are copied across). Integer and bool
inputs scan in int32 on GpSimdE (exact); floats on VectorE in fp32 — torch's CPU kernel sums
sequentially in double, so float results differ by rounding only. A dim longer than one tile's
free budget is not lowered (no carry across tiles yet).
"""

from __future__ import annotations

from typing import Any

import torch

from bridge.context import LoweringContext, TensorMeta
from bridge.dtypes import MOVABLE_DTYPES
from bridge.errors import Reason, Unsupported
from bridge.registry import register_lowering, work_dtype
from bridge.tiling import TilingError, plan
from bridge.values import HbmValue
from hwsim import lang
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing
from kernels.ops import AluOp

aten = torch.ops.aten


@register_lowering(aten.cumsum.default, family="scan", dtypes=MOVABLE_DTYPES)
def cumsum(ctx: LoweringContext, x: HbmValue, dim: int, **_: Any) -> HbmValue:
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    if x.ndim == 0:
        x, out_view, dim = x.unsqueeze(0), out.unsqueeze(0), 0
    else:
        out_view, dim = out, dim % x.ndim
    tile_dtype = work_dtype(ctx, meta.dtype)
    engine = "vector" if tile_dtype.is_float else "gpsimd"
    budget = min(ctx.options.row_elements, ctx.free_budget(2, 4))
    try:
        tiles = plan(
            x.shape,
            [(out_view.offset, out_view.strides), (x.offset, x.strides)],
            pmax=ctx.pmax,
            free_budget=budget,
            reduce_dims=(dim,),
            whole_free=True,
        )
    except TilingError as error:
        raise Unsupported("aten.cumsum.default", Reason.SHAPE, str(error)) from None
    largest = (max(t.partitions for t in tiles), max(t.free_elements for t in tiles))
    loads, steps = BufferRing(ctx.options.buffers), BufferRing(2)
    for tile in tiles:
        p, n = tile.partitions, tile.free_elements
        src = loads((p, n), tile_dtype, lang.sbuf, max_shape=largest)
        ctx.queues.load(src, tile.ap(1, x))
        shift = 1
        while shift < n:
            dst = steps((p, n), tile_dtype, lang.sbuf, max_shape=largest)
            nisa.tensor_copy(dst[:, :shift], src[:, :shift], engine=engine)
            nisa.tensor_tensor(
                dst[:, shift:], src[:, shift:], src[:, : n - shift], AluOp.add, engine=engine
            )
            src, shift = dst, shift * 2
        ctx.queues.store(tile.ap(0, out_view), src)
    return out
