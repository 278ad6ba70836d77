"""Gathers with integer index tensors: ``embedding``, ``index.Tensor``, ``index_select``.

All three are "rows of a table picked by indices the device holds": the indexed dims of x are
flattened into G table rows of R elements (the trailing dims), the index tensors into one
linear row index per output position, and ``bridge.tiling.gather`` picks the rows with the
indirect DMA ``dma_gather`` (a one-hot matmul on TensorE only for strided rows; its docstring
has the cost and exactness rules). Leading dims that are not indexed (``x[:, idx]``) are a loop
of gathers.

Indices are data: they may be computed on the device (positions from ``arange``, masks built by
``transformers``) or be graph inputs (token ids). Graph inputs are bounds-checked on every run
(``IndexError`` like torch); computed indices cannot be checked before the run: an out-of-range
one stops it at the DMA gather (``MemoryAccessError``), or gives a zero row on the one-hot path.
``index.Tensor`` wraps negative indices as torch does.

Limits: advanced indices must be adjacent (torch moves the result dims first otherwise), and
bool/uint8 mask indices have a value-dependent shape (data dependence).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import torch

from hwsim import lang
from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import HW_INT32, INT_DTYPES, MOVABLE_DTYPES
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.lowerings.views import materialize
from hwsim.bridge.registry import OpCall, register_lowering
from hwsim.bridge.tiling import map_tiles
from hwsim.bridge.tiling.drivers import Operand
from hwsim.bridge.tiling.gather import gather_rows
from hwsim.bridge.values import HbmValue
from hwsim.kernels.ops import AluOp
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing

aten = torch.ops.aten

#: Largest integer fp32 holds exactly (row numbers are compared and combined in fp32).
EXACT_FP32_INTEGER = 2**24


def _index_dtype_check(call: OpCall, tensors: Sequence[Any]) -> None:
    for t in tensors:
        if t.dtype in (torch.bool, torch.uint8):
            raise Unsupported(
                call.op,
                Reason.DATA_DEPENDENCE,
                "a bool/uint8 mask index: the result's shape depends on its values",
            )
        if t.dtype not in INT_DTYPES:
            raise Unsupported(call.op, Reason.DTYPE, f"index dtype {t.dtype}")


def _index_check(call: OpCall) -> None:
    indices = list(call.args[1])
    present = [i for i, t in enumerate(indices) if t is not None]
    if not present:
        raise Unsupported(call.op, Reason.SHAPE, "no index tensor")
    if present != list(range(present[0], present[-1] + 1)):
        raise Unsupported(
            call.op, Reason.SHAPE, "advanced indices separated by ':' (result dims move first)"
        )
    _index_dtype_check(call, [indices[i] for i in present])


def _single_index_check(position: int):
    def check(call: OpCall) -> None:
        _index_dtype_check(call, [call.args[position]])

    return check


@register_lowering(
    aten.index.Tensor,
    family="indexing",
    dtypes=MOVABLE_DTYPES,
    check=_index_check,
    value_dependent_checked=True,
)
def index(ctx: LoweringContext, x: HbmValue, indices: list[HbmValue | None]) -> HbmValue:
    """x[..., i0, i1, ...] with adjacent integer index tensors (broadcast together)."""
    first = next(d for d, t in enumerate(indices) if t is not None)
    tensors = [t for t in indices if t is not None]
    return gather(ctx, x, first, tensors, wrap=True, what="index")


@register_lowering(
    aten.index_select.default,
    family="indexing",
    dtypes=MOVABLE_DTYPES,
    check=_single_index_check(2),
)
def index_select(ctx: LoweringContext, x: HbmValue, dim: int, idx: HbmValue) -> HbmValue:
    """x.index_select(dim, idx): idx is 1-D (or 0-D) in [0, x.shape[dim])."""
    if x.ndim == 0:  # torch indexes a 0-d x as [1] and returns 0-d (the out meta's shape)
        x = x.unsqueeze(0)
    dim = dim % x.ndim
    if idx.ndim == 0:
        idx = idx.unsqueeze(0)
    return gather(ctx, x, dim, [idx], wrap=False, what="index_select")


@register_lowering(
    aten.embedding.default,
    family="indexing",
    dtypes=MOVABLE_DTYPES,
    check=_single_index_check(1),
)
def embedding(ctx: LoweringContext, weight: HbmValue, ids: HbmValue, *_: Any, **__: Any):
    """weight[ids] for weight [V, D] and ids of any shape (``padding_idx`` only affects the
    backward pass)."""
    return gather(ctx, weight, 0, [ids], wrap=False, what="embedding")


def gather(
    ctx: LoweringContext,
    x: HbmValue,
    first: int,
    indices: Sequence[HbmValue],
    *,
    wrap: bool,
    what: str,
) -> HbmValue:
    """out = x[(:,) * first + (indices...)] with the index tensors broadcast together."""
    meta: TensorMeta = ctx.out
    k = len(indices)
    lead, indexed, trail = x.shape[:first], x.shape[first : first + k], x.shape[first + k :]
    for t, size in zip(indices, indexed, strict=True):
        ctx.check_index_range(t, -size if wrap else 0, size, f"{what} into a dim of size {size}")
    shape = tuple(torch.broadcast_shapes(*(t.shape for t in indices)))
    rows, row_elements = math.prod(indexed), math.prod(trail)
    if rows > EXACT_FP32_INTEGER:
        raise Unsupported(
            ctx.call.op,
            Reason.SHAPE,
            f"{rows} indexed rows: row numbers are matched in fp32, exact up to 2**24",
        )
    count = math.prod(shape)
    lin = _linear_index(ctx, indices, indexed, shape, wrap)
    table = _viewed(ctx, x, (*lead, rows, row_elements))
    out = ctx.new_value(meta.shape, meta.dtype)
    out_rows = out.view((*lead, count, row_elements))
    assert out_rows is not None  # a new contiguous value views as anything
    for at in itertools.product(*(range(n) for n in lead)):
        gather_rows(ctx, _select(table, at), lin, _select(out_rows, at))
    return out


def _linear_index(
    ctx: LoweringContext,
    indices: Sequence[HbmValue],
    sizes: Sequence[int],
    shape: tuple[int, ...],
    wrap: bool,
) -> HbmValue:
    """The flat row number sum_j wrap(idx_j) * prod(sizes[j+1:]), as an [N] int32 view."""
    count = math.prod(shape)
    if len(indices) == 1 and not wrap:
        flat = indices[0].expand(shape).view((count,))
        if flat is not None:
            return flat
    lin = ctx.new_value(shape, HW_INT32)
    multipliers = [math.prod(sizes[j + 1 :]) for j in range(len(indices))]
    temps = BufferRing(2)

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        for j, src in enumerate(srcs):
            value = src
            if wrap:  # idx + size * (idx < 0)
                value = temps(tuple(dst.shape), HW_INT32, lang.sbuf)
                nisa.tensor_scalar(
                    value, src, AluOp.is_lt, 0.0, op1=AluOp.multiply, operand1=float(sizes[j])
                )
                nisa.tensor_tensor(value, value, src, AluOp.add, engine="gpsimd")
            if j == 0:
                nisa.tensor_scalar(dst, value, AluOp.multiply, float(multipliers[j]))
            else:
                nisa.scalar_tensor_tensor(
                    dst, value, AluOp.multiply, float(multipliers[j]), AluOp.add, dst
                )

    expanded = [t.expand(shape) for t in indices]
    map_tiles(ctx, lin, expanded, compute, tile_dtype=HW_INT32)
    flat = lin.view((count,))
    assert flat is not None
    return flat


def _viewed(ctx: LoweringContext, x: HbmValue, shape: tuple[int, ...]) -> HbmValue:
    """x viewed as ``shape`` (a contiguous copy first if its layout does not allow it)."""
    viewed = x.view(shape)
    if viewed is None:
        viewed = materialize(ctx, x).view(shape)
        assert viewed is not None
    return viewed


def _select(value: HbmValue, at: tuple[int, ...]) -> HbmValue:
    for i in at:
        value = value.select(0, i)
    return value
