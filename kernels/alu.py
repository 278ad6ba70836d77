"""Per-element ALU op semantics: jitted scalar functions (fp32, int64) and their NumPy twins.

Float semantics (``alu_f32``, spec ``alu_f32_ref``): operands and result are fp32, as on VectorE /
ScalarE, and IEEE 754 rules apply:

- add, subtract, multiply, divide: one correctly rounded fp32 operation; x/0 is ±inf, 0/0 is NaN.
- max, min: NaN-propagating like ``np.maximum`` / ``np.minimum``; abs_max / abs_min compare and
  return absolute values (``max(|a|, |b|)``).
- power: ``a ** b`` evaluated in float64 (libm ``pow``) and rounded once to fp32, i.e. within one
  fp32 ulp of the exact value; a negative base with a non-integer exponent gives NaN.
- mod: C ``fmod`` (the remainder has the sign of ``a``; exact in fp32); x mod 0 is NaN.
- comparisons and logical ops return 1.0 or 0.0 (IEEE: any comparison with NaN is false except
  ``not_equal``; a NaN operand of a logical op counts as true because NaN != 0).
- bypass returns ``a``; the integer-only ops are rejected before reaching these kernels.

Integer semantics (``alu_i64``, spec ``alu_i64_ref``): operands are int64 arrays carrying the int32
or uint32 values hwsim read from memory. Results are exact in int64 (wrapping modulo 2^64); the
32-bit hardware result is their low 32 bits, which hwsim's wrapping cast to the destination dtype
extracts. Divide truncates toward zero and mod is the C remainder; division by zero gives -1 (all
ones) and ``x mod 0`` gives ``x``, the RISC-V convention, since the hardware does not trap.
``power`` with a negative exponent is the truncated real result (0 unless the base is ±1, and 0 for
base 0). Shift counts use their low five bits (``b & 31``) as a 32-bit barrel shifter does; left
shifts are exact in int64, right shifts read the low 32 bits as int32 (arithmetic) or uint32
(logical).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numba
import numpy as np

from .ops import AluOp

_BYPASS = int(AluOp.bypass)
_ADD = int(AluOp.add)
_SUBTRACT = int(AluOp.subtract)
_MULTIPLY = int(AluOp.multiply)
_DIVIDE = int(AluOp.divide)
_MAX = int(AluOp.max)
_MIN = int(AluOp.min)
_POWER = int(AluOp.power)
_ABS_MAX = int(AluOp.abs_max)
_ABS_MIN = int(AluOp.abs_min)
_IS_EQUAL = int(AluOp.is_equal)
_NOT_EQUAL = int(AluOp.not_equal)
_IS_GE = int(AluOp.is_ge)
_IS_GT = int(AluOp.is_gt)
_IS_LE = int(AluOp.is_le)
_IS_LT = int(AluOp.is_lt)
_LOGICAL_AND = int(AluOp.logical_and)
_LOGICAL_OR = int(AluOp.logical_or)
_LOGICAL_XOR = int(AluOp.logical_xor)
_BITWISE_AND = int(AluOp.bitwise_and)
_BITWISE_OR = int(AluOp.bitwise_or)
_BITWISE_XOR = int(AluOp.bitwise_xor)
_BITWISE_NOT = int(AluOp.bitwise_not)
_ARITH_SHIFT_LEFT = int(AluOp.arith_shift_left)
_ARITH_SHIFT_RIGHT = int(AluOp.arith_shift_right)
_LOGICAL_SHIFT_LEFT = int(AluOp.logical_shift_left)
_LOGICAL_SHIFT_RIGHT = int(AluOp.logical_shift_right)
_MOD = int(AluOp.mod)

_F1 = np.float32(1.0)
_F0 = np.float32(0.0)
_FNAN = np.float32(np.nan)
_LOW32 = 0xFFFFFFFF
_SIGN32 = 0x80000000
_SHIFT_MASK = 31

# ---------------------------------------------------------------------------------------------
# fp32


@numba.njit(cache=True, error_model="numpy")
def fmax_f32(a: np.float32, b: np.float32) -> np.float32:
    """NaN-propagating fp32 max (``np.maximum`` semantics)."""
    if a != a:
        return a
    if b != b:
        return b
    return a if a > b else b


@numba.njit(cache=True, error_model="numpy")
def fmin_f32(a: np.float32, b: np.float32) -> np.float32:
    """NaN-propagating fp32 min (``np.minimum`` semantics)."""
    if a != a:
        return a
    if b != b:
        return b
    return a if a < b else b


@numba.njit(cache=True, error_model="numpy")
def _bool_f32(flag: bool | np.bool_) -> np.float32:
    return _F1 if flag else _F0


@numba.njit(cache=True, error_model="numpy")
def alu_f32(a: np.float32, b: np.float32, op: int) -> np.float32:
    """One fp32 ALU op ``a op b`` (module docstring has the semantics); NaN for integer-only ops."""
    if op == _BYPASS:
        return a
    if op == _ADD:
        return a + b
    if op == _SUBTRACT:
        return a - b
    if op == _MULTIPLY:
        return a * b
    if op == _DIVIDE:
        return a / b
    if op == _MAX:
        return fmax_f32(a, b)
    if op == _MIN:
        return fmin_f32(a, b)
    if op == _POWER:
        return np.float32(math.pow(np.float64(a), np.float64(b)))
    if op == _ABS_MAX:
        return fmax_f32(abs(a), abs(b))
    if op == _ABS_MIN:
        return fmin_f32(abs(a), abs(b))
    if op == _IS_EQUAL:
        return _bool_f32(a == b)
    if op == _NOT_EQUAL:
        return _bool_f32(a != b)
    if op == _IS_GE:
        return _bool_f32(a >= b)
    if op == _IS_GT:
        return _bool_f32(a > b)
    if op == _IS_LE:
        return _bool_f32(a <= b)
    if op == _IS_LT:
        return _bool_f32(a < b)
    if op == _LOGICAL_AND:
        return _bool_f32(a != 0 and b != 0)
    if op == _LOGICAL_OR:
        return _bool_f32(a != 0 or b != 0)
    if op == _LOGICAL_XOR:
        return _bool_f32((a != 0) != (b != 0))
    if op == _MOD:
        return np.float32(np.fmod(a, b))
    return _FNAN


def alu_f32_ref(a: np.ndarray, b: np.ndarray, op: int) -> np.ndarray:
    """Reference for ``alu_f32`` over broadcastable fp32 arrays; returns fp32."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    one, zero = np.float32(1.0), np.float32(0.0)
    with np.errstate(all="ignore"):
        if op == _BYPASS:
            return np.broadcast_arrays(a, b)[0].copy()
        if op == _POWER:
            return np.power(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
        if op in _F32_BINARY:
            return _F32_BINARY[op](a, b).astype(np.float32)
        if op in _PREDICATES:
            return np.where(_PREDICATES[op](a, b), one, zero)
    raise ValueError(f"ALU op {op} has no float semantics (integer-only op or unknown id)")


_BinaryRef = Callable[[np.ndarray, np.ndarray], np.ndarray]

_F32_BINARY: dict[int, _BinaryRef] = {
    _ADD: np.add,
    _SUBTRACT: np.subtract,
    _MULTIPLY: np.multiply,
    _DIVIDE: np.divide,
    _MAX: np.maximum,
    _MIN: np.minimum,
    _ABS_MAX: lambda a, b: np.maximum(np.abs(a), np.abs(b)),
    _ABS_MIN: lambda a, b: np.minimum(np.abs(a), np.abs(b)),
    _MOD: np.fmod,
}

# Boolean-valued ops shared by the float and integer references.
_PREDICATES: dict[int, _BinaryRef] = {
    _IS_EQUAL: np.equal,
    _NOT_EQUAL: np.not_equal,
    _IS_GE: np.greater_equal,
    _IS_GT: np.greater,
    _IS_LE: np.less_equal,
    _IS_LT: np.less,
    _LOGICAL_AND: lambda a, b: (a != 0) & (b != 0),
    _LOGICAL_OR: lambda a, b: (a != 0) | (b != 0),
    _LOGICAL_XOR: lambda a, b: (a != 0) ^ (b != 0),
}

# ---------------------------------------------------------------------------------------------
# int64 carrying 32-bit values


@numba.njit(cache=True)
def _int_power(a: np.int64, b: np.int64) -> np.int64:
    if b < 0:
        if a == 1:
            return np.int64(1)
        if a == -1:
            return np.int64(1) if b % 2 == 0 else np.int64(-1)
        return np.int64(0)
    result = np.int64(1)
    base = a
    e = b
    while e > 0:
        if e & 1:
            result = result * base
        base = base * base
        e >>= 1
    return result


@numba.njit(cache=True)
def alu_i64(a: np.int64, b: np.int64, op: int) -> np.int64:
    """One integer ALU op ``a op b`` (module docstring has the semantics)."""
    if op == _BYPASS:
        return a
    if op == _ADD:
        return a + b
    if op == _SUBTRACT:
        return a - b
    if op == _MULTIPLY:
        return a * b
    if op == _DIVIDE:
        if b == 0:
            return np.int64(-1)
        q = abs(a) // abs(b)
        return q if (a < 0) == (b < 0) else -q
    if op == _MOD:
        if b == 0:
            return a
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    if op == _MAX:
        return max(a, b)
    if op == _MIN:
        return min(a, b)
    if op == _POWER:
        return _int_power(a, b)
    if op == _ABS_MAX:
        return max(abs(a), abs(b))
    if op == _ABS_MIN:
        return min(abs(a), abs(b))
    if op == _IS_EQUAL:
        return np.int64(a == b)
    if op == _NOT_EQUAL:
        return np.int64(a != b)
    if op == _IS_GE:
        return np.int64(a >= b)
    if op == _IS_GT:
        return np.int64(a > b)
    if op == _IS_LE:
        return np.int64(a <= b)
    if op == _IS_LT:
        return np.int64(a < b)
    if op == _LOGICAL_AND:
        return np.int64(a != 0 and b != 0)
    if op == _LOGICAL_OR:
        return np.int64(a != 0 or b != 0)
    if op == _LOGICAL_XOR:
        return np.int64((a != 0) != (b != 0))
    if op == _BITWISE_AND:
        return a & b
    if op == _BITWISE_OR:
        return a | b
    if op == _BITWISE_XOR:
        return a ^ b
    if op == _BITWISE_NOT:
        return ~a
    if op == _ARITH_SHIFT_LEFT:
        return a << (b & _SHIFT_MASK)
    if op == _LOGICAL_SHIFT_LEFT:
        return a << (b & _SHIFT_MASK)
    if op == _ARITH_SHIFT_RIGHT:
        signed32 = ((a & _LOW32) ^ _SIGN32) - _SIGN32
        return signed32 >> (b & _SHIFT_MASK)
    if op == _LOGICAL_SHIFT_RIGHT:
        return (a & _LOW32) >> (b & _SHIFT_MASK)
    return np.int64(0)


def alu_i64_ref(a: np.ndarray, b: np.ndarray, op: int) -> np.ndarray:
    """Reference for ``alu_i64`` over broadcastable int64 arrays; returns int64."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
    with np.errstate(all="ignore"):
        if op == _BYPASS:
            return a.copy()
        if op == _DIVIDE:
            q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
            return np.where(b == 0, -1, np.where((a < 0) == (b < 0), q, -q))
        if op == _MOD:
            return np.where(b == 0, a, np.fmod(a, np.where(b == 0, 1, b)))
        if op == _POWER:
            positive = np.power(a, np.maximum(b, 0))
            negative = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0))
            return np.where(b < 0, negative, positive)
        if op in _I64_BINARY:
            return _I64_BINARY[op](a, b).astype(np.int64)
        if op in _PREDICATES:
            return _PREDICATES[op](a, b).astype(np.int64)
    raise ValueError(f"unknown ALU op id {op}")


def _shift_count(b: np.ndarray) -> np.ndarray:
    return b & _SHIFT_MASK


_I64_BINARY: dict[int, _BinaryRef] = {
    _ADD: np.add,
    _SUBTRACT: np.subtract,
    _MULTIPLY: np.multiply,
    _MAX: np.maximum,
    _MIN: np.minimum,
    _ABS_MAX: lambda a, b: np.maximum(np.abs(a), np.abs(b)),
    _ABS_MIN: lambda a, b: np.minimum(np.abs(a), np.abs(b)),
    _BITWISE_AND: np.bitwise_and,
    _BITWISE_OR: np.bitwise_or,
    _BITWISE_XOR: np.bitwise_xor,
    _BITWISE_NOT: lambda a, b: np.invert(a),
    _ARITH_SHIFT_LEFT: lambda a, b: np.left_shift(a, _shift_count(b)),
    _LOGICAL_SHIFT_LEFT: lambda a, b: np.left_shift(a, _shift_count(b)),
    _ARITH_SHIFT_RIGHT: lambda a, b: np.right_shift(
        (a & _LOW32).astype(np.uint32).view(np.int32), _shift_count(b)
    ),
    _LOGICAL_SHIFT_RIGHT: lambda a, b: np.right_shift(a & _LOW32, _shift_count(b)),
}
