"""``_c10d_functional`` collectives (what DTensor and compiled distributed code put in graphs)
as the simulator's ``collective`` instructions on the rank's collective engine.

A node names its process group (by name, or the group object itself); the group must be a
``"hwsim"`` group (``bridge.distributed``): its cores and this rank's place in it become the
instruction's ``group`` and ``rank``, so the program is this rank's. The run meets the other
ranks through the group's fabric (``bridge.distributed.graph_fabric``); values are exact (the
instruction's ``combine``: reductions in fp32 in rank order, as the eager backend does) and the
collective is timed by the cost model's collective rule, on its own engine: compute that does
not read its result overlaps it. ``wait_tensor`` is the result itself (the instruction's
semaphores make its readers wait).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from hwsim.bridge.context import LoweringContext
from hwsim.bridge.dtypes import MOVABLE_DTYPES
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.lowerings.views import materialize
from hwsim.bridge.registry import OpCall, register_lowering
from hwsim.bridge.tiling.drivers import Operand, map_tiles
from hwsim.bridge.values import HbmValue
from hwsim.dtypes import FP32
from hwsim.kernels import AluOp
from hwsim.lang import isa as nisa

c10d = torch.ops._c10d_functional

#: torch's reduce-op names -> the collective's reduction (``avg`` is a sum, then a division;
#: ``product`` has none: the collective engines reduce with add, max and min).
_REDUCE_OPS = {"sum": AluOp.add, "max": AluOp.max, "min": AluOp.min}
#: The dtypes ``avg`` is lowered for: their exact fp32 sum, divided once, rounded once.
_AVG_DTYPES = {torch.float32, torch.bfloat16, torch.float16}


def hwsim_group(group: Any) -> Any:
    """The ``HwsimProcessGroup`` a node names (its name, or the group object, real or fake);
    Unsupported for any other group."""
    from hwsim.bridge.distributed.process_group import HwsimProcessGroup

    found = getattr(group, "real_obj", group)  # a FakeScriptObject holds the real group
    if isinstance(found, str):
        from torch.distributed.distributed_c10d import _resolve_process_group

        try:
            found = _resolve_process_group(found)  # type: ignore[arg-type]  # a GroupName is a str
        except Exception as error:  # an unknown name: say which
            raise Unsupported(
                "collective", Reason.SHAPE, f"process group '{group}' not found: {error}"
            ) from error
    if not isinstance(found, HwsimProcessGroup) and hasattr(found, "_get_backend"):
        with contextlib.suppress(Exception):  # a group without a CPU backend: refused below
            found = found._get_backend(torch.device("cpu"))
    if not isinstance(found, HwsimProcessGroup):
        raise Unsupported(
            "collective", Reason.SHAPE,
            f"its process group is {type(found).__name__}, not a 'hwsim' group: only ranks "
            "of dist.init_process_group('hwsim') run collectives on simulated cores",
        )  # fmt: skip
    return found


def _check(call: OpCall) -> None:
    group = call.args[-1]
    hwsim_group(group)
    op = call.args[1] if call.args[1:2] and isinstance(call.args[1], str) else None
    if op == "avg":
        dtypes = {t.dtype for t in call.output_tensors()}
        if not dtypes <= _AVG_DTYPES:
            raise Unsupported(
                call.op, Reason.DTYPE,
                f"reduce op 'avg' of {sorted(map(str, dtypes))}: lowered for float32, bfloat16 "
                "and float16 (the average of integers is not an integer)",
            )  # fmt: skip
    elif op is not None and op not in _REDUCE_OPS:
        raise Unsupported(
            call.op, Reason.SHAPE,
            f"reduce op '{op}': the collective engines reduce with add, max and min (sum, avg, "
            "max and min are lowered)",
        )  # fmt: skip


def _whole(ctx: LoweringContext, x: HbmValue) -> HbmValue:
    """``x`` as a whole dense tensor of its own (a collective moves tensors, not views)."""
    if x.is_contiguous() and x.span() == (0, x.numel) and tuple(x.tile.shape) == (x.numel,):
        return x
    return materialize(ctx, x)


def _collective(
    ctx: LoweringContext,
    kind: str,
    x: HbmValue,
    out_shape: tuple[int, ...],
    group_name: Any,
    op: str = "sum",
    *,
    root: int = 0,
    out_dtype: Any = None,
) -> HbmValue:
    """``x``'s collective of ``kind``; its result in ``out_dtype`` (default ``x``'s: the
    message is ``x``'s bytes either way)."""
    if op == "avg":
        return _averaged(ctx, kind, x, out_shape, group_name)
    group = hwsim_group(group_name)
    src = _whole(ctx, x)
    out = ctx.new_value(out_shape, out_dtype or x.dtype)
    ctx.collective_groups.append(group.group_name)  # the run meets the group's ranks by it
    nisa.collective(
        kind, out.tile, src.tile, group=group.cores, rank=group._rank,
        op=_REDUCE_OPS[op], cores_per_rank=group.clock.cores_per_rank, root=root,
    )  # fmt: skip
    return out


@register_lowering(c10d.all_reduce.default, family="collectives", check=_check)
def all_reduce(ctx: LoweringContext, x: HbmValue, op: str, group: Any) -> HbmValue:
    return _collective(ctx, "all_reduce", x, x.shape, group, op)


@register_lowering(c10d.all_reduce_coalesced.default, family="collectives", check=_check)
def all_reduce_coalesced(
    ctx: LoweringContext, xs: list[HbmValue], op: str, group: Any
) -> list[HbmValue]:
    return [all_reduce(ctx, x, op, group) for x in xs]


def _averaged(
    ctx: LoweringContext, kind: str, x: HbmValue, out_shape: tuple[int, ...], group: Any
) -> HbmValue:
    """``avg`` as the eager backend computes it: the exact fp32 sum (a bf16 or fp16 input's
    sum is written in fp32; its message is still the input's bytes), divided by the group's
    size on VectorE in fp32 (one correctly rounded division, not a multiply by 1/n), rounded
    once to the result's dtype as the store writes it."""
    summed = _collective(ctx, kind, x, out_shape, group, out_dtype=FP32)
    size = float(hwsim_group(group).size())

    def divide(dst: Operand, srcs: list[Operand]) -> None:
        nisa.tensor_scalar(dst, srcs[0], AluOp.divide, size)

    out = ctx.new_value(out_shape, x.dtype)
    map_tiles(ctx, out, [summed], divide, tile_dtype=FP32, input_dtypes=[FP32])
    return out


def _gathered(x: HbmValue, n: int) -> tuple[int, ...]:
    return (x.shape[0] * n, *x.shape[1:]) if x.shape else (n,)


@register_lowering(
    c10d.all_gather_into_tensor.default, family="collectives", dtypes=MOVABLE_DTYPES,
    check=_check,
)  # fmt: skip
def all_gather_into_tensor(ctx: LoweringContext, x: HbmValue, n: int, group: Any) -> HbmValue:
    return _collective(ctx, "all_gather", x, _gathered(x, n), group)


@register_lowering(
    c10d.all_gather_into_tensor_coalesced.default, family="collectives",
    dtypes=MOVABLE_DTYPES, check=_check,
)  # fmt: skip
def all_gather_into_tensor_coalesced(
    ctx: LoweringContext, xs: list[HbmValue], n: int, group: Any
) -> list[HbmValue]:
    return [_collective(ctx, "all_gather", x, _gathered(x, n), group) for x in xs]


def _scattered(x: HbmValue, n: int) -> tuple[int, ...]:
    if not x.shape or x.shape[0] % n:
        raise Unsupported(
            "reduce_scatter_tensor", Reason.SHAPE,
            f"input shape {x.shape}: dim 0 must split into {n} equal chunks",
        )  # fmt: skip
    return (x.shape[0] // n, *x.shape[1:])


@register_lowering(c10d.reduce_scatter_tensor.default, family="collectives", check=_check)
def reduce_scatter_tensor(
    ctx: LoweringContext, x: HbmValue, op: str, n: int, group: Any
) -> HbmValue:
    return _collective(ctx, "reduce_scatter", x, _scattered(x, n), group, op)


@register_lowering(c10d.reduce_scatter_tensor_coalesced.default, family="collectives", check=_check)
def reduce_scatter_tensor_coalesced(
    ctx: LoweringContext, xs: list[HbmValue], op: str, n: int, group: Any
) -> list[HbmValue]:
    return [_collective(ctx, "reduce_scatter", x, _scattered(x, n), group, op) for x in xs]


def _check_even(call: OpCall) -> None:
    _check(call)
    _, out_splits, in_splits, _ = call.args
    for splits in (out_splits, in_splits):
        if splits and len(set(splits)) > 1:
            raise Unsupported(call.op, Reason.SHAPE, f"uneven splits {list(splits)}")


@register_lowering(
    c10d.all_to_all_single.default, family="collectives", dtypes=MOVABLE_DTYPES,
    check=_check_even,
)  # fmt: skip
def all_to_all_single(
    ctx: LoweringContext, x: HbmValue, out_splits: Any, in_splits: Any, group: Any
) -> HbmValue:
    return _collective(ctx, "all_to_all", x, x.shape, group)


@register_lowering(
    c10d.broadcast.default, family="collectives", dtypes=MOVABLE_DTYPES, check=_check
)
def broadcast(ctx: LoweringContext, x: HbmValue, src: int, group: Any) -> HbmValue:
    """Rank ``src`` of the group (its index in the group, as the process group's root is)."""
    return _collective(ctx, "broadcast", x, x.shape, group, root=src)


def groups_as_names(gm: Any, example_inputs: list[Any]) -> list[int] | None:
    """Rewrite ``gm`` (in place) so that process groups it takes as inputs (some traces pass
    the group object, not its name) are named in its nodes instead, and drop the opaque
    objects it takes but never uses (DTensor graphs take their device meshes); the positions
    of the inputs it keeps, or None when it takes none of these."""
    from torch._library.fake_class_registry import FakeScriptObject
    from torch.distributed import ProcessGroup

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    groups: dict[Any, Any] = {}
    for node, example in zip(placeholders, example_inputs, strict=True):
        real = getattr(example, "real_obj", example)
        if isinstance(real, ProcessGroup):
            groups[node] = real
        elif isinstance(example, FakeScriptObject) and not node.users:
            groups[node] = None
    if not groups:
        return None
    for node, group in groups.items():
        name = group.group_name if group is not None else None
        for user in list(node.users):
            user.args = tuple(name if a is node else a for a in user.args)
            user.kwargs = {k: name if v is node else v for k, v in user.kwargs.items()}
        gm.graph.erase_node(node)
    gm.recompile()
    return [i for i, node in enumerate(placeholders) if node not in groups]


def collective_placement(gm: Any) -> tuple[Any, ...]:
    """(group name, cores, rank, cores per rank) of each collective node of ``gm``: a lowered
    program is one rank's, so its cache key holds them (empty for a graph without any)."""
    found = []
    for node in gm.graph.nodes:
        target = node.target
        if getattr(target, "namespace", "") != "_c10d_functional" or node.op != "call_function":
            continue
        if target is c10d.wait_tensor.default:
            continue
        group_arg = node.args[-1]
        group = hwsim_group(group_arg.meta.get("val") if hasattr(group_arg, "meta") else group_arg)
        found.append((group.group_name, group.cores, group._rank, group.clock.cores_per_rank))
    return tuple(found)


@register_lowering(c10d.wait_tensor.default, family="collectives", dtypes=MOVABLE_DTYPES)
def wait_tensor(ctx: LoweringContext, x: HbmValue) -> HbmValue:
    return x
