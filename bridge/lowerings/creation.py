"""Tensor creation: ``full`` / ``full_like`` / ``scalar_tensor`` (zeros, ones, new_* decompose to
them) and ``arange`` — the leaves of mask and position building.

A constant fill is one ``memset`` of the largest tile (in the output's own dtype, so the value is
rounded once, as torch rounds it) stored to every tile of the output. ``arange`` is GpSimdE
``iota``: the affine expression ``start + step * element`` evaluated per tile in int32 (the
element index of a tile's partition p and free index i is ``offset + p * pstride + i * fstride``),
written straight to an int32 or float tile when start and step are integers, else iota of the
element index followed by one VectorE multiply-add in fp32 (torch computes in double: the result
may differ by one fp32 ulp). int64 results are int32 on the device: values must fit int32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from hwsim import lang
from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import (
    HW_FP32,
    HW_INT32,
    MOVABLE_DTYPES,
    Int64RangeError,
    check_int32,
    int64_on_device,
)
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.registry import OpCall, register_lowering
from hwsim.bridge.tiling import plan
from hwsim.bridge.values import HbmValue
from hwsim.kernels.ops import AluOp
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing

aten = torch.ops.aten


def creation(*ops: Any, check: Any = None):
    """Register a creation op: it reads only its tensor inputs' dtype, so they may be empty."""
    return register_lowering(
        *ops, family="creation", dtypes=MOVABLE_DTYPES, check=check, reads_inputs=False
    )


def fill_scalar(call: OpCall, value: Any) -> float:
    """The value a fill writes, as the device holds it (bool 0/1, int range-checked)."""
    dtype = call.output_tensors()[0].dtype
    if isinstance(value, complex):
        raise Unsupported(call.op, Reason.DTYPE, f"complex fill value {value}")
    if dtype == torch.bool:
        return 1.0 if value else 0.0
    if not dtype.is_floating_point:
        what = f"fill value of a {dtype} tensor"
        check = int64_on_device if dtype == torch.int64 else check_int32
        try:
            return float(check(int(value), what))
        except Int64RangeError as error:
            raise Unsupported(call.op, Reason.DTYPE, str(error)) from None
    return float(value)


def _value_check(position: int):
    def check(call: OpCall) -> None:
        fill_scalar(call, call.args[position] if len(call.args) > position else 0)

    return check


def fill(ctx: LoweringContext, value: float) -> HbmValue:
    """The node's output, every element ``value``: one memset, stored tile by tile."""
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    fill_views(ctx, [out], value)
    return out


def fill_views(ctx: LoweringContext, views: Sequence[HbmValue], value: float) -> None:
    """Write ``value`` to every element of ``views`` (strided views of tensors of one dtype):
    one memset of a constant tile as large as the largest tile, stored to every tile."""
    plans = [
        plan(
            v.shape,
            [(v.offset, v.strides)],
            pmax=ctx.pmax,
            free_budget=ctx.free_budget(1, v.dtype.itemsize),
        )
        for v in views
        if v.numel
    ]
    if not plans:
        return
    tiles = [t for p in plans for t in p]
    partitions = max(t.partitions for t in tiles)
    free = max(t.free_elements for t in tiles)
    constant = lang.ndarray((partitions, free), views[0].dtype, lang.sbuf)
    nisa.memset(constant, value)
    for view, tiles_of_view in zip([v for v in views if v.numel], plans, strict=True):
        for tile in tiles_of_view:
            ctx.queues.store(tile.ap(0, view), constant[: tile.partitions, : tile.free_elements])


@creation(aten.full.default, check=_value_check(1))
def full(ctx: LoweringContext, size: Any, fill_value: Any, **_: Any) -> HbmValue:
    return fill(ctx, fill_scalar(ctx.call, fill_value))


@creation(aten.full_like.default, check=_value_check(1))
def full_like(ctx: LoweringContext, x: HbmValue, fill_value: Any, **_: Any) -> HbmValue:
    return fill(ctx, fill_scalar(ctx.call, fill_value))


@creation(aten.new_full.default, check=_value_check(2))
def new_full(ctx: LoweringContext, x: HbmValue, size: Any, fill_value: Any, **_: Any):
    return fill(ctx, fill_scalar(ctx.call, fill_value))


def _constant_fill(op: Any, value: float) -> None:
    """zeros / ones and their _like / new_ forms (core ATen decomposes them to full; eager
    offload sees them as they are)."""

    def lower(ctx: LoweringContext, *args: Any, **_: Any) -> HbmValue:
        return fill(ctx, fill_scalar(ctx.call, value))

    lower.__qualname__ = f"fill[{value:g}]"
    creation(op)(lower)


for _value, _ops in (
    (0, ("zeros", "zeros_like", "new_zeros")),
    (1, ("ones", "ones_like", "new_ones")),
):
    for _name in _ops:
        _constant_fill(getattr(aten, _name).default, _value)


@creation(aten.scalar_tensor.default, check=_value_check(0))
def scalar_tensor(ctx: LoweringContext, value: Any, **_: Any) -> HbmValue:
    return fill(ctx, fill_scalar(ctx.call, value))


# ---- arange -----------------------------------------------------------------------------------


def _arange_args(call: OpCall) -> tuple[Any, Any, Any]:
    """(start, end, step) of any arange overload."""
    args = call.args
    if call.op == aten.arange.default:
        return 0, args[0], 1
    step = args[2] if len(args) > 2 else call.kwargs.get("step", 1)
    return args[0], args[1], step


def _arange_check(call: OpCall) -> None:
    start, end, step = _arange_args(call)
    dtype = call.output_tensors()[0].dtype
    if dtype == torch.bool:
        raise Unsupported(call.op, Reason.DTYPE, "arange of bool")
    integral = all(float(v).is_integer() for v in (start, step))
    check = int64_on_device if dtype == torch.int64 else check_int32  # ``bridge.dtypes``
    try:
        check(int(start), "arange start")
        check(int(end), "arange end")
        if integral:
            count = math.prod(call.output_tensors()[0].shape)
            check(int(start) + int(step) * count, "arange's element index times step")
    except Int64RangeError as error:
        raise Unsupported(call.op, Reason.DTYPE, str(error)) from None
    if not dtype.is_floating_point and not integral:
        raise Unsupported(call.op, Reason.SHAPE, f"integer arange with start {start} step {step}")


@creation(aten.arange.start_step, aten.arange.start, aten.arange.default, check=_arange_check)
def arange(ctx: LoweringContext, *args: Any, **_: Any) -> HbmValue:
    """out[i] = start + i * step (see module docstring)."""
    meta: TensorMeta = ctx.out
    start, _end, step = _arange_args(ctx.call)
    integral = float(start).is_integer() and float(step).is_integer()
    out = ctx.new_value(meta.shape, meta.dtype)
    tiles = plan(
        meta.shape,
        [(out.offset, out.strides)],
        pmax=ctx.pmax,
        free_budget=ctx.free_budget(2, 4),
    )
    indices, results = BufferRing(ctx.options.buffers), BufferRing(ctx.options.buffers)
    tile_dtype = meta.dtype if meta.dtype.is_float else HW_INT32
    for tile in tiles:
        shape = (tile.partitions, tile.free_elements)
        (free_stride,) = tile.free_strides[0]  # arange is 1-D: one free dim
        at, pstride = tile.offsets[0], tile.partition_strides[0]
        dst = results(shape, tile_dtype if integral else HW_FP32, lang.sbuf)
        if integral:
            s0, s1 = int(start), int(step)
            nisa.iota(
                dst, offset=s0 + s1 * at, channel_multiplier=s1 * pstride, steps=(s1 * free_stride,)
            )
        else:
            index = indices(shape, HW_INT32, lang.sbuf)
            nisa.iota(index, offset=at, channel_multiplier=pstride, steps=(free_stride,))
            nisa.tensor_scalar(
                dst, index, AluOp.multiply, float(step), op1=AluOp.add, operand1=float(start)
            )
        ctx.queues.store(tile.ap(0, out), dst)
    return out
