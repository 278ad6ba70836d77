"""Dtype casts: ``_to_copy`` and the functional ``copy``.

Most casts are one HBM -> HBM DMA per tile: the DMA engines convert (via fp32, round to nearest
even [S12]), which is what torch does between floats and from integers to floats. Three casts
differ from a numeric conversion and are computed:

- to bool: ``x != 0`` (a DMA would turn 0.3 into 0 and 2 into 2);
- float to integer: torch truncates toward zero, so VectorE computes ``x - fmod(x, 1)`` (exact)
  before the store converts the now integral value;
- a cast between a dtype and its device representation (int64 <-> int32 values, bool -> uint8)
  changes nothing on the device and is an alias.

Integer narrowing (int32 -> int8) saturates where torch wraps; float to integer out of range is
undefined in torch and saturates here.
"""

from __future__ import annotations

from typing import Any

import torch

from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import HW_FP32, HW_INT32, MOVABLE_DTYPES, to_hw
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.lowerings.views import materialize
from hwsim.bridge.registry import OpCall, pointwise, register_lowering
from hwsim.bridge.tiling.drivers import Operand
from hwsim.bridge.values import HbmValue
from hwsim.kernels.ops import AluOp
from hwsim.lang import isa as nisa

aten = torch.ops.aten


def _to_copy_check(call: OpCall) -> None:
    device = call.kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        raise Unsupported(call.op, Reason.SHAPE, f"copy to device {device}")
    layout = call.kwargs.get("layout")
    if layout not in (None, torch.strided):
        raise Unsupported(call.op, Reason.SHAPE, f"layout {layout}")


def cast(ctx: LoweringContext, x: HbmValue, source: torch.dtype) -> HbmValue:
    """x (of torch dtype ``source``) as the node's output dtype (module docstring)."""
    meta: TensorMeta = ctx.out
    target = meta.torch_dtype
    if target == torch.bool and source != torch.bool:
        operand = to_hw(source) if source.is_floating_point else HW_INT32

        def nonzero(dst: Operand, srcs: list[Operand]) -> None:
            nisa.tensor_scalar(dst, srcs[0], AluOp.not_equal, 0.0)

        return pointwise(ctx, [x], nonzero, tile_dtype=HW_INT32, input_dtypes=[operand])
    if source.is_floating_point and target is not None and not target.is_floating_point:

        def truncate(dst: Operand, srcs: list[Operand]) -> None:
            nisa.tensor_scalar(dst, srcs[0], AluOp.mod, 1.0)
            nisa.tensor_tensor(dst, srcs[0], dst, AluOp.subtract)

        return pointwise(ctx, [x], truncate, tile_dtype=HW_FP32)
    if meta.dtype == x.dtype and x.shape == meta.shape:
        return x
    return materialize(ctx, x.expand(meta.shape), meta.dtype)


@register_lowering(
    aten._to_copy.default, family="casts", dtypes=MOVABLE_DTYPES, check=_to_copy_check
)
def to_copy(ctx: LoweringContext, x: HbmValue, **_: Any) -> HbmValue:
    """A dtype cast, or an alias when nothing changes on the device."""
    return cast(ctx, x, ctx.arg_meta(0).dtype)


@register_lowering(aten.copy.default, family="casts", dtypes=MOVABLE_DTYPES)
def copy(ctx: LoweringContext, x: HbmValue, src: HbmValue, non_blocking: bool = False):
    """Functional copy: ``src`` broadcast to ``x``'s shape, in ``x``'s dtype."""
    return cast(ctx, src.expand(x.shape), ctx.arg_meta(1).dtype)
