"""``cumsum`` along one dim: a log-step (Hillis-Steele) scan on each tile's free axis.

Rows (every other dim) go on partitions and the scanned dim lies whole on the free axis. Step k
adds the row shifted by 2**k to itself, ping-ponging between two SBUF tiles: 2 * ceil(log2 n)
instructions (a copy of the first 2**k elements and an add of the rest). Integer and bool
inputs scan in int32 on GpSimdE (exact); floats on VectorE in fp32 — torch's CPU kernel sums
sequentially in double, so float results differ by rounding only.

A dim longer than one tile's free budget (``free_budget(2, 4)``, at most ``row_elements``) is
scanned in chunks of c elements (``bridge.tiling.rows``), left to right: each chunk's first
element first takes the running total (the last column of the previous chunk's result, one
[rows, 1] add), then the chunk is scanned as above — 2 * ceil(log2 c) + 1 instructions a chunk.
"""

from __future__ import annotations

from typing import Any

import torch

from hwsim import lang
from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import MOVABLE_DTYPES
from hwsim.bridge.registry import register_lowering, work_dtype
from hwsim.bridge.tiling.rows import plan_rows
from hwsim.bridge.values import HbmValue
from hwsim.kernels.ops import AluOp
from hwsim.lang import isa as nisa
from hwsim.lang.tiles import View
from hwsim.library.common import BufferRing

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
    rows = plan_rows(ctx, x.shape, [out_view, x], [dim], budget)
    loads, steps = BufferRing(ctx.options.buffers), BufferRing(2)
    for group in rows.groups:
        total: View | None = None  # the running total: last column of the previous chunk
        for tile in group:
            p, n = tile.partitions, tile.free_elements
            src = loads((p, n), tile_dtype, lang.sbuf, max_shape=rows.largest)
            ctx.queues.load(src, tile.ap(1, x))
            if total is not None:  # carry: the scan then adds it to every element
                nisa.tensor_tensor(src[:, 0:1], src[:, 0:1], total, AluOp.add, engine=engine)
            shift = 1
            while shift < n:
                dst = steps((p, n), tile_dtype, lang.sbuf, max_shape=rows.largest)
                nisa.tensor_copy(dst[:, :shift], src[:, :shift], engine=engine)
                nisa.tensor_tensor(
                    dst[:, shift:], src[:, shift:], src[:, : n - shift], AluOp.add, engine=engine
                )
                src, shift = dst, shift * 2
            ctx.queues.store(tile.ap(0, out_view), src)
            total = src[:, n - 1 : n]
    return out
