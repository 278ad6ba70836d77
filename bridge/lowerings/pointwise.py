"""Elementwise lowerings: ScalarE activations, VectorE ALU ops with broadcasting and scalars.

Each line registers one ATen overload with a family helper from ``bridge.registry``; the helper
allocates the output, broadcasts the inputs (stride-0 views) and tiles the op. Activation
functions are evaluated as ``kernels.activations`` defines them (within one fp32 ulp), the ALU ops
in fp32 as VectorE does, then cast to the output dtype.

Integer tensors take add/sub/mul/neg/minimum/maximum/clamp (``registry`` says how exactly).
Comparisons, logical ops and ``where`` are in ``compare``.

Not yet lowered: ``div`` with a rounding mode, ``pow`` with a tensor exponent, ``remainder``.
"""

from __future__ import annotations

import torch

from bridge.context import LoweringContext
from bridge.dtypes import NUMERIC_DTYPES
from bridge.errors import Reason, Unsupported
from bridge.registry import (
    OpCall,
    check_int32_scalars,
    pointwise,
    register_alu_unary,
    register_binary,
    register_lowering,
    register_unary,
)
from bridge.tiling.drivers import Operand
from bridge.values import HbmValue
from hwsim.lang import isa as nisa
from kernels.ops import ActivationFunction as Act
from kernels.ops import AluOp

aten = torch.ops.aten

register_unary(aten.relu.default, Act.relu)
register_unary(aten.tanh.default, Act.tanh)
register_unary(aten.sigmoid.default, Act.sigmoid)
register_unary(aten.silu.default, Act.silu)
register_unary(aten.exp.default, Act.exp)
register_unary(aten.log.default, Act.log)
register_unary(aten.sqrt.default, Act.sqrt)
register_unary(aten.rsqrt.default, Act.rsqrt)
register_unary(aten.reciprocal.default, Act.reciprocal)
register_unary(aten.abs.default, Act.abs)
register_unary(aten.erf.default, Act.erf)
register_unary(aten.sin.default, Act.sin)
register_unary(aten.cos.default, Act.cos)
register_alu_unary(aten.neg.default, AluOp.multiply, -1.0)

register_binary(aten.add.Tensor, AluOp.add)
register_binary(aten.add.Scalar, AluOp.add)
register_binary(aten.sub.Tensor, AluOp.subtract)
register_binary(aten.sub.Scalar, AluOp.subtract)
register_binary(aten.rsub.Tensor, AluOp.subtract, swap=True)
register_binary(aten.rsub.Scalar, AluOp.subtract, swap=True)
register_binary(aten.mul.Tensor, AluOp.multiply)
register_binary(aten.mul.Scalar, AluOp.multiply)
register_binary(aten.div.Tensor, AluOp.divide)
register_binary(aten.div.Scalar, AluOp.divide)

GELU = {"none": Act.gelu, "tanh": Act.gelu_apprx_tanh}


def _gelu_check(call: OpCall) -> None:
    approximate = call.kwargs.get("approximate", call.args[1] if len(call.args) > 1 else "none")
    if approximate not in GELU:
        raise Unsupported(call.op, Reason.SHAPE, f"gelu approximate={approximate!r}")


@register_lowering(aten.gelu.default, family="pointwise", check=_gelu_check)
def gelu(ctx: LoweringContext, x: HbmValue, approximate: str = "none") -> HbmValue:
    """GELU on ScalarE: the erf form (torch's default) or the tanh approximation."""
    func = GELU[approximate]

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        nisa.activation(dst, func, srcs[0])

    return pointwise(ctx, [x], compute)


#: pow(x, exponent) for exponents with an exact ScalarE function.
POW_FUNCTIONS = {2.0: Act.square, 0.5: Act.sqrt, -0.5: Act.rsqrt, -1.0: Act.reciprocal}


def _pow_check(call: OpCall) -> None:
    exponent = call.args[1] if len(call.args) > 1 else call.kwargs.get("exponent")
    if isinstance(exponent, bool) or not isinstance(exponent, (int, float)):
        raise Unsupported(call.op, Reason.SHAPE, f"exponent {exponent!r}: a real number is needed")


@register_lowering(aten.pow.Tensor_Scalar, family="pointwise", check=_pow_check)
def pow_scalar(ctx: LoweringContext, x: HbmValue, exponent: float) -> HbmValue:
    """x ** exponent as torch's CPU kernel computes it: 2, 0.5, -0.5, -1 are ScalarE functions,
    3 is x * x * x and -2 is 1 / (x * x) (the same roundings as torch), 1 a copy, 0 ones; any
    other exponent is GpSimdE ``power`` (fp64 pow rounded once to fp32)."""
    e = float(exponent)

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        x_tile = srcs[0]
        if e in POW_FUNCTIONS:
            nisa.activation(dst, POW_FUNCTIONS[e], x_tile)
        elif e == 3.0:
            nisa.activation(dst, Act.square, x_tile)
            nisa.tensor_tensor(dst, dst, x_tile, AluOp.multiply)
        elif e == -2.0:
            nisa.activation(dst, Act.square, x_tile)
            nisa.reciprocal(dst, dst)
        elif e == 1.0:
            nisa.activation(dst, Act.copy, x_tile)
        elif e == 0.0:
            nisa.memset(dst, 1.0)
        else:
            nisa.tensor_scalar(dst, x_tile, AluOp.power, e, engine="gpsimd")

    return pointwise(ctx, [x], compute)


# ---- clamp, minimum, maximum ----------------------------------------------------------------

register_binary(aten.maximum.default, AluOp.max)
register_binary(aten.minimum.default, AluOp.min)


def _clamp_check(call: OpCall) -> None:
    bounds = [b for b in call.args[1:3] if b is not None]
    bounds += [b for k, b in call.kwargs.items() if k in ("min", "max") and b is not None]
    if not bounds:
        raise Unsupported(call.op, Reason.SHAPE, "clamp needs min or max")
    check_int32_scalars(call, bounds)


@register_lowering(
    aten.clamp.default, family="pointwise", dtypes=NUMERIC_DTYPES, check=_clamp_check
)
def clamp(
    ctx: LoweringContext, x: HbmValue, min: float | None = None, max: float | None = None
) -> HbmValue:
    """min(max(x, min), max) in one VectorE tensor_scalar (NaN propagates, as in torch)."""
    ops = [(AluOp.max, min), (AluOp.min, max)]
    (op0, low), *rest = [(op, float(v)) for op, v in ops if v is not None]

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        if rest:
            (op1, high) = rest[0]
            nisa.tensor_scalar(dst, srcs[0], op0, low, op1=op1, operand1=high)
        else:
            nisa.tensor_scalar(dst, srcs[0], op0, low)

    return pointwise(ctx, [x], compute)


@register_lowering(aten.clamp.Tensor, family="pointwise", dtypes=NUMERIC_DTYPES)
def clamp_tensor(
    ctx: LoweringContext, x: HbmValue, min: HbmValue | None = None, max: HbmValue | None = None
) -> HbmValue:
    """min(max(x, min), max) with broadcast tensor bounds (VectorE tensor_tensor each)."""
    bounds = [(op, v) for op, v in ((AluOp.max, min), (AluOp.min, max)) if v is not None]
    if not bounds:
        raise Unsupported("aten.clamp.Tensor", Reason.SHAPE, "clamp needs min or max")

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        source = srcs[0]
        for (op, _), bound in zip(bounds, srcs[1:], strict=True):
            nisa.tensor_tensor(dst, source, bound, op)
            source = dst

    return pointwise(ctx, [x, *(v for _, v in bounds)], compute)
