"""Dtype casts: ``_to_copy`` and the functional ``copy``.

Most casts are one HBM -> HBM DMA per tile: the DMA engines convert (via fp32, round to nearest
even [S12]), which is what torch does between floats and from integers to floats. The casts
where torch's conversion is not the DMA's (which rounds and saturates) are computed, with
torch's CPU results:

- to bool: ``x != 0`` (a DMA would turn 0.3 into 0 and 2 into 2);
- float to integer: torch truncates toward zero (``x - fmod(x, 1)`` on VectorE, exact, infinities
  kept); a value int32 cannot hold, an infinity or a NaN becomes x86's "integer indefinite",
  the lowest value, which torch's CPU kernels return (INT32_MIN; for int64 INT64_MIN, which the
  device's int64 representation holds as INT32_MIN: ``bridge.dtypes``); a narrower target
  (int16, int8, uint8) then keeps the low bits of that int32, as torch does;
- integer narrowing (int32 -> int8, uint8 <-> int8, ...) keeps the low bits (wraps modulo
  2^bits), as torch does, where the DMA would saturate: VectorE bitvec ops on int32 tiles;
- a cast between a dtype and its device representation (int64 <-> int32 values, bool -> uint8)
  changes nothing on the device and is an alias. So is int64 -> int32: the two hold the same
  values on the device, except int64's INT64_MIN, which torch narrows to 0 and the alias keeps
  as INT32_MIN (``docs/limits.md``).
"""

from __future__ import annotations

from typing import Any

import torch

from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import HW_FP32, HW_INT32, HW_UINT8, INT32_MIN, MOVABLE_DTYPES, to_hw
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.lowerings.pointwise import emit_trunc, rounding_scratch
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


#: Float -> int32 results past int32's range (and NaN): x86's "integer indefinite", the lowest
#: value, which torch's CPU conversion returns (``float('inf')`` -> -2147483648).
INTEGER_INDEFINITE = float(INT32_MIN)
#: fp32 magnitudes at or above this do not fit int32 (-2**31 itself is the indefinite value).
INT32_LIMIT_FP32 = float(2**31)


def _device_range(dtype: torch.dtype) -> tuple[int, int]:
    """The values an integer (or bool) dtype holds on the device: int64's are int32's."""
    if dtype == torch.bool:
        return 0, 1
    info = torch.iinfo(torch.int32 if dtype == torch.int64 else dtype)
    return info.min, info.max


def _wrap_bits(source: torch.dtype, target: torch.dtype) -> int | None:
    """How many low bits an integer cast keeps, where it must wrap: None when every value of
    ``source`` fits ``target`` (or the target is int64/int32, whose device values are int32)."""
    if target in (torch.int64, torch.int32, torch.bool):
        return None
    low, high = _device_range(source)
    target_low, target_high = _device_range(target)
    return None if target_low <= low and high <= target_high else torch.iinfo(target).bits


def _emit_wrap(dst: Operand, src: Operand, bits: int, signed: bool) -> None:
    """dst = the low ``bits`` of int32 ``src``, sign-extended if ``signed``: one VectorE bitvec
    instruction (the left shift is exact in the engine's 64-bit integer path, the arithmetic
    right shift reads the low 32 bits as int32)."""
    if signed:
        shift = 32 - bits
        nisa.tensor_scalar(
            dst, src, AluOp.logical_shift_left, shift, op1=AluOp.arith_shift_right, operand1=shift
        )
    else:
        nisa.tensor_scalar(dst, src, AluOp.bitwise_and, (1 << bits) - 1)


def _float_to_integer(ctx: LoweringContext, x: HbmValue, target: torch.dtype) -> HbmValue:
    """Truncate, make what int32 cannot hold the indefinite value, then wrap to a narrower
    target (module docstring): 4 VectorE instructions, 6 for int16/int8/uint8."""
    scratch = rounding_scratch(ctx)
    bits = _wrap_bits(torch.int32, target)

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        x = srcs[0]
        whole = scratch(x) if bits else dst
        emit_trunc(scratch, whole, x)
        inside = scratch(x, HW_UINT8)  # |x| < 2**31; NaN compares false
        limit = INT32_LIMIT_FP32
        nisa.tensor_scalar(inside, x, AluOp.abs_max, 0.0, op1=AluOp.is_lt, operand1=limit)
        nisa.tensor_copy_predicated(whole, INTEGER_INDEFINITE, inside, reverse_pred=True)
        if bits:
            as_int = scratch(x, HW_INT32)
            nisa.tensor_copy(as_int, whole)
            _emit_wrap(dst, as_int, bits, target.is_signed)

    tile = HW_INT32 if bits else HW_FP32
    return pointwise(ctx, [x], compute, tile_dtype=tile, input_dtypes=[HW_FP32])


def _narrow_integer(ctx: LoweringContext, x: HbmValue, target: torch.dtype, bits: int) -> HbmValue:
    """An integer cast that keeps ``bits`` low bits (module docstring): 1 VectorE instruction."""

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        _emit_wrap(dst, srcs[0], bits, target.is_signed)

    return pointwise(ctx, [x], compute, tile_dtype=HW_INT32)


def cast(ctx: LoweringContext, x: HbmValue, source: torch.dtype) -> HbmValue:
    """x (of torch dtype ``source``) as the node's output dtype (module docstring)."""
    meta: TensorMeta = ctx.out
    target = meta.torch_dtype
    if target == torch.bool and source != torch.bool:
        operand = to_hw(source) if source.is_floating_point else HW_INT32

        def nonzero(dst: Operand, srcs: list[Operand]) -> None:
            nisa.tensor_scalar(dst, srcs[0], AluOp.not_equal, 0.0)

        return pointwise(ctx, [x], nonzero, tile_dtype=HW_INT32, input_dtypes=[operand])
    if target is not None and not target.is_floating_point:
        if source.is_floating_point:
            return _float_to_integer(ctx, x, target)
        bits = _wrap_bits(source, target)
        if bits:
            return _narrow_integer(ctx, x, target, bits)
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
