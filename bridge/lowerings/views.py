"""View and copy lowerings: metadata-only views become strided HBM views; copies move data.

permute, transpose, t, expand, unsqueeze, squeeze, slice (any positive step), select, alias and
view/reshape of a viewable layout emit no instructions: they return a new ``HbmValue`` over the
same HBM tensor, and the ops that read it load through its strides. A view the layout cannot
express (``view`` of a permuted tensor) copies to a contiguous tensor first, as ``reshape`` does.

clone is an alias too: lowered graphs are functional (AOTAutograd removed mutation), so nothing can
observe the sharing; a graph output that aliases another value is copied out at the end.
Dtype casts (``_to_copy``, ``copy``) are in ``casts``; ``split`` and ``cat`` in ``concat``.
"""

from __future__ import annotations

from typing import Any

import torch

from hwsim.bridge.context import LoweringContext
from hwsim.bridge.dtypes import MOVABLE_DTYPES
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.registry import OpCall, register_lowering
from hwsim.bridge.tiling import copy_tiles
from hwsim.bridge.values import HbmValue

aten = torch.ops.aten


def views(*ops: Any, check: Any = None):
    """A metadata-only view: an empty result (or input) is a view of nothing, emitting nothing."""
    return register_lowering(
        *ops, family="views", dtypes=MOVABLE_DTYPES, check=check, empty_ok=True
    )


def materialize(ctx: LoweringContext, x: HbmValue, dtype: Any = None) -> HbmValue:
    """A new contiguous copy of ``x`` (cast to ``dtype`` if given)."""
    out = ctx.new_value(x.shape, dtype or x.dtype)
    copy_tiles(ctx, out, x)
    return out


@views(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def view(ctx: LoweringContext, x: HbmValue, size: list[int]) -> HbmValue:
    viewed = x.view(size)
    if viewed is None:  # not expressible over this layout: copy, then view the copy
        viewed = materialize(ctx, x).view(size)
        assert viewed is not None
    return viewed


@views(aten.permute.default)
def permute(ctx: LoweringContext, x: HbmValue, dims: list[int]) -> HbmValue:
    return x.permute(dims)


@views(aten.transpose.int)
def transpose(ctx: LoweringContext, x: HbmValue, dim0: int, dim1: int) -> HbmValue:
    return x.transpose(dim0, dim1)


@views(aten.t.default)
def t(ctx: LoweringContext, x: HbmValue) -> HbmValue:
    return x.transpose(0, 1)


@views(aten.expand.default)
def expand(ctx: LoweringContext, x: HbmValue, size: list[int], *, implicit: bool = False):
    return x.expand(size)


@views(aten.unsqueeze.default)
def unsqueeze(ctx: LoweringContext, x: HbmValue, dim: int) -> HbmValue:
    return x.unsqueeze(dim)


@views(aten.squeeze.dim, aten.squeeze.dims)
def squeeze_dims(ctx: LoweringContext, x: HbmValue, dim: Any) -> HbmValue:
    return x.squeeze([dim] if isinstance(dim, int) else list(dim))


@views(aten.squeeze.default)
def squeeze(ctx: LoweringContext, x: HbmValue) -> HbmValue:
    return x.squeeze()


def _slice_check(call: OpCall) -> None:
    step = call.args[4] if len(call.args) > 4 else call.kwargs.get("step", 1)
    if not isinstance(step, int) or step < 1:
        raise Unsupported(call.op, Reason.SHAPE, f"slice step {step!r}")


@views(aten.slice.Tensor, check=_slice_check)
def slice_(
    ctx: LoweringContext,
    x: HbmValue,
    dim: int = 0,
    start: int | None = None,
    end: int | None = None,
    step: int = 1,
) -> HbmValue:
    return x.slice(dim, start, end, step)


@views(aten.select.int)
def select(ctx: LoweringContext, x: HbmValue, dim: int, index: int) -> HbmValue:
    return x.select(dim, index)


def _as_strided_check(call: OpCall) -> None:
    x, size, stride = call.args[0], call.args[1], call.args[2]
    offset = call.args[3] if len(call.args) > 3 else call.kwargs.get("storage_offset")
    if not x.is_contiguous() or x.storage_offset() != 0:
        raise Unsupported(
            call.op, Reason.SHAPE, "as_strided of a view (only a contiguous tensor's own elements)"
        )
    reach = (offset or 0) + sum((n - 1) * s for n, s in zip(size, stride, strict=True) if n)
    if any(s < 0 for s in stride) or reach >= max(1, x.numel()):
        raise Unsupported(
            call.op,
            Reason.SHAPE,
            f"as_strided size {list(size)} stride {list(stride)} reaches element {reach} of a "
            f"{x.numel()}-element tensor",
        )


@views(aten.as_strided.default, check=_as_strided_check)
def as_strided(
    ctx: LoweringContext,
    x: HbmValue,
    size: list[int],
    stride: list[int],
    storage_offset: int | None = None,
) -> HbmValue:
    """A view of a contiguous tensor's elements with torch's sizes and strides (decompositions
    restride results with it: adaptive pooling's output); a value whose lowering is not
    contiguous (a clone kept as a view) is copied first, so element i is x's i-th in order."""
    base = x if x.is_contiguous() else materialize(ctx, x)
    return HbmValue(base.tile, tuple(size), tuple(stride), base.offset + (storage_offset or 0))


@views(
    aten.alias.default,
    aten.detach.default,
    aten.clone.default,
    aten.lift_fresh_copy.default,
)
def alias(ctx: LoweringContext, x: HbmValue, **_: Any) -> HbmValue:
    return x
