"""Lowering a fused node (``passes.fusion``): the members' tile computes, one pass over SBUF.

Every elementwise lowering builds its tiles through ``registry.pointwise`` (inputs, a per-tile
``compute``, tile dtypes). While a fused node lowers, ``LoweringContext.capture`` is set and
``pointwise`` records that call as a ``Step`` instead of emitting it, returning a *virtual*
value (a name with no HBM bytes). The group is then emitted once:

- **elementwise group:** one tile plan over the result; per tile, each outside operand is
  loaded once, the steps run in order on SBUF tiles (a step's result tile is the next step's
  input), and only the last is stored;
- **matmul epilogue:** the matmul lowers as usual with ``LoweringContext.epilogue`` set; each
  [M, N] tile it evacuates from PSUM runs the steps (outside operands loaded per block) before
  its one store (``tiling.matmul``).

Anything the emitter cannot express (an outside operand whose broadcast view has no strided
form over the result, a lowering that does not go through ``pointwise`` once) lowers the
members one by one instead, as the graph would have without the pass; the reason is kept in
``LoweringContext.fusion_notes`` (the pipeline's report).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch.utils import _pytree as pytree

from hwsim import lang
from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.errors import BridgeError
from hwsim.bridge.passes.fused_kinds import group_tag, register_fused
from hwsim.bridge.passes.fusion import RESHAPES, FusedKernel, Inner, Member, Ref
from hwsim.bridge.registry import LOWERINGS, OpCall
from hwsim.bridge.tiling.broadcast import OperandLoader
from hwsim.bridge.tiling.drivers import Operand, TileCompute
from hwsim.bridge.tiling.estimate import tile_cost
from hwsim.bridge.tiling.matmul import HbmMatrix
from hwsim.bridge.tiling.space import plan
from hwsim.bridge.values import HbmValue, contiguous_strides
from hwsim.dtypes import DType
from hwsim.isa.origin import Origin
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing

#: Buffers per ring of a matmul epilogue's extra tiles: the matmul's own rings already fill most
#: of SBUF (``tiling.matmul``), and two keep the next block's loads ahead of this block's steps.
EPILOGUE_BUFFERS = 2


class FusionFallback(BridgeError):
    """The group cannot be emitted fused (the message says why); its members lower one by one."""


class VirtualTile:
    """Stands for a member's value inside a group: a name and a dtype, no bytes anywhere."""

    _ids = itertools.count()

    def __init__(self, shape: tuple[int, ...], dtype: DType) -> None:
        self.name = f"~fused{next(self._ids)}"
        self.shape = (max(1, math.prod(shape)),)
        self.dtype = dtype


def virtual_value(shape: tuple[int, ...], dtype: DType) -> HbmValue:
    """A contiguous value over a new ``VirtualTile`` (it stands where an HBM tile would)."""
    tile: Any = VirtualTile(shape, dtype)
    return HbmValue.contiguous(tile, shape)


@dataclass
class Step:
    """One recorded ``pointwise`` call: what it reads, how it computes, what it produces."""

    name: str
    inputs: list[HbmValue]
    compute: TileCompute
    tile_dtype: DType
    input_dtypes: list[DType]
    out: HbmValue


@dataclass
class Capture:
    """What ``registry.pointwise`` records while a fused node lowers."""

    steps: list[Step] = field(default_factory=list)

    def record(
        self,
        ctx: LoweringContext,
        inputs: Sequence[HbmValue],
        compute: TileCompute,
        tile_dtype: DType,
        input_dtypes: Sequence[DType] | None,
    ) -> HbmValue:
        meta: TensorMeta = ctx.out
        out = virtual_value(meta.shape, meta.dtype)
        expanded = [v.expand(meta.shape) for v in inputs]
        dtypes = list(input_dtypes or [tile_dtype] * len(inputs))
        self.steps.append(Step(ctx.node_name, expanded, compute, tile_dtype, dtypes, out))
        return out


def _virtual(value: HbmValue) -> bool:
    return isinstance(value.tile, VirtualTile)


def _meta(value: Any) -> Any:
    from hwsim.bridge.graph_builder import node_meta as graph_meta

    return graph_meta(value)


def _resolve(member: Member, outside: list[Any], values: list[Any]) -> tuple[Any, Any]:
    def one(ref: Any) -> Any:
        return outside[ref.index] if isinstance(ref, Ref) else values[ref.index]

    args, kwargs = pytree.tree_map_only((Ref, Inner), one, (member.args, member.kwargs))
    return args, kwargs


def _call(member: Member) -> OpCall:
    return OpCall(member.target, tuple(member.arg_vals), dict(member.kwarg_vals), member.val)


@register_fused(FusedKernel)
def lower_fused(
    ctx: LoweringContext, kernel: FusedKernel, outside: list[Any], escapes: bool
) -> HbmValue:
    """Lower the group (module docstring); its instructions carry every member in their tag."""
    tag = group_tag(kernel)
    try:
        return _lower_group(ctx, kernel, outside, escapes, tag)
    except FusionFallback as why:
        ctx.capture = ctx.epilogue = None
        ctx.fusion_notes.append({"group": kernel.node_names, "fused": False, "why": str(why)})
        return _lower_one_by_one(ctx, kernel, outside, escapes)


def _lower_one_by_one(
    ctx: LoweringContext, kernel: FusedKernel, outside: list[Any], escapes: bool
) -> HbmValue:
    values: list[Any] = []
    for j, member in enumerate(kernel.members):
        args, kwargs = _resolve(member, outside, values)
        last = j == len(kernel.members) - 1
        with ctx.node(member.name, _meta(member.val), _call(member), escapes=escapes and last):
            values.append(LOWERINGS[member.target].fn(ctx, *args, **kwargs))
    return values[-1]


def _capture_members(
    ctx: LoweringContext, members: list[Member], outside: list[Any], values: list[Any], tag: Origin
) -> list[Step]:
    capture = Capture()
    ctx.capture = capture
    try:
        for member in members:
            args, kwargs = _resolve(member, outside, values)
            if member.target in RESHAPES:
                viewed = args[0].view(tuple(member.val.shape))
                if viewed is None:
                    raise FusionFallback(f"{member.name}: reshape of a non-viewable layout")
                values.append(viewed)
                continue
            before = len(capture.steps)
            with ctx.node(member.name, _meta(member.val), _call(member), tag=tag):
                result = LOWERINGS[member.target].fn(ctx, *args, **kwargs)
            made = capture.steps[before:]
            if len(made) != 1 or made[0].out is not result:
                raise FusionFallback(
                    f"{member.name}: its lowering made {len(made)} pointwise calls, not one"
                )
            values.append(result)
    finally:
        ctx.capture = None
    return capture.steps


def _lower_group(
    ctx: LoweringContext, kernel: FusedKernel, outside: list[Any], escapes: bool, tag: Origin
) -> HbmValue:
    members = kernel.members
    anchor = kernel.anchor
    last = members[-1]
    shape = tuple(last.val.shape)
    values: list[Any] = []
    if anchor is not None:
        anchor_meta = _meta(anchor.val)
        if anchor_meta.dtype != _meta(last.val).dtype:
            raise FusionFallback(f"{anchor.name}: the epilogue changes the dtype")
        values.append(virtual_value(anchor_meta.shape, anchor_meta.dtype))
        steps = _capture_members(ctx, members[1:], outside, values, tag)
        # Outside operands are viewed over the result's own shape when its matrix dims are the
        # matmul's (a [B, H, S, S] mask over bmm's [B*H, S, S] has no view over the latter).
        over = shape if shape[-2:] == anchor_meta.shape[-2:] else anchor_meta.shape
        program = _StepProgram(steps, values[0], over, EPILOGUE_BUFFERS)
        ctx.epilogue = program.epilogue(ctx)
        try:
            args, kwargs = _resolve(anchor, outside, values)
            with ctx.node(anchor.name, anchor_meta, _call(anchor), escapes=escapes, tag=tag):
                result = LOWERINGS[anchor.target].fn(ctx, *args, **kwargs)
        finally:
            ctx.epilogue = None
        viewed = result.view(shape)
        assert viewed is not None  # a fresh contiguous value reshapes
        ctx.fusion_notes.append({"group": kernel.node_names, "fused": True, "epilogue": True})
        return viewed
    steps = _capture_members(ctx, members, outside, values, tag)
    program = _StepProgram(steps, None, shape, ctx.options.buffers)
    meta = _meta(last.val)
    with ctx.node(last.name, meta, _call(last), escapes=escapes, tag=tag):
        out = ctx.new_value(shape, meta.dtype)
        program.emit_map(ctx, out)
    ctx.fusion_notes.append({"group": kernel.node_names, "fused": True, "epilogue": False})
    return out


class _StepProgram:
    """The captured steps over one result shape: outside operands as views of that shape."""

    def __init__(
        self, steps: list[Step], anchor: HbmValue | None, shape: tuple[int, ...], buffers: int
    ) -> None:
        if not steps:
            raise FusionFallback("no elementwise step to fuse")
        self.steps = steps
        self.shape = shape
        self.buffers = buffers
        self.anchor = anchor
        numel = math.prod(shape)
        self.outside: list[HbmValue] = []  # distinct outside operands, viewed over ``shape``
        self.sources: list[
            list[tuple[str, Any]]
        ] = []  # per step input: ('tile', tile) | ('out', i)
        for step in steps:
            wired: list[tuple[str, Any]] = []
            for value in step.inputs:
                if _virtual(value):
                    if value.numel != numel or value.strides != contiguous_strides(value.shape):
                        raise FusionFallback(f"{step.name}: an inner value is broadcast")
                    wired.append(("tile", value.tile))
                    continue
                viewed = value.view(shape)
                if viewed is None:
                    raise FusionFallback(
                        f"{step.name}: an operand has no strided view over {shape}"
                    )
                key = (viewed.tile.name, viewed.strides, viewed.offset)
                known = [(o.tile.name, o.strides, o.offset) for o in self.outside]
                if key not in known:
                    self.outside.append(viewed)
                    known.append(key)
                wired.append(("out", known.index(key)))
            self.sources.append(wired)

    def _run(
        self,
        tile_shape: tuple[int, ...],
        load: Callable[[int, DType], Operand],
        first: Operand | None,
        rings: list[BufferRing],
        casts: BufferRing,
        largest: tuple[int, int],
        given: dict[int, Operand] | None = None,
    ) -> Operand:
        """The steps on one tile; ``given``: tiles of other virtual values, by id of their
        ``VirtualTile`` (a gated MLP's second product)."""
        produced: dict[int, Operand] = dict(given or {})
        if self.anchor is not None and first is not None:
            produced[id(self.anchor.tile)] = first
        loaded: dict[tuple[int, str], Operand] = {}
        result: Operand | None = None
        for s, (step, wired) in enumerate(zip(self.steps, self.sources, strict=True)):
            srcs: list[Operand] = []
            for (kind, ref), want in zip(wired, step.input_dtypes, strict=True):
                if kind == "out":
                    key = (ref, want.name)
                    if key not in loaded:
                        loaded[key] = load(ref, want)
                    srcs.append(loaded[key])
                    continue
                tile = produced[id(ref)]
                if tile.dtype != want:  # an inner value in another dtype: one cast on chip
                    cast = casts(tile_shape, want, lang.sbuf, max_shape=largest)
                    nisa.tensor_copy(cast, tile)
                    tile = cast
                srcs.append(tile)
            dst = rings[s](tile_shape, step.tile_dtype, lang.sbuf, max_shape=largest)
            step.compute(dst, srcs)
            produced[id(step.out.tile)] = dst
            result = dst
        assert result is not None
        return result

    def emit_map(self, ctx: LoweringContext, out: HbmValue) -> None:
        """One tile plan over the result: load outside operands, run the steps, store."""
        operands = [out, *self.outside]
        itemsize = max(4, *(s.tile_dtype.itemsize for s in self.steps))
        budget = ctx.free_budget(1 + len(self.outside) + 2 * len(self.steps), itemsize)
        tiles = plan(
            self.shape,
            [(v.offset, v.strides) for v in operands],
            pmax=ctx.partitions_for(self.outside),
            free_budget=budget,
            cost=tile_cost(operands, [v.dtype for v in operands], computes=len(self.steps)),
        )
        largest = (max(t.partitions for t in tiles), max(t.free_elements for t in tiles))
        loads = [OperandLoader(ctx, self.buffers, written=out.name) for _ in self.outside]
        rings = [BufferRing(self.buffers) for _ in self.steps[:-1]]
        rings.append(ctx.queues.result_ring(self.buffers))  # the last step's tiles are stored
        casts = BufferRing(self.buffers)
        for tile in ctx.split.mine(tiles):  # at LNC > 1: this core's block of tiles
            tile_shape = (tile.partitions, tile.free_elements)

            def load(i: int, dtype: DType, tile: Any = tile, tile_shape: Any = tile_shape) -> Any:
                return loads[i](tile.ap(i + 1, self.outside[i]), dtype, tile_shape, largest)

            final = self._run(tile_shape, load, None, rings, casts, largest)
            ctx.queues.store(tile.ap(0, out), final)

    def epilogue(self, ctx: LoweringContext) -> Callable[..., Operand]:
        """The hook ``tiling.matmul`` calls on each evacuated [mt, nt] block of ``out``."""
        assert self.anchor is not None
        loads: list[OperandLoader] = []  # made at the first block: they know its output then
        rings = [BufferRing(self.buffers) for _ in self.steps[:-1]]
        rings.append(ctx.queues.result_ring(self.buffers))  # the last step's tiles are stored
        casts = BufferRing(self.buffers)
        batch = tuple(self.shape[:-2])
        rows, cols = self.shape[-2:]
        outside_3d = list(self.outside)  # views over ``shape``, whose matrices are the matmul's

        def apply(result: Operand, out: HbmValue, m0: int, mt: int, n0: int, nt: int) -> Operand:
            index = _unravel(out.offset // max(1, rows * cols), batch)
            tile_shape = (mt, nt)
            largest = (ctx.pmax, max(nt, ctx.limits.tile_n))

            if not loads:
                loads.extend(
                    OperandLoader(ctx, self.buffers, written=out.name) for _ in self.outside
                )

            def load(i: int, dtype: DType) -> Operand:
                view = outside_3d[i]
                assert view is not None
                for d in index:
                    view = view.select(0, d)
                block = HbmMatrix(view).block(m0, mt, n0, nt)
                return loads[i](block, dtype, tile_shape, largest)

            return self._run(tile_shape, load, result, rings, casts, largest)

        return apply


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    index = []
    for n in reversed(shape):
        index.append(flat % n)
        flat //= n
    return tuple(reversed(index))
