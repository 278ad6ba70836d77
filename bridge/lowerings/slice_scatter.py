"""Writes into a view, functionally: ``slice_scatter`` and ``select_scatter`` (out = a copy of x
with one slice or one index along a dim replaced by src), and ``index_copy`` (the positions of
a dim given by an index tensor: a static KV cache's update at the token's position).

They are what AOTAutograd makes of ``y[:, 1:] = ...`` (T5's ``_shift_right``) and the backward
of ``slice`` and ``select`` (Llama's ``rotate_half``, any ``x[..., :k]``). Both are HBM -> HBM
DMAs only, with disjoint destinations: src goes to the written elements, and x to each region
the write leaves alone (before the slice, the gaps of a stepped slice, after it), so no DMA
overwrites another's bytes and none waits for another.

``index_copy(x, dim, index, src)`` is ``index_put(x, [None] * dim + [index], src)``: the index is
data (computed on the device), so it goes through ``index_put``'s scatter (``scatter_gather``).
"""

from __future__ import annotations

import torch

from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import MOVABLE_DTYPES
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.registry import OpCall, register_lowering
from hwsim.bridge.tiling import copy_tiles
from hwsim.bridge.values import HbmValue

aten = torch.ops.aten


def _copy_slice(
    ctx: LoweringContext, out: HbmValue, x: HbmValue, dim: int, start: int, stop: int, step: int
) -> None:
    piece = out.slice(dim, start, stop, step)
    if piece.numel:
        copy_tiles(ctx, piece, x.slice(dim, start, stop, step))


def copy_except(
    ctx: LoweringContext, out: HbmValue, x: HbmValue, dim: int, first: int, count: int, step: int
) -> None:
    """out = x at every element except first + k * step (k < count) along ``dim``."""
    n = x.shape[dim]
    if count == 0:
        copy_tiles(ctx, out, x)
        return
    stop = first + (count - 1) * step + 1  # one past the last written element
    _copy_slice(ctx, out, x, dim, 0, first, 1)
    for gap in range(1, step if count > 1 else 1):  # between written elements
        _copy_slice(ctx, out, x, dim, first + gap, stop, step)
    _copy_slice(ctx, out, x, dim, stop, n, 1)


def _slice_scatter_check(call: OpCall) -> None:
    step = call.args[5] if len(call.args) > 5 else call.kwargs.get("step", 1)
    if not isinstance(step, int) or step < 1:
        raise Unsupported(call.op, Reason.SHAPE, f"slice_scatter step {step!r}")


@register_lowering(
    aten.slice_scatter.default,
    family="slice_scatter",
    dtypes=MOVABLE_DTYPES,
    check=_slice_scatter_check,
    empty_ok=True,
)
def slice_scatter(
    ctx: LoweringContext,
    x: HbmValue,
    src: HbmValue,
    dim: int = 0,
    start: int | None = None,
    end: int | None = None,
    step: int = 1,
) -> HbmValue:
    """out = x; out[(:,) * dim + (start:end:step,)] = src."""
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    if out.numel == 0:
        return out
    dim %= x.ndim
    first, stop, _ = slice(start, end).indices(x.shape[dim])
    count = max(0, -(-(stop - first) // step))
    copy_except(ctx, out, x, dim, first, count, step)
    if count:
        copy_tiles(ctx, out.slice(dim, first, stop, step), src)
    return out


@register_lowering(aten.select_scatter.default, family="slice_scatter", dtypes=MOVABLE_DTYPES)
def select_scatter(
    ctx: LoweringContext, x: HbmValue, src: HbmValue, dim: int, index: int
) -> HbmValue:
    """out = x; out.select(dim, index) = src."""
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    dim %= x.ndim
    index %= x.shape[dim]
    copy_except(ctx, out, x, dim, index, 1, 1)
    copy_tiles(ctx, out.select(dim, index), src)
    return out


def _index_copy_check(call: OpCall) -> None:
    x, index = call.args[0], call.args[2]
    if index.dtype not in (torch.int32, torch.int64) or index.ndim > 1:
        raise Unsupported(call.op, Reason.SHAPE, f"index of {index.ndim} dims, {index.dtype}")
    if x.ndim == 0:
        raise Unsupported(call.op, Reason.SHAPE, "index_copy into a 0-d tensor")


@register_lowering(
    aten.index_copy.default,
    family="slice_scatter",
    dtypes=MOVABLE_DTYPES,
    check=_index_copy_check,
)
def index_copy(
    ctx: LoweringContext, x: HbmValue, dim: int, index: HbmValue, src: HbmValue
) -> HbmValue:
    """out = x; out[(:,) * dim + (index,)] = src (the last write wins on repeated indices)."""
    from hwsim.bridge.lowerings.scatter_gather import index_put

    dim %= max(1, x.ndim)
    if index.ndim == 0:
        index, src = index.unsqueeze(0), src.unsqueeze(dim)
    return index_put(ctx, x, [None] * dim + [index], src)
