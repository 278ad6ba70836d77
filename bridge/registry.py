"""The lowering registry: one table from ATen overload to lowering, and family helpers.

A lowering is a function ``fn(ctx, *args, **kwargs)`` called with the node's arguments, tensors
replaced by ``HbmValue`` views (``bridge.values``), while the graph's kernel is being built; it
emits kernel-language instructions and returns the result value(s). Register one with

    @register_lowering(aten.mm.default)
    def mm(ctx, a, b): ...

or a whole family member in one line (the shared work lives in the helper, as in PyTorch
inductor's ``register_pointwise``): ``register_unary(aten.relu.default, ActivationFunction.relu)``,
``register_binary(aten.add.Tensor, AluOp.add)``. A second registration of an overload raises
``DuplicateLoweringError`` naming both.

``check_support`` decides, from metadata alone (FakeTensors, real tensors), whether a call can
be lowered; it raises ``Unsupported`` with a ``Reason``: mutation, data dependence, no lowering,
dtype, or shape (symbolic/empty tensors, and each lowering's own ``check``). The partitioner and
the eager mode ask it before lowering anything. An op torch tags as having a value-dependent
output shape (``index.Tensor``: only with a bool mask) is refused unless its lowering says
``value_dependent_checked=True``: its own ``check`` then refuses the value-dependent cases.

Dtypes: integer and bool values are computed in int32 tiles (``work_dtype``): tensor-tensor
integer ops run on GpSimdE, whose int32 datapath is exact; ops with an immediate run on VectorE's
fp32 datapath, exact while values stay within +-2**24.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import torch
from torch._ops import OpOverload
from torch.utils import _pytree as pytree

from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import FLOAT_DTYPES, HW_INT32, INT32_MAX, INT32_MIN, NUMERIC_DTYPES
from hwsim.bridge.errors import BridgeError, Reason, Unsupported, register_once
from hwsim.bridge.tiling import map_tiles
from hwsim.bridge.tiling.drivers import Operand, TileCompute
from hwsim.bridge.values import HbmValue
from hwsim.dtypes import DType
from hwsim.kernels.ops import ActivationFunction, AluOp
from hwsim.lang import isa as nisa

LoweringFn = Callable[..., Any]


@dataclass(frozen=True)
class OpCall:
    """An op application as support checks see it: tensors are anything with ``shape`` and
    ``dtype`` (FakeTensors from graph metadata, or real tensors in eager mode)."""

    op: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    out: Any = None

    def input_tensors(self) -> list[Any]:
        leaves = pytree.tree_leaves((self.args, self.kwargs))
        return [x for x in leaves if isinstance(x, torch.Tensor)]

    def output_tensors(self) -> list[Any]:
        return [x for x in pytree.tree_leaves(self.out) if isinstance(x, torch.Tensor)]


CheckFn = Callable[[OpCall], None]


@dataclass(frozen=True)
class Lowering:
    """A registered lowering: the function, its family, the dtypes it takes, an extra check."""

    op: OpOverload
    fn: LoweringFn
    family: str
    dtypes: frozenset[torch.dtype]
    check: CheckFn | None = None
    value_dependent_checked: bool = False
    reads_inputs: bool = True
    empty_ok: bool = False

    @property
    def where(self) -> str:
        return f"{self.fn.__module__}.{self.fn.__qualname__}"


#: ATen overload -> its lowering. Populated by importing ``bridge.lowerings``.
LOWERINGS: dict[OpOverload, Lowering] = {}


def register_lowering(
    *ops: OpOverload,
    family: str = "",
    dtypes: frozenset[torch.dtype] = FLOAT_DTYPES,
    check: CheckFn | None = None,
    value_dependent_checked: bool = False,
    reads_inputs: bool = True,
    empty_ok: bool = False,
) -> Callable[[LoweringFn], LoweringFn]:
    """Decorator registering ``fn`` as the lowering of each overload in ``ops``.

    value_dependent_checked: the op is tagged value-dependent by torch, and ``check`` refuses
    exactly the calls that are (module docstring).
    reads_inputs: False for lowerings that only read their tensor inputs' metadata (``new_zeros``
    takes the dtype), so an empty input tensor is no reason to refuse them.
    empty_ok: the lowering takes empty tensors in and out (a view of nothing emits nothing,
    ``cat`` skips empty pieces), so they are not refused."""

    def decorator(fn: LoweringFn) -> LoweringFn:
        for op in ops:
            if not isinstance(op, OpOverload):
                raise TypeError(
                    f"register_lowering takes ATen overloads (aten.add.Tensor), not {op!r}; "
                    "name the overload explicitly"
                )
            family_name = family or fn.__module__.rsplit(".", 1)[-1]
            lowering = Lowering(
                op, fn, family_name, dtypes, check, value_dependent_checked, reads_inputs, empty_ok
            )
            register_once(LOWERINGS, op, lowering, str(op), attrgetter("where"))
        return fn

    return decorator


def check_support(call: OpCall) -> Lowering:
    """The lowering for ``call``, or ``Unsupported`` saying why there is none."""
    from hwsim.bridge import lowerings  # noqa: F401  (the table is complete once this has run)

    op = call.op
    if not isinstance(op, OpOverload):
        raise Unsupported(op, Reason.NO_LOWERING, "not an ATen operator overload")
    mutated = [a.name for a in op._schema.arguments if a.alias_info and a.alias_info.is_write]
    if mutated:
        raise Unsupported(
            op, Reason.MUTATION, f"writes its argument(s) {', '.join(mutated)} in place"
        )
    lowering = LOWERINGS.get(op)
    dynamic = {torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output}
    if dynamic & set(op.tags) and not (lowering and lowering.value_dependent_checked):
        raise Unsupported(op, Reason.DATA_DEPENDENCE, "its output depends on tensor values")
    if lowering is None:
        siblings = sorted(str(o) for o in LOWERINGS if o.overloadpacket == op.overloadpacket)
        hint = f" (lowered overloads: {', '.join(siblings)})" if siblings else ""
        raise Unsupported(op, Reason.NO_LOWERING, f"no lowering is registered{hint}")
    outputs = call.output_tensors()
    # Empty outputs next to real ones are placeholders (eval batch norm's saved statistics).
    some_output = any(t.numel() for t in outputs if isinstance(t.numel(), int))
    for what, tensors in (("input", call.input_tensors()), ("output", outputs)):
        for t in tensors:
            empty_ok = lowering.empty_ok or (
                some_output if what == "output" else not lowering.reads_inputs
            )
            _check_tensor(op, what, t, lowering.dtypes, empty_ok=empty_ok)
    if lowering.check is not None:
        lowering.check(call)
    return lowering


def _check_tensor(
    op: OpOverload, what: str, t: Any, dtypes: frozenset[torch.dtype], *, empty_ok: bool = False
) -> None:
    if t.dtype not in dtypes:
        names = ", ".join(sorted(str(d).removeprefix("torch.") for d in dtypes))
        raise Unsupported(op, Reason.DTYPE, f"{what} dtype {t.dtype} is not one of {names}")
    if any(not isinstance(n, int) for n in t.shape):
        raise Unsupported(
            op,
            Reason.SHAPE,
            f"{what} has a symbolic shape {tuple(t.shape)}: the simulator lowers one program per "
            "shape; compile with torch.compile(..., dynamic=False)",
        )
    if t.numel() == 0 and not empty_ok:
        raise Unsupported(op, Reason.SHAPE, f"{what} is empty (shape {tuple(t.shape)})")
    if t.device.type not in ("cpu", "meta"):
        raise Unsupported(op, Reason.SHAPE, f"{what} is on device {t.device}, not the CPU")


# ---- shared work of the pointwise family ----------------------------------------------------


def work_dtype(ctx: LoweringContext, dtype: DType) -> DType:
    """The on-chip dtype values of ``dtype`` are computed in: the precision's dtype for floats,
    int32 for integers and bool (module docstring)."""
    return ctx.tile_dtype(dtype) if dtype.is_float else HW_INT32


def pointwise(
    ctx: LoweringContext,
    inputs: Sequence[HbmValue],
    compute: TileCompute,
    *,
    tile_dtype: DType | None = None,
    input_dtypes: Sequence[DType] | None = None,
) -> HbmValue:
    """Allocate the node's output, broadcast ``inputs`` to its shape, and run ``compute`` on
    every tile. The result tile is ``tile_dtype`` (default: ``work_dtype`` of the output), input
    tiles ``input_dtypes`` (default: the result tile's dtype); the DMAs cast."""
    meta: TensorMeta = ctx.out
    shapes = [v.shape for v in inputs]
    if tuple(torch.broadcast_shapes(*shapes)) != meta.shape:
        raise BridgeError(
            f"{ctx.node_name}: inputs {shapes} broadcast to "
            f"{tuple(torch.broadcast_shapes(*shapes))}, but torch says the output is {meta.shape}"
        )
    tile = tile_dtype or work_dtype(ctx, meta.dtype)
    if ctx.capture is not None:  # inside a fused group: record the step (passes.fused_lowering)
        return ctx.capture.record(ctx, inputs, compute, tile, input_dtypes)
    out = ctx.new_value(meta.shape, meta.dtype)
    expanded = [v.expand(meta.shape) for v in inputs]
    map_tiles(ctx, out, expanded, compute, tile_dtype=tile, input_dtypes=input_dtypes)
    return out


def register_unary(
    op: OpOverload, func: ActivationFunction, *, scale: float = 1.0, check: CheckFn | None = None
) -> None:
    """out = func(scale * x), elementwise on ScalarE (``activation``)."""

    def lower(ctx: LoweringContext, x: HbmValue) -> HbmValue:
        def compute(dst: Operand, srcs: list[Operand]) -> None:
            nisa.activation(dst, func, srcs[0], scale=scale)

        return pointwise(ctx, [x], compute)

    lower.__qualname__ = f"unary[{func.name}]"
    register_lowering(op, family="pointwise", check=check)(lower)


def register_alu_unary(
    op: OpOverload, alu: AluOp, operand: float, *, reverse: bool = False
) -> None:
    """out = x alu operand (or operand alu x when ``reverse``), on VectorE (``tensor_scalar``)."""

    def lower(ctx: LoweringContext, x: HbmValue) -> HbmValue:
        def compute(dst: Operand, srcs: list[Operand]) -> None:
            nisa.tensor_scalar(dst, srcs[0], alu, operand, reverse0=reverse)

        return pointwise(ctx, [x], compute)

    lower.__qualname__ = f"alu_unary[{alu.name}]"
    register_lowering(op, family="pointwise", dtypes=NUMERIC_DTYPES, check=refuse_wrapping_ints)(
        lower
    )


def register_binary(op: OpOverload, alu: AluOp, *, swap: bool = False) -> None:
    """out = a alu (alpha * b) with broadcasting; a or b may be a Python scalar (an immediate).
    Bool results (``mul`` and ``add`` of bools) are AND and OR of the 0/1 values (``BOOL_ALU``).

    swap: the op's first argument is the right operand (``rsub``: b - alpha * a).
    """

    def lower(ctx: LoweringContext, a: Any, b: Any, *, alpha: float = 1) -> HbmValue:
        left, right = (b, a) if swap else (a, b)
        op = BOOL_ALU.get(alu, alu) if ctx.out.torch_dtype == torch.bool else alu
        return _binary(ctx, left, right, op, float(alpha))

    lower.__qualname__ = f"binary[{alu.name}]"
    dtypes = NUMERIC_DTYPES | {torch.bool}  # bool inputs promote; a bool result is refused
    register_lowering(op, family="pointwise", dtypes=dtypes, check=_binary_check)(lower)


#: Arithmetic of bools, as torch computes it on 0/1 values: a product is an AND, a sum an OR.
BOOL_ALU = {AluOp.multiply: AluOp.multiply, AluOp.add: AluOp.max}


def _binary_check(call: OpCall) -> None:
    alpha = call.kwargs.get("alpha", 1)
    if isinstance(alpha, complex):
        raise Unsupported(call.op, Reason.DTYPE, "complex alpha")
    if any(t.dtype == torch.bool for t in call.output_tensors()):
        name = call.op.overloadpacket.__name__
        if name not in ("mul", "add") or alpha != 1:
            raise Unsupported(call.op, Reason.DTYPE, f"{name} with a bool result")
    check_int32_scalars(call, (*call.args, alpha))
    refuse_wrapping_ints(call)


#: Integer dtypes narrower than the int32 the device computes integers in: torch's add, sub, mul
#: and neg of them wrap modulo 2^bits, while the device's write of an int32 result into them
#: saturates (uint8 250 + 10 is 4 in torch, 255 on the device), so these ops fall back.
WRAPPING_INT_DTYPES: frozenset[torch.dtype] = frozenset({torch.int8, torch.uint8, torch.int16})


def refuse_wrapping_ints(call: OpCall) -> None:
    """Unsupported for arithmetic whose result is a narrow integer (``WRAPPING_INT_DTYPES``)."""
    outs = call.output_tensors()
    if outs and outs[0].dtype in WRAPPING_INT_DTYPES:
        bits = torch.iinfo(outs[0].dtype).bits
        raise Unsupported(
            call.op,
            Reason.DTYPE,
            f"{str(outs[0].dtype).removeprefix('torch.')} arithmetic wraps modulo 2^{bits} in "
            "torch, where the device saturates when it writes its int32 result (compute in "
            "int32 to run it on the simulator)",
        )


def check_int32_scalars(call: OpCall, values: Sequence[Any]) -> None:
    """Integer immediates of an integer op must fit the int32 the device computes in."""
    outs = call.output_tensors()
    if not outs or outs[0].dtype.is_floating_point:
        return
    for value in values:
        if isinstance(value, int) and not INT32_MIN <= value <= INT32_MAX:
            raise Unsupported(
                call.op,
                Reason.DTYPE,
                f"integer scalar {value} does not fit int32 (int64 is computed as int32)",
            )


def _binary(ctx: LoweringContext, a: Any, b: Any, alu: AluOp, alpha: float) -> HbmValue:
    """a alu (alpha * b) for tensors or one scalar (a VectorE instruction per tile)."""
    a_tensor, b_tensor = isinstance(a, HbmValue), isinstance(b, HbmValue)
    if a_tensor and b_tensor:
        meta: TensorMeta = ctx.out
        engine = "vector" if meta.dtype.is_float else "gpsimd"  # GpSimdE: exact int32

        def both(dst: Operand, srcs: list[Operand]) -> None:
            if alpha == 1.0:
                nisa.tensor_tensor(dst, srcs[0], srcs[1], alu, engine=engine)
            else:  # a alu (b * alpha): the reversed op1 puts a on the left
                nisa.scalar_tensor_tensor(
                    dst, srcs[1], AluOp.multiply, alpha, alu, srcs[0], reverse1=True
                )

        return pointwise(ctx, [a, b], both)
    if a_tensor:
        constant = float(b) * alpha

        def left(dst: Operand, srcs: list[Operand]) -> None:
            nisa.tensor_scalar(dst, srcs[0], alu, constant)

        return pointwise(ctx, [a], left)
    if b_tensor:

        def right(dst: Operand, srcs: list[Operand]) -> None:  # a alu (b * alpha)
            nisa.tensor_scalar(
                dst, srcs[0], AluOp.multiply, alpha, op1=alu, operand1=float(a), reverse1=True
            )

        return pointwise(ctx, [b], right)
    raise BridgeError(f"{ctx.node_name}: a binary op needs at least one tensor operand")
