"""What a mixture-of-experts router needs besides topk/sort: ``histc`` (tokens per expert) and
``empty_permuted`` (the unpermute buffer).

**histc** counts, per bin b, the x with e_b <= x < e_{b+1} (the last bin also takes x == max),
the edges e being torch's ``linspace(min, max, bins + 1)`` as its CPU kernel evaluates it
(start + i * step below the halfway index, end - (steps - 1 - i) * step from it, in fp32), and
the elements outside [min, max] (and NaN) counted nowhere: what torch's binary-search-corrected
bin index gives for fp32. For bf16/fp16 torch's bin is its uncorrected position
trunc((x - min) * bins / (max - min)) computed in the 16-bit dtype, so that is computed
(``_bin_hits_16bit``). Bins go on partitions (128 per block), x on the free axis of every partition
(one stride-0 DMA per chunk); per chunk 2 VectorE instructions and a reduction:

    t = (x < hi_b);  t = (x >= lo_b) * t;  count_b += sum(t)

so the cost is O(bins * N / 128) VectorE cycles. The edges are computed on the device from an
iota (5 instructions a block). Limits: ``min == max`` (torch then takes the data's range: a
value-dependent choice) is refused.

**empty_permuted** allocates a value laid out in ``physical_layout`` order; its contents are
undefined in torch and zero here (one memset per tile), so a consumer never reads uninitialized
HBM.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from hwsim import lang
from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import FLOAT_DTYPES, HW_TO_TORCH, MOVABLE_DTYPES
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.lowerings.creation import fill_views
from hwsim.bridge.lowerings.views import materialize
from hwsim.bridge.registry import OpCall, register_lowering
from hwsim.bridge.tiling.space import hbm_ap
from hwsim.bridge.values import HbmValue
from hwsim.kernels.ops import AluOp, ReduceOp
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing, chunks, reduce_into

aten = torch.ops.aten


def _histc_args(call: OpCall) -> tuple[int, float, float]:
    args = list(call.args[1:]) + [None] * 3
    bins = args[0] if args[0] is not None else call.kwargs.get("bins", 100)
    low = args[1] if args[1] is not None else call.kwargs.get("min", 0)
    high = args[2] if args[2] is not None else call.kwargs.get("max", 0)
    return int(bins), float(low), float(high)


def _histc_check(call: OpCall) -> None:
    bins, low, high = _histc_args(call)
    if low == high:
        raise Unsupported(
            call.op, Reason.DATA_DEPENDENCE, "histc with min == max bins the data's own range"
        )
    if not (math.isfinite(low) and math.isfinite(high)) or bins < 1:
        raise Unsupported(call.op, Reason.SHAPE, f"histc bins={bins} min={low} max={high}")


@register_lowering(aten.histc.default, dtypes=FLOAT_DTYPES, check=_histc_check)
def histc(ctx: LoweringContext, x: HbmValue, *_: Any, **__: Any) -> HbmValue:
    meta: TensorMeta = ctx.out
    bins, low, high = _histc_args(ctx.call)
    start, end = np.float32(low), np.float32(high)
    step = np.float32((end - start) / np.float32(bins))
    halfway = (bins + 1) // 2
    past_end = np.nextafter(end, np.float32(np.inf))  # the last bin includes max
    flat = x.view((x.numel,)) or materialize(ctx, x).view((x.numel,))
    assert flat is not None
    (n,) = flat.shape
    out = ctx.new_value((bins,), meta.dtype)
    chunk = min(n, ctx.free_budget(3, 4))
    loads, temps, parts, scratch = BufferRing(2), BufferRing(2), BufferRing(2), BufferRing(4)
    for b0, bt in chunks(bins, ctx.pmax):
        edge_i = lang.ndarray((bt, 2), lang.float32, lang.sbuf)  # i = b, b + 1
        nisa.iota(edge_i, offset=b0, channel_multiplier=1, steps=(1,))
        first = lang.ndarray((bt, 2), lang.float32, lang.sbuf)
        nisa.tensor_scalar(
            first, edge_i, AluOp.multiply, float(step), op1=AluOp.add, operand1=float(start)
        )
        second = lang.ndarray((bt, 2), lang.float32, lang.sbuf)
        nisa.tensor_scalar(
            second, edge_i, AluOp.subtract, float(bins), op1=AluOp.multiply, operand1=float(step)
        )
        nisa.tensor_scalar(second, second, AluOp.add, float(end))
        below = lang.ndarray((bt, 2), lang.float32, lang.sbuf)
        nisa.tensor_scalar(below, edge_i, AluOp.is_lt, float(halfway))
        edges = lang.ndarray((bt, 2), lang.float32, lang.sbuf)
        nisa.select(edges, below, first, second)
        # the last edge moves one ulp up: x <= max counts in the last bin
        nisa.tensor_scalar(
            below,
            edge_i,
            AluOp.is_equal,
            float(bins),
            op1=AluOp.multiply,
            operand1=float(past_end - end),
        )
        nisa.tensor_tensor(edges, edges, below, AluOp.add)
        lo, hi = edges[:, 0:1], edges[:, 1:2]
        count = lang.ndarray((bt, 1), lang.float32, lang.sbuf)
        for j, (n0, nt) in enumerate(chunks(n, chunk)):
            xt = loads((bt, nt), lang.float32, lang.sbuf)
            (stride,) = flat.strides
            ctx.queues.load(xt, hbm_ap(flat, flat.offset + n0 * stride, bt, 0, (nt,), (stride,)))
            hit = temps((bt, nt), lang.float32, lang.sbuf)
            if meta.dtype.is_float and meta.dtype.itemsize == 2:
                _bin_hits_16bit(hit, xt, edge_i[:, 0:1], meta.dtype, bins, low, high, scratch)
            else:
                nisa.tensor_scalar(hit, xt, AluOp.is_lt, hi)
                nisa.scalar_tensor_tensor(hit, xt, AluOp.is_ge, lo, AluOp.multiply, hit)
            reduce_into(count, hit, ReduceOp.add, first=j == 0, partials=parts)
        ctx.queues.store(hbm_ap(out, out.offset + b0, bt, 1, (), ()), count)
    return out


def _bin_hits_16bit(
    hit: Any,
    xt: Any,
    bin_col: Any,
    dtype: Any,
    bins: int,
    low: float,
    high: float,
    scratch: BufferRing,
) -> None:
    """hit = (bin of x == b) for bf16/fp16 x, the bin as torch's CPU kernel computes it in
    the input's dtype: trunc(((x - min) * bins) / (max - min)), each step rounded to the
    dtype, clamped to bins - 1, x outside [min, max] nowhere (9 VectorE instructions)."""
    lo = float(torch.tensor(low).to(torch.float32).to(HW_TO_TORCH[dtype.name]).float())
    hi = float(torch.tensor(high).to(torch.float32).to(HW_TO_TORCH[dtype.name]).float())
    span = float(torch.tensor(hi - lo).to(HW_TO_TORCH[dtype.name]).float())
    step = scratch(tuple(xt.shape), dtype, lang.sbuf)
    nisa.tensor_scalar(step, xt, AluOp.subtract, lo)
    nisa.tensor_scalar(step, step, AluOp.multiply, float(bins))
    nisa.tensor_scalar(step, step, AluOp.divide, span)
    pos = scratch(tuple(xt.shape), lang.float32, lang.sbuf)
    nisa.scalar_tensor_tensor(pos, step, AluOp.mod, 1.0, AluOp.subtract, step, reverse1=True)
    nisa.tensor_scalar(pos, pos, AluOp.min, float(bins - 1), op1=AluOp.is_equal, operand1=bin_col)
    inside = scratch(tuple(xt.shape), lang.float32, lang.sbuf)
    nisa.tensor_scalar(inside, xt, AluOp.is_le, hi)
    nisa.scalar_tensor_tensor(inside, xt, AluOp.is_ge, lo, AluOp.multiply, inside)
    nisa.tensor_tensor(hit, pos, inside, AluOp.multiply)


def _empty_permuted_check(call: OpCall) -> None:
    layout = list(call.args[1])
    if sorted(layout) != list(range(len(call.args[0]))):
        raise Unsupported(call.op, Reason.SHAPE, f"physical_layout {layout} is not a permutation")


@register_lowering(
    aten.empty_permuted.default,
    family="creation",
    dtypes=MOVABLE_DTYPES,
    check=_empty_permuted_check,
    reads_inputs=False,
)
def empty_permuted(ctx: LoweringContext, size: Any, physical_layout: Any, **_: Any) -> HbmValue:
    meta: TensorMeta = ctx.out
    order = list(physical_layout)
    physical = ctx.new_value(tuple(meta.shape[d] for d in order), meta.dtype)
    fill_views(ctx, [physical], 0.0)
    return physical.permute([order.index(d) for d in range(len(order))])
