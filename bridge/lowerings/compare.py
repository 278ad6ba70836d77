"""Comparisons, logical and bitwise ops, and ``where``: the ops that build and apply masks.

Bool values are uint8 0/1 in HBM and int32 0/1 in tiles (``bridge.dtypes``,
``registry.work_dtype``). A comparison loads its operands in their promoted torch dtype (never
the precision's compute dtype: rounding an fp32 operand to bf16 first would flip results), writes
1/0, and the store casts to uint8:

- float operands compare on VectorE (fp32, IEEE: NaN compares false except ``ne``);
- integer and bool tensor pairs compare on GpSimdE, whose int32 datapath is exact; a comparison
  with an immediate runs on VectorE in fp32, exact for integers within +-2**24.

Logical ops (``logical_*``, and ``bitwise_*`` on bool) treat any nonzero value as true; bitwise
ops on integers are VectorE bitvec ops on int32 tiles. ``where(cond, a, b)`` is VectorE
``select``, with every operand broadcast as torch does (``masked_fill`` decomposes to it; eager
mode sees it whole); select passes values through fp32, so integers are exact within +-2**24.
"""

from __future__ import annotations

from typing import Any

import torch

from hwsim import lang
from hwsim.bridge.context import LoweringContext
from hwsim.bridge.dtypes import HW_FP32, HW_INT32, HW_UINT8, INT_DTYPES, MOVABLE_DTYPES, to_hw
from hwsim.bridge.errors import BridgeError, Reason, Unsupported
from hwsim.bridge.registry import OpCall, pointwise, register_lowering, work_dtype
from hwsim.bridge.tiling.drivers import Operand
from hwsim.bridge.values import HbmValue
from hwsim.dtypes import DType
from hwsim.kernels.ops import AluOp
from hwsim.lang import isa as nisa

aten = torch.ops.aten

COMPARISONS = {
    "eq": AluOp.is_equal,
    "ne": AluOp.not_equal,
    "lt": AluOp.is_lt,
    "le": AluOp.is_le,
    "gt": AluOp.is_gt,
    "ge": AluOp.is_ge,
}
LOGICAL = {"and": AluOp.logical_and, "or": AluOp.logical_or, "xor": AluOp.logical_xor}
BITWISE = {"and": AluOp.bitwise_and, "or": AluOp.bitwise_or, "xor": AluOp.bitwise_xor}


def _operand_dtype(ctx: LoweringContext) -> DType:
    """The tile dtype operands are compared in: their promoted torch dtype (int32 for ints)."""
    promoted = torch.result_type(ctx.arg_meta(0), ctx.arg_meta(1))
    hw = to_hw(promoted) if promoted in MOVABLE_DTYPES else HW_FP32
    return hw if hw.is_float else HW_INT32


def _binary_bool(ctx: LoweringContext, a: Any, b: Any, alu: AluOp, operand: DType) -> HbmValue:
    """out = a alu b as 0/1, for a tensor and a tensor or an immediate."""
    result = HW_INT32
    if isinstance(a, HbmValue) and isinstance(b, HbmValue):
        engine = "vector" if operand.is_float else "gpsimd"

        def both(dst: Operand, srcs: list[Operand]) -> None:
            nisa.tensor_tensor(dst, srcs[0], srcs[1], alu, engine=engine)

        return pointwise(ctx, [a, b], both, tile_dtype=result, input_dtypes=[operand] * 2)
    if isinstance(a, HbmValue):
        scalar = float(b)

        def left(dst: Operand, srcs: list[Operand]) -> None:
            nisa.tensor_scalar(dst, srcs[0], alu, scalar)

        return pointwise(ctx, [a], left, tile_dtype=result, input_dtypes=[operand])
    raise BridgeError(f"{ctx.node_name}: a comparison needs a tensor as its first operand")


def register_comparison(op: Any, alu: AluOp) -> None:
    def lower(ctx: LoweringContext, a: HbmValue, b: Any) -> HbmValue:
        return _binary_bool(ctx, a, b, alu, _operand_dtype(ctx))

    lower.__qualname__ = f"compare[{alu.name}]"
    register_lowering(op, family="compare", dtypes=MOVABLE_DTYPES)(lower)


for _name, _alu in COMPARISONS.items():
    register_comparison(getattr(aten, _name).Tensor, _alu)
    register_comparison(getattr(aten, _name).Scalar, _alu)


# ---- logical and bitwise ----------------------------------------------------------------------


def _logical_operand(ctx: LoweringContext, index: int) -> DType:
    """Logical ops read any dtype; only zero / nonzero matters (fp32 keeps that)."""
    meta = ctx.arg_meta(index)
    if isinstance(meta, torch.Tensor) and meta.dtype.is_floating_point:
        return to_hw(meta.dtype)
    return HW_INT32


def register_logical(op: Any, alu: AluOp) -> None:
    def lower(ctx: LoweringContext, a: HbmValue, b: Any) -> HbmValue:
        return _binary_bool(ctx, a, b, alu, _logical_operand(ctx, 0))

    lower.__qualname__ = f"logical[{alu.name}]"
    register_lowering(op, family="compare", dtypes=MOVABLE_DTYPES)(lower)


for _name, _alu in LOGICAL.items():
    register_logical(getattr(aten, f"logical_{_name}").default, _alu)


def _bitwise_check(call: OpCall) -> None:
    dtypes = {t.dtype for t in call.input_tensors()}
    if dtypes - {torch.bool} - INT_DTYPES:
        raise Unsupported(call.op, Reason.DTYPE, f"bitwise op on {sorted(map(str, dtypes))}")


def register_bitwise(op: Any, logical: AluOp, bitwise: AluOp) -> None:
    """bool operands: the logical op (0/1 in, 0/1 out); integers: the VectorE bitvec op (a bool
    operand promoted to an integer one is its 0/1, as in torch: generation's ``unfinished &
    ~is_done``)."""

    def lower(ctx: LoweringContext, a: HbmValue, b: Any) -> HbmValue:
        if ctx.out.torch_dtype == torch.bool:
            return _binary_bool(ctx, a, b, logical, HW_INT32)
        if isinstance(b, HbmValue):

            def both(dst: Operand, srcs: list[Operand]) -> None:
                nisa.tensor_tensor(dst, srcs[0], srcs[1], bitwise)

            return pointwise(ctx, [a, b], both)
        scalar = int(b)

        def left(dst: Operand, srcs: list[Operand]) -> None:
            nisa.tensor_scalar(dst, srcs[0], bitwise, scalar)

        return pointwise(ctx, [a], left)

    lower.__qualname__ = f"bitwise[{bitwise.name}]"
    register_lowering(op, family="compare", dtypes=MOVABLE_DTYPES, check=_bitwise_check)(lower)


for _name in BITWISE:
    register_bitwise(getattr(aten, f"bitwise_{_name}").Tensor, LOGICAL[_name], BITWISE[_name])
    register_bitwise(getattr(aten, f"bitwise_{_name}").Scalar, LOGICAL[_name], BITWISE[_name])


@register_lowering(aten.logical_not.default, family="compare", dtypes=MOVABLE_DTYPES)
def logical_not(ctx: LoweringContext, x: HbmValue) -> HbmValue:
    """out = (x == 0)."""
    operand = _logical_operand(ctx, 0)

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        nisa.tensor_scalar(dst, srcs[0], AluOp.is_equal, 0.0)

    return pointwise(ctx, [x], compute, tile_dtype=HW_INT32, input_dtypes=[operand])


@register_lowering(
    aten.bitwise_not.default, family="compare", dtypes=MOVABLE_DTYPES, check=_bitwise_check
)
def bitwise_not(ctx: LoweringContext, x: HbmValue) -> HbmValue:
    """bool: logical not; integers: the bitvec not."""
    if ctx.out.torch_dtype == torch.bool:
        return logical_not(ctx, x)

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        nisa.tensor_scalar(dst, srcs[0], AluOp.bitwise_not, 0)

    return pointwise(ctx, [x], compute)


# ---- where ------------------------------------------------------------------------------------


def _where_check(call: OpCall) -> None:
    condition = call.args[0]
    if condition.dtype != torch.bool:
        raise Unsupported(call.op, Reason.DTYPE, f"condition dtype {condition.dtype}, not bool")


@register_lowering(aten.where.self, family="compare", dtypes=MOVABLE_DTYPES, check=_where_check)
def where(ctx: LoweringContext, condition: HbmValue, a: HbmValue, b: HbmValue) -> HbmValue:
    """out = a where condition else b (VectorE ``select``), all broadcast to the output."""
    tile = work_dtype(ctx, ctx.out.dtype)

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        nisa.select(dst, srcs[0], srcs[1], srcs[2])

    return pointwise(
        ctx, [condition, a, b], compute, tile_dtype=tile, input_dtypes=[HW_UINT8, tile, tile]
    )


class _Filled:
    """One SBUF tile holding a constant, sliced to each tile's shape (memset once, or again
    when a larger tile comes)."""

    def __init__(self, value: float, dtype: DType) -> None:
        self.value, self.dtype = value, dtype
        self.tile: Any = None

    def __call__(self, shape: tuple[int, ...]) -> Any:
        small = self.tile is not None and any(
            n > have for n, have in zip(shape, self.tile.shape, strict=True)
        )
        if self.tile is None or small:
            self.tile = lang.ndarray(shape, self.dtype, lang.sbuf)
            nisa.memset(self.tile, self.value)
        return self.tile[: shape[0], : shape[1]]


@register_lowering(aten.masked_fill.Scalar, family="compare", dtypes=MOVABLE_DTYPES)
def masked_fill(ctx: LoweringContext, x: HbmValue, mask: HbmValue, value: Any) -> HbmValue:
    """x with ``value`` where mask (``where(mask, value, x)``; eager mode sees it undecomposed)."""
    tile = work_dtype(ctx, ctx.out.dtype)
    fill = _Filled(float(value), tile)

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        nisa.select(dst, srcs[0], fill(tuple(dst.shape)), srcs[1])

    return pointwise(ctx, [mask, x], compute, tile_dtype=tile, input_dtypes=[HW_UINT8, tile])


@register_lowering(aten.masked_fill.Tensor, family="compare", dtypes=MOVABLE_DTYPES)
def masked_fill_tensor(ctx: LoweringContext, x: HbmValue, mask: HbmValue, value: HbmValue):
    """x with the 0-d tensor ``value`` where mask."""
    return where(ctx, mask, value, x)
