"""Op enumerations (ALU, activation, reduce) named after nki.isa, and their property sets."""

from __future__ import annotations

from enum import IntEnum


class AluOp(IntEnum):
    """Binary ALU ops of VectorE/ScalarE/GpSimdE (``op``, ``op0``, ``op1`` fields of nki.isa).

    Every op is a function ``op(a, b)``; ``a`` is the data-path (left) operand. The float semantics
    (fp32 in, fp32 out) and the integer semantics (int64 in and out, 32-bit hardware result in the
    low 32 bits) are specified by the reference twins in ``kernels.alu``.
    """

    bypass = 0  # a: passes the data-path operand through, ignores b
    add = 1
    subtract = 2
    multiply = 3
    divide = 4
    max = 5
    min = 6
    power = 7
    abs_max = 8  # max(|a|, |b|)
    abs_min = 9  # min(|a|, |b|)
    is_equal = 10
    not_equal = 11
    is_ge = 12
    is_gt = 13
    is_le = 14
    is_lt = 15
    logical_and = 16  # (a != 0) and (b != 0)
    logical_or = 17
    logical_xor = 18
    bitwise_and = 19
    bitwise_or = 20
    bitwise_xor = 21
    bitwise_not = 22  # ~a, unary: ignores b
    arith_shift_left = 23
    arith_shift_right = 24
    logical_shift_left = 25
    logical_shift_right = 26
    mod = 27  # C fmod: remainder with the sign of a


class ActivationFunction(IntEnum):
    """ScalarE activation functions (``op`` of ``nki.isa.activation``): func(x * scale + bias)."""

    copy = 0
    identity = 0  # alias of copy
    exp = 1
    log = 2
    tanh = 3
    sigmoid = 4
    relu = 5
    gelu = 6  # erf form: x * Phi(x)
    gelu_apprx_tanh = 7
    silu = 8
    softplus = 9
    sqrt = 10
    rsqrt = 11
    reciprocal = 12
    square = 13
    abs = 14
    sign = 15
    sin = 16
    cos = 17
    erf = 18
    mish = 19
    arctan = 20
    gelu_dx = 21  # d/dx gelu (erf form)
    silu_dx = 22  # d/dx silu
    erf_dx = 23  # d/dx erf = 2/sqrt(pi) * exp(-x^2)


class ReduceOp(IntEnum):
    """Reduce ops of ``tensor_reduce`` / ``tensor_partition_reduce``; values equal AluOp's."""

    add = AluOp.add.value
    max = AluOp.max.value
    min = AluOp.min.value
    multiply = AluOp.multiply.value
    bitwise_or = AluOp.bitwise_or.value
    bitwise_and = AluOp.bitwise_and.value


# Property sets (one semantics table instead of scattered ``if`` chains).

#: Ops that need integer operands (the "bitvec" ops): rejected by the float kernels.
INTEGER_ONLY_OPS: frozenset[AluOp] = frozenset(
    {
        AluOp.bitwise_and,
        AluOp.bitwise_or,
        AluOp.bitwise_xor,
        AluOp.bitwise_not,
        AluOp.arith_shift_left,
        AluOp.arith_shift_right,
        AluOp.logical_shift_left,
        AluOp.logical_shift_right,
    }
)

#: Comparison ops: the result is 1 (true) or 0 (false), 1.0/0.0 in the float kernels.
COMPARISON_OPS: frozenset[AluOp] = frozenset(
    {AluOp.is_equal, AluOp.not_equal, AluOp.is_ge, AluOp.is_gt, AluOp.is_le, AluOp.is_lt}
)

#: Logical ops: treat operands as booleans (nonzero is true) and return 1/0, 1.0/0.0 for floats.
LOGICAL_OPS: frozenset[AluOp] = frozenset({AluOp.logical_and, AluOp.logical_or, AluOp.logical_xor})

#: Ops whose result is 1/0 (comparisons and logical ops).
BOOLEAN_RESULT_OPS: frozenset[AluOp] = COMPARISON_OPS | LOGICAL_OPS

#: Unary ops that ignore their right operand.
UNARY_ALU_OPS: frozenset[AluOp] = frozenset({AluOp.bypass, AluOp.bitwise_not})

#: Float ops whose fp32 result is exactly defined by IEEE 754 (correctly rounded or exact), so a
#: kernel and its reference agree bit for bit. ``power`` goes through libm ``pow`` and is not here.
FLOAT_EXACT_OPS: frozenset[AluOp] = frozenset(AluOp) - INTEGER_ONLY_OPS - {AluOp.power}

#: Ops usable in ``affine_select`` (comparison of the affine expression against 0).
AFFINE_SELECT_CMP_OPS: frozenset[AluOp] = COMPARISON_OPS

#: Reduce ops that need integer operands.
INTEGER_ONLY_REDUCE_OPS: frozenset[ReduceOp] = frozenset(
    {ReduceOp.bitwise_or, ReduceOp.bitwise_and}
)

#: Activation functions fully specified by IEEE 754: exact (copy, relu, abs, sign, square is one
#: rounding of an exact product) or correctly rounded (sqrt, reciprocal). Kernel and reference
#: agree bit for bit on them; the other functions are within one fp32 ulp.
EXACT_ACTIVATIONS: frozenset[ActivationFunction] = frozenset(
    {
        ActivationFunction.copy,
        ActivationFunction.relu,
        ActivationFunction.abs,
        ActivationFunction.sign,
        ActivationFunction.square,
        ActivationFunction.reciprocal,
        ActivationFunction.sqrt,
    }
)
