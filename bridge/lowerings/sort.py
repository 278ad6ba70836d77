"""Row searches: ``topk``, ``sort``, ``argmax`` / ``argmin``, as VectorE's top-8 instructions.

The searched dim is moved last and rows go on partitions (128 per block), the whole row on the
free axis in fp32 (integers exact within 2**24, bf16 widens exactly). Per block:

    w = max(x, -FLT_MAX)  (or max(-x, -FLT_MAX) for the smallest)    1 VectorE tensor_scalar
    per round of 8:  v8 = max8(w)                                   VectorE, n cycles
                     w, i8 = nc_match_replace8(w, v8, -inf)         VectorE, n cycles
    values = nc_n_gather(x, indices)                                GpSimdE

so k results cost ceil(k / 8) rounds of two n-cycle passes (sort: k = n, O(n^2 / 4) cycles a
block of rows, the price of a selection sort by eights; the hardware has no sort unit). The
clamp keeps every working value above the -inf that marks a taken position, so a value is never
found twice; ties come out lowest index first (``nc_match_replace8`` takes the first occurrence
of each value in order), which is what torch's stable CPU sort gives, in both directions.
Values are read back from the input by index (``nc_n_gather``), so -inf inputs stay -inf. Rows
shorter than 8 are padded with -inf (never chosen before a real value).

Limits: rows of at most 16384 elements (the search instructions' limit) that fit SBUF twice;
NaN is not ordered as torch orders it (torch puts NaN first); ties in ``topk`` and in an
unstable ``sort`` come lowest index first, where torch's CPU kernels (introselect / introsort)
leave another order; ``topk(sorted=False)`` returns the sorted order (torch leaves it open).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from hwsim import lang
from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import HW_FP32, HW_INT32, NUMERIC_DTYPES
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.lowerings.views import materialize
from hwsim.bridge.registry import OpCall, register_lowering
from hwsim.bridge.tiling.space import hbm_ap
from hwsim.bridge.values import HbmValue
from hwsim.isa.search_ops import SEARCH_MAX_ELEMENTS
from hwsim.kernels.ops import AluOp
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing, chunks

aten = torch.ops.aten
FLT_MAX = float(torch.finfo(torch.float32).max)
TOP = 8  # values per max8 / nc_match_replace8


def _row_length(x: Any, dim: Any) -> int:
    if dim is None or x.ndim == 0:
        return max(1, x.numel())
    return x.shape[dim % x.ndim]


def _search_check(dim_position: int, default_dim: Any = -1):
    def check(call: OpCall) -> None:
        x = call.args[0]
        args = call.args
        dim = args[dim_position] if len(args) > dim_position else None
        dim = call.kwargs.get("dim", default_dim) if dim is None else dim
        if x.dtype == torch.bool:
            raise Unsupported(call.op, Reason.DTYPE, "bool input")
        n = _row_length(x, dim)
        if n > SEARCH_MAX_ELEMENTS:
            raise Unsupported(
                call.op,
                Reason.SHAPE,
                f"rows of {n} elements: max8 / nc_match_replace8 read at most "
                f"{SEARCH_MAX_ELEMENTS} per partition",
            )

    return check


def _rows_last(x: HbmValue, dim: int) -> tuple[HbmValue, list[int]]:
    """x with ``dim`` moved last, and the permutation that did it."""
    order = [d for d in range(x.ndim) if d != dim] + [dim]
    return x.permute(order), order


def search_rows(
    ctx: LoweringContext,
    x: HbmValue,
    dim: int | None,
    k: int,
    largest: bool,
    value_dtype: Any = HW_FP32,
) -> tuple[HbmValue, HbmValue, tuple[int, ...], list[int]]:
    """(values, indices) of the k largest (smallest) along ``dim`` of x, sorted, both
    contiguous over the moved shape (*other dims, k), and that shape and permutation; ``dim``
    None searches the flattened tensor."""
    if dim is None or x.ndim == 0:
        flat = x.view((x.numel,)) or materialize(ctx, x).view((x.numel,))
        assert flat is not None
        x, dim = flat, 0
    dim %= x.ndim
    moved, order = _rows_last(x, dim)
    n = moved.shape[-1]
    lead = moved.shape[:-1]
    rows = math.prod(lead)
    table = moved.view((rows, n)) or materialize(ctx, moved).view((rows, n))
    assert table is not None
    width = max(n, TOP)
    if width > ctx.free_budget(2, 4):  # two double-buffered fp32 rows (input, working copy)
        raise Unsupported(ctx.call.op, Reason.SHAPE, f"rows of {n} elements do not fit SBUF")
    rounds = math.ceil(k / TOP)
    values = ctx.new_value((*lead, k), value_dtype)
    indices = ctx.new_value((*lead, k), HW_INT32)
    loads, works, picks = BufferRing(2), BufferRing(2), BufferRing(2)
    idx_ring, out_ring, cast_ring = BufferRing(2), BufferRing(2), BufferRing(2)
    row_stride, col_stride = table.strides
    for r0, rt in chunks(rows, ctx.pmax):
        xt = loads((rt, width), lang.float32, lang.sbuf)
        if width > n:
            nisa.memset(xt[:, n:], float("-inf"))
        src = hbm_ap(table, table.offset + r0 * row_stride, rt, row_stride, (n,), (col_stride,))
        ctx.queues.load(xt[:, :n], src)
        work = works((rt, width), lang.float32, lang.sbuf)
        sign = 1.0 if largest else -1.0
        nisa.tensor_scalar(work, xt, AluOp.multiply, sign, op1=AluOp.max, operand1=-FLT_MAX)
        if width > n:
            nisa.memset(work[:, n:], float("-inf"))
        found = idx_ring((rt, rounds * TOP), lang.uint32, lang.sbuf)
        for r in range(rounds):
            top = picks((rt, TOP), lang.float32, lang.sbuf)
            nisa.max8(top, work)
            nisa.nc_match_replace8(
                work, work, top, float("-inf"), dst_idx=found[:, r * TOP : (r + 1) * TOP]
            )
        vals = out_ring((rt, k), lang.float32, lang.sbuf)
        nisa.nc_n_gather(vals, xt, found[:, :k])
        ids = cast_ring((rt, k), HW_INT32, lang.sbuf)
        nisa.tensor_copy(ids, found[:, :k])
        ctx.queues.store(hbm_ap(values, values.offset + r0 * k, rt, k, (k,), (1,)), vals)
        ctx.queues.store(hbm_ap(indices, indices.offset + r0 * k, rt, k, (k,), (1,)), ids)
    return values, indices, (*lead, k), order


def _restore(ctx: LoweringContext, value: HbmValue, order: list[int], meta: TensorMeta) -> HbmValue:
    """A moved-shape result viewed back in the input's dim order, cast to ``meta``'s dtype."""
    inverse = [order.index(d) for d in range(len(order))]
    back = value.permute(inverse)
    if back.shape != meta.shape:  # a 0-d input searched as [1]
        back = back.view(meta.shape) or back
    if value.dtype != meta.dtype:
        back = materialize(ctx, back, meta.dtype)
    return back


def _topk_check(call: OpCall) -> None:
    _search_check(2)(call)


@register_lowering(aten.topk.default, dtypes=NUMERIC_DTYPES, check=_topk_check)
def topk(
    ctx: LoweringContext,
    x: HbmValue,
    k: int,
    dim: int = -1,
    largest: bool = True,
    sorted: bool = True,
) -> tuple[HbmValue, HbmValue]:
    metas = ctx.out
    if x.ndim == 0:
        x = x.unsqueeze(0)
    values, indices, _, order = search_rows(ctx, x, dim, k, largest, metas[0].dtype)
    return _restore(ctx, values, order, metas[0]), _restore(ctx, indices, order, metas[1])


def _sort_check(call: OpCall) -> None:
    position = 2 if call.op == aten.sort.stable else 1
    _search_check(position)(call)


@register_lowering(aten.sort.default, aten.sort.stable, dtypes=NUMERIC_DTYPES, check=_sort_check)
def sort(ctx: LoweringContext, x: HbmValue, *args: Any, **kwargs: Any):
    """sort(x, dim=-1, descending=False) and sort.stable(x, *, stable, dim, descending): one
    order for both (ties by index, stable)."""
    if ctx.call.op == aten.sort.stable:
        dim, descending = kwargs.get("dim", -1), kwargs.get("descending", False)
    else:
        dim = args[0] if args else kwargs.get("dim", -1)
        descending = args[1] if len(args) > 1 else kwargs.get("descending", False)
    metas = ctx.out
    if x.ndim == 0:
        x = x.unsqueeze(0)
    n = x.shape[dim % x.ndim]
    values, indices, _, order = search_rows(ctx, x, dim, n, bool(descending), metas[0].dtype)
    return _restore(ctx, values, order, metas[0]), _restore(ctx, indices, order, metas[1])


def _arg_search(largest: bool):
    def lower(ctx: LoweringContext, x: HbmValue, dim: Any = None, keepdim: bool = False):
        meta: TensorMeta = ctx.out
        _, indices, _, order = search_rows(ctx, x, dim, 1, largest)
        if dim is None or x.ndim == 0:
            result = indices.view(meta.shape)
            assert result is not None
            return result
        inverse = [order.index(d) for d in range(len(order))]
        back = indices.permute(inverse)  # the searched dim has size 1 now
        return back if keepdim else back.squeeze([dim % x.ndim])

    lower.__qualname__ = "argmax" if largest else "argmin"
    return lower


for _op, _largest in ((aten.argmax.default, True), (aten.argmin.default, False)):
    register_lowering(_op, family="sort", dtypes=NUMERIC_DTYPES, check=_search_check(1, None))(
        _arg_search(_largest)
    )
