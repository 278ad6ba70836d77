"""Elementwise lowerings: ScalarE activations, VectorE ALU ops with broadcasting and scalars.

Each line registers one ATen overload with a family helper from ``bridge.registry``; the helper
allocates the output, broadcasts the inputs (stride-0 views) and tiles the op. Activation
functions are evaluated as ``kernels.activations`` defines them (within one fp32 ulp), the ALU ops
in fp32 as VectorE does, then cast to the output dtype.

Integer tensors take add/sub/mul/neg/minimum/maximum/clamp (``registry`` says how exactly);
int8, uint8 and int16 add/sub/mul/neg fall back (``registry.refuse_wrapping_ints``).
Comparisons, logical ops and ``where`` are in ``compare``.

``floor`` / ``ceil`` / ``trunc`` / ``round`` and ``div`` with a rounding mode are emulated: the
ISA has no rounding function, so they are built from C ``fmod`` (exact) and the RNE fp32 -> int32
conversion (below). ``pow`` with a tensor exponent is GpSimdE's ``power`` ALU op (libm ``pow``).
``sign``, ``log1p``, ``fmod`` and ``remainder`` are in ``arith``.
"""

from __future__ import annotations

import torch
from torch._ops import OpOverload

from hwsim import lang
from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import HW_FP32, HW_INT32, NUMERIC_DTYPES
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.registry import (
    OpCall,
    check_int32_scalars,
    pointwise,
    register_alu_unary,
    register_binary,
    register_lowering,
    register_unary,
)
from hwsim.bridge.tiling.drivers import Operand
from hwsim.bridge.values import HbmValue
from hwsim.dtypes import DType
from hwsim.kernels.ops import ActivationFunction as Act
from hwsim.kernels.ops import AluOp
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing

aten = torch.ops.aten

#: ATen ops that are the ScalarE activation function of the same name.
ACTIVATIONS = [
    "relu",
    "tanh",
    "sigmoid",
    "silu",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "erf",
    "sin",
    "cos",
]
for _name in ACTIVATIONS:
    register_unary(getattr(aten, _name).default, Act[_name])
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


@register_lowering(aten.abs.default, family="pointwise", dtypes=NUMERIC_DTYPES)
def abs_(ctx: LoweringContext, x: HbmValue) -> HbmValue:
    """|x|: ScalarE ``abs`` for floats; for integers (T5's relative-position buckets) GpSimdE's
    exact int32 ``abs_max(x, x)``."""
    if ctx.out.dtype.is_float:
        return pointwise(ctx, [x], lambda dst, s: nisa.activation(dst, Act.abs, s[0]))
    return pointwise(
        ctx, [x], lambda dst, s: nisa.tensor_tensor(dst, s[0], s[0], AluOp.abs_max, engine="gpsimd")
    )


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


@register_lowering(aten.hardtanh.default, family="pointwise", dtypes=NUMERIC_DTYPES)
def hardtanh(
    ctx: LoweringContext, x: HbmValue, min_val: float = -1.0, max_val: float = 1.0
) -> HbmValue:
    """clamp(x, min_val, max_val) (ReLU6 is hardtanh(0, 6)): one VectorE tensor_scalar."""
    return clamp(ctx, x, min_val, max_val)


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


# ---- rounding: floor, ceil, trunc, round, div with a rounding mode ---------------------------
#
# fp32 values of magnitude >= 2**23 are integers, so each op first clamps x to [-2**23, 2**23]
# (c) and takes the fractional part of c only: then x - frac is exact for every fp32 x, and
# +-inf and NaN pass through (fmod(inf, 1) would be NaN). Exact for all fp32 inputs (and bf16,
# whose values widen exactly) except the sign of zero: a result that rounds to zero from a
# negative x (trunc(-0.5), ceil(-0.5), round(-0.4)) is +0.0 where torch gives -0.0.

#: fp32 values at or above this magnitude have no fractional bits.
INTEGRAL_FP32 = float(2**23)


def rounding_scratch(ctx: LoweringContext, default: DType = HW_FP32):
    """Scratch tiles shaped like a tile, ``default`` dtype unless asked (6 live at most)."""
    ring = BufferRing(2 * ctx.options.buffers)

    def scratch(like: Operand, dtype: DType | None = None) -> Operand:
        return ring(tuple(like.shape), dtype or default, lang.sbuf)

    return scratch


def _clamp_integral(dst: Operand, x: Operand) -> None:
    nisa.tensor_scalar(dst, x, AluOp.max, -INTEGRAL_FP32, op1=AluOp.min, operand1=INTEGRAL_FP32)


def emit_trunc(scratch, dst: Operand, x: Operand) -> None:
    """dst = x - fmod(c, 1): 2 VectorE instructions."""
    c = scratch(x)
    _clamp_integral(c, x)
    nisa.scalar_tensor_tensor(dst, c, AluOp.mod, 1.0, AluOp.subtract, x, reverse1=True)


def _emit_floor_ceil(scratch, dst: Operand, x: Operand, ceil: bool) -> None:
    """floor = t - (f < 0), ceil = t + (f > 0), t = x - f, f = fmod(c, 1): 4 instructions."""
    f, t = scratch(x), scratch(x)
    _clamp_integral(f, x)
    nisa.tensor_scalar(f, f, AluOp.mod, 1.0)
    nisa.tensor_tensor(t, x, f, AluOp.subtract)
    if ceil:
        nisa.scalar_tensor_tensor(dst, f, AluOp.is_gt, 0.0, AluOp.add, t)
    else:
        nisa.scalar_tensor_tensor(dst, f, AluOp.is_lt, 0.0, AluOp.subtract, t, reverse1=True)


def emit_round(scratch, dst: Operand, x: Operand) -> None:
    """Half to even, as torch: r = int32(c) (the conversion rounds to nearest even), then
    x - (c - r): 4 instructions."""
    c, r = scratch(x), scratch(x, HW_INT32)
    _clamp_integral(c, x)
    nisa.tensor_copy(r, c)
    nisa.tensor_tensor(c, c, r, AluOp.subtract)
    nisa.tensor_tensor(dst, x, c, AluOp.subtract)


ROUNDING = {
    "floor": lambda scratch, dst, x: _emit_floor_ceil(scratch, dst, x, ceil=False),
    "ceil": lambda scratch, dst, x: _emit_floor_ceil(scratch, dst, x, ceil=True),
    "trunc": emit_trunc,
    "round": emit_round,
}


def _register_rounding(op: OpOverload, name: str) -> None:
    emit = ROUNDING[name]

    def lower(ctx: LoweringContext, x: HbmValue) -> HbmValue:
        if not ctx.out.dtype.is_float:  # integers are already integral: a copy, as in torch
            return pointwise(ctx, [x], lambda dst, srcs: nisa.tensor_copy(dst, srcs[0]))
        scratch = rounding_scratch(ctx)
        return pointwise(ctx, [x], lambda dst, srcs: emit(scratch, dst, srcs[0]))

    lower.__qualname__ = f"rounding[{name}]"
    register_lowering(op, family="pointwise", dtypes=NUMERIC_DTYPES)(lower)


for _name in ROUNDING:
    _register_rounding(getattr(aten, _name).default, _name)


def _round_decimals_check(call: OpCall) -> None:
    decimals = call.kwargs.get("decimals", 0)
    if not call.args[0].dtype.is_floating_point:
        raise Unsupported(call.op, Reason.DTYPE, "round(decimals=) of an integer tensor")
    if abs(decimals) > 30:
        raise Unsupported(call.op, Reason.SHAPE, f"decimals={decimals}: 10**|decimals| overflows")


@register_lowering(aten.round.decimals, family="pointwise", check=_round_decimals_check)
def round_decimals(ctx: LoweringContext, x: HbmValue, *, decimals: int = 0) -> HbmValue:
    """torch's nearbyint(x * 10**d) / 10**d (d < 0: nearbyint(x / 10**-d) * 10**-d), the scale
    an fp32 immediate as in torch's float kernel: 6 instructions."""
    ten_pow = float(torch.tensor(10.0 ** abs(decimals), dtype=torch.float32))
    pre, post = (AluOp.multiply, AluOp.divide) if decimals >= 0 else (AluOp.divide, AluOp.multiply)
    scratch = rounding_scratch(ctx)

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        scaled = scratch(dst)
        nisa.tensor_scalar(scaled, srcs[0], pre, ten_pow)
        emit_round(scratch, scaled, scaled)
        nisa.tensor_scalar(dst, scaled, post, ten_pow)

    return pointwise(ctx, [x], compute)


def _div_mode_check(call: OpCall) -> None:
    mode = call.kwargs.get("rounding_mode")
    if mode not in (None, "trunc", "floor"):
        raise Unsupported(call.op, Reason.SHAPE, f"rounding_mode={mode!r}")


@register_lowering(
    aten.div.Tensor_mode, family="pointwise", dtypes=NUMERIC_DTYPES, check=_div_mode_check
)
def div_mode(
    ctx: LoweringContext, a: HbmValue, b: HbmValue, *, rounding_mode: str | None = None
) -> HbmValue:
    """a / b rounded as torch's CPU kernels do: every step rounded to the tile dtype, as torch
    computes bf16 in bf16 (the floor and trunc emulations are exact in bf16 too).

    None: one divide. 'trunc': trunc(a / b), 3 instructions. 'floor': torch's
    ``div_floor_floating`` (Python's float floor division), 16 instructions: mod = fmod(a, b),
    d = (a - mod) / b, d -= 1 where mod != 0 and its sign differs from b's, q = floor(d),
    q += 1 where d - q > 0.5, and a / b where b == 0 (as IEEE division gives inf or NaN).
    """
    a, b = scalar_as_value(ctx, a), scalar_as_value(ctx, b)  # a Python scalar from eager dispatch
    if not ctx.out.dtype.is_float:
        return _int_div_mode(ctx, a, b, rounding_mode)
    if rounding_mode is None:
        x, y = a, b
        return pointwise(
            ctx, [x, y], lambda dst, s: nisa.tensor_tensor(dst, s[0], s[1], AluOp.divide)
        )
    scratch = rounding_scratch(ctx, ctx.tile_dtype(ctx.out.dtype))

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        x, y = srcs
        q = scratch(dst)
        if rounding_mode == "trunc":
            nisa.tensor_tensor(q, x, y, AluOp.divide)
            emit_trunc(scratch, dst, q)
            return
        mod, d, sign = scratch(dst), scratch(dst), scratch(dst)
        nisa.tensor_tensor(mod, x, y, AluOp.mod)
        nisa.tensor_tensor(d, x, mod, AluOp.subtract)
        nisa.tensor_tensor(d, d, y, AluOp.divide)
        nisa.activation(sign, Act.sign, mod)  # sign(mod) * b < 0: signs differ, mod != 0
        nisa.tensor_tensor(sign, sign, y, AluOp.multiply)
        nisa.scalar_tensor_tensor(d, sign, AluOp.is_lt, 0.0, AluOp.subtract, d, reverse1=True)
        _emit_floor_ceil(scratch, q, d, ceil=False)
        nisa.tensor_tensor(sign, d, q, AluOp.subtract)
        nisa.scalar_tensor_tensor(q, sign, AluOp.is_gt, 0.5, AluOp.add, q)
        nisa.tensor_tensor(d, x, y, AluOp.divide)
        nisa.tensor_scalar(sign, y, AluOp.is_equal, 0.0)
        nisa.select(dst, sign, d, q)

    return pointwise(ctx, [a, b], compute)


def _int_div_mode(ctx: LoweringContext, a: HbmValue, b: HbmValue, mode: str | None) -> HbmValue:
    """Integer a / b rounded ('trunc' or 'floor'; Mixtral's token // top_k): the fp32 quotient
    of integers below 2**24 is never rounded across an integer (|a / b - n| >= 1 / |b| exceeds
    half an ulp of n), so trunc / floor of it is exact; the conversion back is exact. A zero
    divisor gives a wrapped value where torch raises."""
    if mode is None:
        raise Unsupported(
            ctx.call.op, Reason.DTYPE, "an integer result needs rounding_mode 'trunc' or 'floor'"
        )
    scratch = rounding_scratch(ctx)

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        q = scratch(dst)
        nisa.tensor_tensor(q, srcs[0], srcs[1], AluOp.divide)
        if mode == "trunc":
            emit_trunc(scratch, dst, q)
        else:
            _emit_floor_ceil(scratch, dst, q, ceil=False)

    return pointwise(ctx, [a, b], compute, tile_dtype=HW_FP32)


def scalar_as_value(ctx: LoweringContext, operand: HbmValue | float) -> HbmValue:
    """A tensor operand, or a scalar as a one-element value read with stride 0 (broadcast to
    the output's shape; the scalar is cast to the output dtype, as torch's wrapped scalars are)."""
    if isinstance(operand, HbmValue):
        return operand
    from hwsim.bridge.lowerings.creation import fill_views

    meta: TensorMeta = ctx.out
    single = ctx.new_value((1,), meta.dtype)
    fill_views(ctx, [single], float(operand))
    return HbmValue(single.tile, meta.shape, (0,) * len(meta.shape), single.offset)


@register_lowering(aten.floor_divide.default, family="pointwise", dtypes=NUMERIC_DTYPES)
def floor_divide(ctx: LoweringContext, a: HbmValue, b: HbmValue) -> HbmValue:
    """torch.floor_divide: div(rounding_mode="floor")."""
    return div_mode(ctx, a, b, rounding_mode="floor")


# ---- pow with a tensor exponent -------------------------------------------------------------


@register_lowering(aten.pow.Tensor_Tensor, family="pointwise", dtypes=NUMERIC_DTYPES)
def pow_tensor(ctx: LoweringContext, x: HbmValue, exponent: HbmValue) -> HbmValue:
    """x ** exponent elementwise: one GpSimdE ``power``. A float result is libm pow in fp64,
    rounded once to fp32 (integer operands, such as BLOOM's ALiBi powers, are cast to fp32 by
    their loads, exactly below 2**24), so torch's rules hold: a negative base with an integral
    exponent keeps its sign rule ((-2) ** 3 = -8), with a fractional one gives NaN, 0 **
    negative is inf, x ** 0 is 1. An integer result is GpSimdE's exact int32 power by squaring
    (wrapping past int32, like every computed int64 on the device)."""

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        nisa.tensor_tensor(dst, srcs[0], srcs[1], AluOp.power, engine="gpsimd")

    return pointwise(ctx, [x, exponent], compute)
