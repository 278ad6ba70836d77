"""Lowering an ``MlpKernel`` node (``passes.mlp_fusion``) as one kernel (``tiling.mlp``).

The up group's anchor gives x, W1 and b1, its other members the activation (captured as
``fused_lowering`` captures an epilogue: steps on SBUF tiles, no outside operand allowed, since
the kernel's tiles are [F, tokens], transposed from the graph's [tokens, F]); the down group's
anchor gives W2 and b2, its members the epilogue ``tiling.matmul`` applies to each output tile.
Anything the kernel does not take raises ``FusionFallback`` before an instruction is emitted.
"""

from __future__ import annotations

from typing import Any

from hwsim.bridge.context import LoweringContext
from hwsim.bridge.passes.fused_lowering import (
    EPILOGUE_BUFFERS,
    FusionFallback,
    _call,
    _capture_members,
    _meta,
    _resolve,
    _StepProgram,
    virtual_value,
)
from hwsim.bridge.passes.fusion import FusedKernel
from hwsim.bridge.passes.mlp_fusion import MlpKernel
from hwsim.bridge.registry import LOWERINGS
from hwsim.bridge.tiling.matmul import stationary_kept
from hwsim.bridge.tiling.mlp import MlpDoesNotFit, MlpTiler, plan_rows, working_bytes
from hwsim.bridge.values import HbmValue, PreparedMatrix
from hwsim.isa.origin import Origin
from hwsim.library.common import BufferRing


def _anchor_operands(member: Any, outside: list[Any]) -> tuple[Any, Any, Any]:
    """(bias or None, a, b) of an mm/addmm member whose alpha and beta are 1."""
    args, kwargs = _resolve(member, outside, [])
    if len(args) == 2:
        return None, args[0], args[1]
    if float(kwargs.get("alpha", 1)) != 1.0 or float(kwargs.get("beta", 1)) != 1.0:
        raise FusionFallback(f"{member.name}: addmm with alpha or beta other than 1")
    return args[0], args[1], args[2]


def _steps(
    ctx: LoweringContext, group: FusedKernel, outside: list[Any], tag: Origin
) -> tuple[_StepProgram, Any]:
    """The group's members after its anchor as a step program over the anchor's value."""
    anchor = group.anchor
    assert anchor is not None
    meta = _meta(anchor.val)
    if meta.dtype != _meta(group.members[-1].val).dtype:
        raise FusionFallback(f"{anchor.name}: the epilogue changes the dtype")
    values: list[Any] = [virtual_value(meta.shape, meta.dtype)]
    steps = _capture_members(ctx, group.members[1:], outside, values, tag)
    shape = tuple(group.members[-1].val.shape)
    over = shape if shape[-2:] == meta.shape[-2:] else meta.shape
    return _StepProgram(steps, values[0], over, EPILOGUE_BUFFERS), meta


def _operands(
    ctx: LoweringContext, kernel: MlpKernel, up_args: list[Any], down_args: list[Any]
) -> tuple[Any, HbmValue, PreparedMatrix, Any, PreparedMatrix, Any]:
    """(b1 over the up-projection's output or None, x, W1, b2, W2, the up anchor's metadata),
    or FusionFallback when the kernel does not take them."""
    bias1, x, w1 = _anchor_operands(kernel.up.anchor, up_args)
    bias2, _, w2 = _anchor_operands(kernel.down.anchor, down_args)
    if not (isinstance(w1, PreparedMatrix) and isinstance(w2, PreparedMatrix)):
        raise FusionFallback("a weight is not prepared at compile time")
    if not isinstance(x, HbmValue) or x.ndim != 2:
        raise FusionFallback("the input is not a 2-D value")
    assert kernel.up.anchor is not None and w1.layout is not None  # the pass's match
    up_meta = _meta(kernel.up.anchor.val)
    compute = ctx.matmul_dtype(up_meta.dtype)
    if w1.dtype != compute or w2.dtype != compute:
        raise FusionFallback(f"weights in {w1.dtype.name}/{w2.dtype.name}, compute {compute.name}")
    if w1.layout.block % ctx.limits.tile_k and len(w1.layout.blocks()) > 1:
        raise FusionFallback(f"W1's blocks of {w1.layout.block} columns split F tiles")
    m, f = x.shape[0], w1.shape[1]
    if stationary_kept(ctx.limits, m, f, compute.itemsize):
        raise FusionFallback(
            f"hᵀ of all {m} rows fits the down-projection's stationary share of SBUF: apart, "
            "it is read once and may stay resident, with the wider tiles of the plain matmuls"
        )
    b1 = None if bias1 is None else bias1.expand(up_meta.shape)
    if b1 is not None and b1.strides[0] != 0:
        raise FusionFallback(f"b1 is not one row for every output row: strides {b1.strides}")
    return b1, x, w1, bias2, w2, up_meta


def lower_product(ctx: LoweringContext, product: Any, up_args: list[Any]) -> HbmValue:
    """A gated MLP's second product lowered on its own (the kernel's fallback), as the graph's
    node was before the pass took it in."""
    args, kwargs = _resolve(product, up_args, [])
    with ctx.node(product.name, _meta(product.val), _call(product)):
        value: HbmValue = LOWERINGS[product.target].fn(ctx, *args, **kwargs)
    return value


def _gated_product(
    ctx: LoweringContext, kernel: MlpKernel, up_args: list[Any], x: Any, w1: PreparedMatrix
) -> tuple[PreparedMatrix | None, Any]:
    """(Wu, the value standing for x @ Wu in the activation) of a gated MLP, (None, None) of
    another; FusionFallback when the kernel does not take its operands."""
    if kernel.product is None:
        return None, None
    index = kernel.product_index
    assert index is not None
    args, _ = _resolve(kernel.product, up_args, [])
    wu = args[1]
    if args[0] is not x or not isinstance(wu, PreparedMatrix) or wu.layout is None:
        raise FusionFallback("the second product is not of x and a prepared weight")
    assert w1.layout is not None  # the pass's match
    if (wu.dtype, wu.shape, wu.layout.block) != (w1.dtype, w1.shape, w1.layout.block):
        raise FusionFallback("the two up-projections' weights differ in dtype, shape or blocks")
    stream = ctx.weights
    assert stream is not None
    run = max(layout.tiles * min(layout.block, layout.n) for layout in (w1.layout, wu.layout))
    if stream.ring_bytes // w1.dtype.itemsize < 3 * run:  # two blocks held at once, unwrapped
        raise FusionFallback("the weight ring holds fewer than three blocks")
    meta = _meta(kernel.product.val)
    shape = meta.shape if kernel.product_view is None else kernel.product_view
    return wu, virtual_value(shape, meta.dtype)


def emit_mlp(
    ctx: LoweringContext, kernel: MlpKernel, outside: list[Any], escapes: bool, tag: Origin
) -> HbmValue:
    """The MLP kernel into a new value; FusionFallback (nothing emitted) if it cannot be."""
    up_args, down_args = kernel.split(outside, None)
    b1, x, w1, bias2, w2, up_meta = _operands(ctx, kernel, up_args, down_args)
    compute = w1.dtype
    wu, product = _gated_product(ctx, kernel, up_args, x, w1)
    if product is not None and kernel.product_index is not None:
        up_args[kernel.product_index] = product
    activation, _ = _steps(ctx, kernel.up, up_args, tag)
    if activation.outside:
        raise FusionFallback("the activation reads an operand from outside the MLP")
    epilogue, down_meta = _steps(ctx, kernel.down, down_args, tag)
    # Rings: the evacuation (and a gated MLP's second), each step of both programs, the
    # epilogue's outside operands, and each program's casts (``_StepProgram``).
    evacuations = 1 if wu is None else 2
    ring_count = (
        evacuations + len(activation.steps) + len(epilogue.steps) + len(epilogue.outside) + 2
    )
    (m, k), f, n = x.shape, w1.shape[1], w2.shape[1]
    try:
        working = working_bytes(ctx, k, n, f, ring_count)
        plan = plan_rows(ctx, m, k, f, compute.itemsize, working)
    except MlpDoesNotFit as why:
        raise FusionFallback(str(why)) from why
    hidden_dtype = ctx.tile_dtype(up_meta.dtype)
    rings = [BufferRing(EPILOGUE_BUFFERS) for _ in activation.steps]
    casts = BufferRing(EPILOGUE_BUFFERS)

    def activate(first: Any, second: Any, shape: tuple[int, int]) -> Any:
        largest = (ctx.pmax, max(shape[1], ctx.limits.tile_n))
        given = None if product is None else {id(product.tile): second}
        return activation._run(shape, _no_outside, first, rings, casts, largest, given)

    down_anchor = kernel.down.anchor
    assert down_anchor is not None
    ctx.epilogue = epilogue.epilogue(ctx)
    try:
        with ctx.node(down_anchor.name, down_meta, _call(down_anchor), escapes=escapes, tag=tag):
            out = ctx.new_value(down_meta.shape, down_meta.dtype)
            tiler = MlpTiler(ctx, compute)
            b2 = None if bias2 is None else bias2.expand(down_meta.shape)
            tiler.emit_mlp(x, w1, b1, activate, hidden_dtype, w2, b2, out, plan, wu)
    finally:
        ctx.epilogue = None
    note: dict[str, Any] = {
        "group": kernel.node_names,
        "fused": True,
        "mlp_row_groups": len(plan.groups),
    }
    if wu is not None:
        note["gated"] = True
    ctx.fusion_notes.append(note)
    viewed = out.view(tuple(kernel.down.members[-1].val.shape))
    assert viewed is not None  # a fresh contiguous value reshapes
    return viewed


def _no_outside(index: int, dtype: Any) -> Any:
    raise AssertionError("the MLP's activation has no outside operand (checked before)")
