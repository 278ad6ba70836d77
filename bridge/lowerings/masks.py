"""Mask builders generation and attention use in eager mode: ``tril`` / ``triu`` (GpSimdE
``affine_select``) and ``isin`` (stopping criteria: is a token one of the end-of-sequence ids).

- **tril / triu** keep x where an affine function of the element's coordinates is >= 0,
  k + row - col for ``tril``, col - row - k for ``triu``, and write 0 elsewhere: one GpSimdE
  ``affine_select`` per tile, the coordinates evaluated by the instruction itself (how NKI
  kernels build causal masks), with the tile's window of the affine function given as a
  virtual operand of the tile plan. Values pass through fp32 (integers exact within 2**24).
- **isin** compares every element with each of the T test elements, broadcast from HBM by
  stride-0 loads, and ORs the hits: 2 instructions per test element and tile (GpSimdE for
  integers, exact in int32; VectorE for floats), in groups of ``ISIN_GROUP`` test elements
  whose flags are ORed through HBM. O(N x T): meant for the handful of ids a stopping
  criterion holds (torch sorts for large test sets).
"""

from __future__ import annotations

import torch

from hwsim import lang
from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import HW_INT32, MOVABLE_DTYPES, NUMERIC_DTYPES, to_hw
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.lowerings.views import materialize
from hwsim.bridge.registry import OpCall, register_lowering, work_dtype
from hwsim.bridge.tiling import map_tiles
from hwsim.bridge.tiling.drivers import Operand
from hwsim.bridge.tiling.space import plan
from hwsim.bridge.values import HbmValue
from hwsim.kernels.ops import AluOp
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing

aten = torch.ops.aten

#: Test elements compared in one pass over the elements (each is one operand of the pass).
ISIN_GROUP = 8


def _triangle(ctx: LoweringContext, x: HbmValue, offset: int, row: int, col: int) -> HbmValue:
    """out = x where offset + row * i + col * j >= 0 (i, j the last two coordinates), else 0."""
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    weights = (0,) * (x.ndim - 2) + (row, col)
    tiles = plan(
        x.shape,
        [(out.offset, out.strides), (x.offset, x.strides), (offset, weights)],
        pmax=ctx.pmax,
        free_budget=ctx.free_budget(2, 4),
    )
    tile_dtype = work_dtype(ctx, meta.dtype)
    loads, results = BufferRing(ctx.options.buffers), BufferRing(ctx.options.buffers)
    for tile in tiles:
        shape = (tile.partitions, *tile.free_sizes)
        slot = loads(shape, tile_dtype, lang.sbuf)
        src = ctx.queues.load_resident(slot, tile.ap(1, x))
        dst = results(shape, tile_dtype, lang.sbuf)
        nisa.affine_select(
            dst,
            src,
            0.0,
            AluOp.is_ge,
            offset=tile.offsets[2],
            channel_multiplier=tile.partition_strides[2] if tile.partitions > 1 else 0,
            steps=tuple(tile.free_strides[2]),
        )
        ctx.queues.store(tile.ap(0, out), dst)
    return out


@register_lowering(aten.tril.default, family="masks", dtypes=MOVABLE_DTYPES)
def tril(ctx: LoweringContext, x: HbmValue, diagonal: int = 0) -> HbmValue:
    """x[..., i, j] where j - i <= diagonal, else 0."""
    return _triangle(ctx, x, diagonal, 1, -1)


@register_lowering(aten.triu.default, family="masks", dtypes=MOVABLE_DTYPES)
def triu(ctx: LoweringContext, x: HbmValue, diagonal: int = 0) -> HbmValue:
    """x[..., i, j] where j - i >= diagonal, else 0."""
    return _triangle(ctx, x, -diagonal, -1, 1)


def _isin_check(call: OpCall) -> None:
    for t in call.input_tensors():
        if t.dtype not in NUMERIC_DTYPES:
            raise Unsupported(call.op, Reason.DTYPE, f"isin of {t.dtype} (numbers only)")


@register_lowering(
    aten.isin.Tensor_Tensor, family="masks", dtypes=MOVABLE_DTYPES, check=_isin_check
)
def isin(
    ctx: LoweringContext,
    elements: HbmValue,
    test_elements: HbmValue,
    *,
    assume_unique: bool = False,
    invert: bool = False,
) -> HbmValue:
    """elements in test_elements (or not, ``invert``), elementwise; see the module docstring."""
    count = test_elements.numel
    flat = test_elements.view((count,))
    if flat is None:
        flat = materialize(ctx, test_elements).view((count,))
    assert flat is not None
    found: HbmValue | None = None
    for g0 in range(0, count, ISIN_GROUP):
        tests = [flat.select(0, j) for j in range(g0, min(count, g0 + ISIN_GROUP))]
        last = g0 + ISIN_GROUP >= count
        found = _isin_pass(ctx, elements, tests, found, invert=invert and last)
    assert found is not None  # test_elements is not empty (check_support refuses that)
    return found


def _isin_pass(
    ctx: LoweringContext,
    elements: HbmValue,
    tests: list[HbmValue],
    found: HbmValue | None,
    *,
    invert: bool,
) -> HbmValue:
    """found | (elements == t for t in tests), one pass; then negated if ``invert``."""
    meta: TensorMeta = ctx.out
    promoted = torch.result_type(ctx.arg_meta(0), ctx.arg_meta(1))
    operand = to_hw(promoted) if promoted.is_floating_point else HW_INT32
    engine = "vector" if operand.is_float else "gpsimd"
    previous = [] if found is None else [found]
    hits = BufferRing(2)

    def compute(dst: Operand, srcs: list[Operand]) -> None:
        flags, (x, *broadcast) = srcs[: len(previous)], srcs[len(previous) :]
        for j, t in enumerate(broadcast):
            if j == 0 and not flags:
                nisa.tensor_tensor(dst, x, t, AluOp.is_equal, engine=engine)
                continue
            hit = hits(tuple(dst.shape), HW_INT32, lang.sbuf)
            nisa.tensor_tensor(hit, x, t, AluOp.is_equal, engine=engine)
            nisa.tensor_tensor(dst, flags[0] if j == 0 else dst, hit, AluOp.max, engine="gpsimd")
        if invert:
            nisa.tensor_scalar(dst, dst, AluOp.is_equal, 0.0)

    result = ctx.new_value(meta.shape, meta.dtype)
    map_tiles(
        ctx,
        result,
        [*previous, elements.expand(meta.shape), *(t.expand(meta.shape) for t in tests)],
        compute,
        tile_dtype=HW_INT32,
        input_dtypes=[HW_INT32] * len(previous) + [operand] * (1 + len(tests)),
    )
    return result
