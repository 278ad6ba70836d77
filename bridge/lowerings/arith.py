"""Elementwise arithmetic with exact torch semantics beyond one ISA instruction: ``sign``,
``log1p``, ``fmod``, ``remainder``.

- **sign** is two VectorE comparisons, (x > 0) - (x < 0), for every dtype: torch gives 0 for NaN
  and for -0.0, which ScalarE's ``sign`` activation (NaN in, NaN out) would not.
- **log1p** has no ScalarE function before NeuronCore-v4 (``nki.language.log1p`` requires it),
  and log(1 + x) loses every digit of a small x to the rounding of 1 + x (log1p(1e-10) would
  be 0). It is Goldberg's correction instead: u = 1 + x, log1p(x) = log(u) * x / (u - 1), and x
  itself where u == 1; fp32 within a few ulps (Goldberg, "What every computer scientist should
  know about floating-point arithmetic", Theorem 4). 1 ScalarE + 5 VectorE instructions a tile;
  +inf, -1, x < -1 and NaN give torch's inf, -inf, NaN, NaN (the quotient uses x and u - 1
  clamped to FLT_MAX, so inf / inf never forms). Mamba's softplus decomposes to it.
- **fmod** is the ALU's C ``fmod`` (VectorE for floats, exact; GpSimdE's int32 remainder for
  integers, exact). **remainder** (Python's modulo, the sign of the divisor) is torch's own
  formula: m = fmod(a, b), then m + b where m != 0 and sign(m) != sign(b) (7 instructions).

Integer division by zero: torch raises; the device gives ``a`` (fmod) as the hardware does not
trap (``kernels.alu``).
"""

from __future__ import annotations

from typing import Any

import torch

from hwsim import lang
from hwsim.bridge.context import LoweringContext
from hwsim.bridge.dtypes import FLOAT_DTYPES, HW_FP32, NUMERIC_DTYPES
from hwsim.bridge.lowerings.pointwise import scalar_as_value
from hwsim.bridge.registry import OpCall, check_int32_scalars, pointwise, register_lowering
from hwsim.bridge.tiling.drivers import Operand
from hwsim.bridge.values import HbmValue
from hwsim.kernels.ops import ActivationFunction as Act
from hwsim.kernels.ops import AluOp
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing

aten = torch.ops.aten
FLT_MAX = float(torch.finfo(torch.float32).max)


def _scratch(ctx: LoweringContext, count: int):
    """Scratch tiles shaped like a result tile, in its dtype (``count`` live at once)."""
    ring = BufferRing(count * ctx.options.buffers)

    def scratch(like: Operand) -> Operand:
        return ring(tuple(like.shape), like.dtype, lang.sbuf)

    return scratch


@register_lowering(aten.sign.default, family="pointwise", dtypes=NUMERIC_DTYPES)
def sign(ctx: LoweringContext, x: HbmValue) -> HbmValue:
    """(x > 0) - (x < 0): 2 VectorE instructions (NaN and -0.0 give 0, as in torch)."""
    scratch = _scratch(ctx, 1)

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        positive = scratch(dst)
        nisa.tensor_scalar(positive, srcs[0], AluOp.is_gt, 0.0)
        nisa.scalar_tensor_tensor(
            dst, srcs[0], AluOp.is_lt, 0.0, AluOp.subtract, positive, reverse1=True
        )

    return pointwise(ctx, [x], compute)


@register_lowering(aten.log1p.default, family="pointwise", dtypes=FLOAT_DTYPES)
def log1p(ctx: LoweringContext, x: HbmValue) -> HbmValue:
    """Goldberg's log1p (module docstring), computed in fp32 whatever the tile dtype."""
    fp32 = BufferRing(4 * ctx.options.buffers)

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        shape = tuple(dst.shape)
        u, log_u, below, ratio = (fp32(shape, lang.float32, lang.sbuf) for _ in range(4))
        nisa.tensor_scalar(u, srcs[0], AluOp.add, 1.0)
        nisa.activation(log_u, Act.log, u)
        nisa.tensor_scalar(below, u, AluOp.min, FLT_MAX, op1=AluOp.subtract, operand1=1.0)
        nisa.scalar_tensor_tensor(ratio, srcs[0], AluOp.min, FLT_MAX, AluOp.divide, below)
        nisa.tensor_tensor(ratio, log_u, ratio, AluOp.multiply)
        nisa.tensor_scalar(u, u, AluOp.is_equal, 1.0)  # u == 1: x itself
        nisa.select(dst, u, srcs[0], ratio)

    return pointwise(ctx, [x], compute, tile_dtype=HW_FP32)


def _mod_check(call: OpCall) -> None:
    check_int32_scalars(call, call.args[1:2])


def _fmod_engine(ctx: LoweringContext) -> str:
    return "vector" if ctx.out.dtype.is_float else "gpsimd"  # GpSimdE: exact int32


@register_lowering(
    aten.fmod.Tensor, aten.fmod.Scalar, family="pointwise", dtypes=NUMERIC_DTYPES, check=_mod_check
)
def fmod(ctx: LoweringContext, a: HbmValue, b: Any) -> HbmValue:
    """C fmod: the remainder of a / b truncated, with the sign of a (one ALU instruction)."""
    engine = _fmod_engine(ctx)
    if not isinstance(b, HbmValue) and ctx.out.dtype.is_float:
        divisor = float(b)
        return pointwise(ctx, [a], lambda d, s: nisa.tensor_scalar(d, s[0], AluOp.mod, divisor))
    b = scalar_as_value(ctx, b)
    return pointwise(
        ctx, [a, b], lambda d, s: nisa.tensor_tensor(d, s[0], s[1], AluOp.mod, engine=engine)
    )


@register_lowering(
    aten.remainder.Tensor,
    aten.remainder.Scalar,
    family="pointwise",
    dtypes=NUMERIC_DTYPES,
    check=_mod_check,
)
def remainder(ctx: LoweringContext, a: HbmValue, b: Any) -> HbmValue:
    """a - floor(a / b) * b as torch computes it: m = fmod(a, b); m += b where m != 0 and the
    signs of m and b differ. Integers take their remainder, product and sum on GpSimdE (exact
    int32); the sign test goes through fp32, which keeps every sign."""
    engine = _fmod_engine(ctx)
    b = scalar_as_value(ctx, b)
    scratch = _scratch(ctx, 2)

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        x, y = srcs
        m, flag = scratch(dst), scratch(dst)
        nisa.tensor_tensor(m, x, y, AluOp.mod, engine=engine)
        nisa.tensor_scalar(flag, m, AluOp.is_gt, 0.0)  # sign(m) = (m > 0) - (m < 0)
        nisa.scalar_tensor_tensor(flag, m, AluOp.is_lt, 0.0, AluOp.subtract, flag, reverse1=True)
        # sign(m) * y < 0 exactly when m != 0 and the signs differ (|sign(m)| = 1: no underflow)
        nisa.tensor_tensor(flag, flag, y, AluOp.multiply)
        nisa.tensor_scalar(flag, flag, AluOp.is_lt, 0.0)
        nisa.tensor_tensor(flag, flag, y, AluOp.multiply, engine=engine)
        nisa.tensor_tensor(dst, m, flag, AluOp.add, engine=engine)

    return pointwise(ctx, [a, b], compute)
