"""Elementwise lowerings: ScalarE activations, VectorE ALU ops with broadcasting and scalars.

Each line registers one ATen overload with a family helper from ``bridge.registry``; the helper
allocates the output, broadcasts the inputs (stride-0 views) and tiles the op. Activation
functions are evaluated as ``kernels.activations`` defines them (within one fp32 ulp), the ALU ops
in fp32 as VectorE does, then cast to the output dtype.

Not yet lowered: comparisons and ``where``/``masked_fill`` (bool tensors), integer arithmetic,
``clamp``, ``div`` with a rounding mode, ``pow`` with a tensor exponent.
"""

from __future__ import annotations

import torch

from bridge.context import LoweringContext
from bridge.errors import Reason, Unsupported
from bridge.registry import (
    OpCall,
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
    if not isinstance(exponent, (int, float)) or float(exponent) not in (*POW_FUNCTIONS, 1.0):
        raise Unsupported(
            call.op,
            Reason.SHAPE,
            f"exponent {exponent!r}: only {sorted((*POW_FUNCTIONS, 1.0))} are lowered",
        )


@register_lowering(aten.pow.Tensor_Scalar, family="pointwise", check=_pow_check)
def pow_scalar(ctx: LoweringContext, x: HbmValue, exponent: float) -> HbmValue:
    """x ** exponent for exponents 2, 0.5, -0.5, -1 (ScalarE functions) and 1 (a copy)."""
    func = POW_FUNCTIONS.get(float(exponent), Act.copy)

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        nisa.activation(dst, func, srcs[0])

    return pointwise(ctx, [x], compute)
