"""Eight fp32 lanes as one Numba value (an LLVM ``<8 x float>``): sums kept in registers.

Numba's loop vectoriser only vectorises an innermost loop, so a sum that runs over an outer loop
(a matmul's K) lives in memory between its steps. These intrinsics let a jitted kernel hold
``float32x8`` values in local variables instead: LLVM keeps them in vector registers (two SSE
registers per value on a host without AVX) and every operation is lane by lane, exactly as the
same scalar operation on each lane.

``mul_add8`` is a multiply rounded to fp32 and then an add rounded to fp32, never a fused
multiply-add: the IR carries no fast-math or contraction flags, so LLVM may not fuse them on any
host. The loads and stores check no bounds: the caller guarantees ``index + LANES <= arr.size``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir
from numba import types
from numba.extending import intrinsic, models, register_model

LANES = 8
_VECTOR = ir.VectorType(ir.FloatType(), LANES)


class Float32x8(types.Type):
    """The Numba type of eight fp32 lanes."""

    def __init__(self) -> None:
        super().__init__(name="float32x8")


float32x8 = Float32x8()


@register_model(Float32x8)
class _Float32x8Model(models.PrimitiveModel):
    def __init__(self, dmm: Any, fe_type: Any) -> None:
        super().__init__(dmm, fe_type, _VECTOR)


def _lane_op(typer: Callable[..., Any]) -> Any:
    """``numba.extending.intrinsic``, typed as ``Any``: jitted code calls an intrinsic without the
    typing context its typer takes first, which a type checker would count as a missing argument."""
    return intrinsic(typer)


def _flat_f32(arr: Any) -> bool:
    """A 1-D C-contiguous float32 array: LANES elements from an index are adjacent in memory."""
    return (
        isinstance(arr, types.Array)
        and arr.ndim == 1
        and arr.layout == "C"
        and arr.dtype == types.float32
    )


def _element_pointer(context: Any, builder: Any, sig: Any, args: Any) -> Any:
    """Pointer to ``args[0][args[1]]`` (no wraparound of negative indices, no bounds check)."""
    arr_type, index_type = sig.args[0], sig.args[1]
    data = context.make_array(arr_type)(context, builder, args[0]).data
    index = context.cast(builder, args[1], index_type, types.intp)
    return builder.gep(data, [index])


def _vector_pointer(context: Any, builder: Any, sig: Any, args: Any) -> Any:
    """``_element_pointer`` as a pointer to LANES adjacent floats."""
    return builder.bitcast(_element_pointer(context, builder, sig, args), _VECTOR.as_pointer())


@_lane_op
def zeros8(typingctx: Any) -> Any:
    """Eight +0.0 lanes."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return ir.Constant(_VECTOR, [0.0] * LANES)

    return float32x8(), codegen


@_lane_op
def load8(typingctx: Any, arr: Any, index: Any) -> Any:
    """``arr[index : index + LANES]`` as one value (``arr``: 1-D C-contiguous float32)."""
    if not (_flat_f32(arr) and isinstance(index, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.load(_vector_pointer(context, builder, sig, args), align=4)

    return float32x8(arr, index), codegen


@_lane_op
def store8(typingctx: Any, arr: Any, index: Any, value: Any) -> Any:
    """``arr[index : index + LANES] = value`` (``arr``: 1-D C-contiguous float32)."""
    if not (_flat_f32(arr) and isinstance(index, types.Integer) and value == float32x8):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        builder.store(args[2], _vector_pointer(context, builder, sig, args), align=4)
        return context.get_dummy_value()

    return types.none(arr, index, value), codegen


@_lane_op
def broadcast8(typingctx: Any, arr: Any, index: Any) -> Any:
    """``arr[index]`` in every lane (``arr``: 1-D C-contiguous float32)."""
    if not (_flat_f32(arr) and isinstance(index, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        value = builder.load(_element_pointer(context, builder, sig, args), align=4)
        zero = ir.Constant(ir.IntType(32), 0)
        first = builder.insert_element(ir.Constant(_VECTOR, ir.Undefined), value, zero)
        everywhere = ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES)
        return builder.shuffle_vector(first, first, everywhere)

    return float32x8(arr, index), codegen


@_lane_op
def mul_add8(typingctx: Any, total: Any, weight: Any, values: Any) -> Any:
    """``total + weight * values`` lane by lane: the product rounded to fp32, then the sum."""
    if not (total == weight == values == float32x8):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        total, weight, values = args
        return builder.fadd(total, builder.fmul(weight, values))

    return float32x8(total, weight, values), codegen


@_lane_op
def add8(typingctx: Any, first: Any, second: Any) -> Any:
    """``first + second`` lane by lane, rounded to fp32."""
    if not (first == second == float32x8):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.fadd(args[0], args[1])

    return float32x8(first, second), codegen
