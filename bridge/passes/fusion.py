"""The fusion pass: elementwise chains, and elementwise ops after a matmul, become one node.

A **group** is a set of nodes whose intermediate values are used only inside it:

- members are elementwise nodes (lowering families ``pointwise`` and ``compare``: their
  lowerings go through ``registry.pointwise``) and reshapes (``view``) of a member's value;
- an edge inside a group joins two values of the same number of elements (a value flows into
  its single user, possibly through a reshape), so every member computes the same flat
  elements and one tile plan serves all of them; broadcast operands come from outside;
- a group may start with a matmul (``mm``/``addmm``/``bmm``) whose only user is elementwise:
  the chain then runs on each output tile as it leaves PSUM (the epilogue), before the store.

The group becomes one ``call_function`` node whose target is a ``FusedKernel`` (its members,
in order, with their arguments); the members' values never reach HBM. ``fused_lowering``
lowers it; every instruction it emits is tagged with all its source nodes
(``fused[add+gelu]/add_3+gelu_1``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.utils import _pytree as pytree

from hwsim.bridge.errors import Unsupported
from hwsim.bridge.passes.fused_nodes import graph_outputs, insert_fused
from hwsim.bridge.registry import LOWERINGS, OpCall, check_support

aten = torch.ops.aten

ELEMENTWISE_FAMILIES = frozenset({"pointwise", "compare"})
MATMULS = frozenset({aten.mm.default, aten.addmm.default, aten.bmm.default})
RESHAPES = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default})


@dataclass(frozen=True)
class Member:
    """One source node of a fused group: its name, op, arguments (``Ref(i)``: the fused node's
    argument i, an outside value; ``Inner(j)``: member j's value) and torch's metadata."""

    name: str
    target: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    val: Any
    arg_vals: tuple[Any, ...]
    kwarg_vals: dict[str, Any]
    #: The ATen op a decomposition made this node of (``original_aten``), None if none did.
    origin: Any = None


@dataclass(frozen=True)
class Ref:
    index: int  # into the fused node's args


@dataclass(frozen=True)
class Inner:
    index: int  # into FusedKernel.members


class FusedKernel:
    """Target of a fused node (module docstring); ``fused_lowering.lower_fused`` lowers it."""

    def __init__(self, members: list[Member]) -> None:
        self.members = members
        ops = [_label(m.target) for m in members if m.target not in RESHAPES]
        self.__name__ = f"fused[{'+'.join(ops)}]"  # the op label of its instructions' tags
        self.node_names = [m.name for m in members]

    @property
    def anchor(self) -> Member | None:
        """The matmul the group starts with, if any."""
        first = self.members[0]
        return first if first.target in MATMULS else None

    def __call__(self, *args: Any) -> Any:
        """Run the members with torch (what the group computes), for graph interpretation."""
        values: list[Any] = []
        for member in self.members:
            a, k = pytree.tree_map_only(
                (Ref, Inner),
                lambda r: _resolve(r, args, values),
                (
                    member.args,
                    member.kwargs,
                ),
            )
            values.append(member.target(*a, **k))
        return values[-1]

    def __repr__(self) -> str:
        return f"{self.__name__}({', '.join(self.node_names)})"


def _resolve(ref: Ref | Inner, args: tuple[Any, ...], values: list[Any]) -> Any:
    return args[ref.index] if isinstance(ref, Ref) else values[ref.index]


def _label(target: Any) -> str:
    name = getattr(target, "__name__", None) or str(target)
    return str(name).split(".")[0]


def _numel(node: Any) -> int | None:
    value = node.meta.get("val") if isinstance(node, fx.Node) else None
    return value.numel() if isinstance(value, torch.Tensor) else None


def _tensor_args(node: fx.Node) -> list[fx.Node]:
    return [a for a in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(a, fx.Node)]


def _supported(node: fx.Node) -> bool:
    meta = node.meta.get("val")
    args, kwargs = pytree.tree_map_only(
        fx.Node, lambda n: n.meta.get("val"), (node.args, node.kwargs)
    )
    try:
        check_support(OpCall(node.target, tuple(args), dict(kwargs), meta))
    except Unsupported:
        return False
    return isinstance(meta, torch.Tensor) and meta.numel() > 0


def _elementwise(node: fx.Node) -> bool:
    target: Any = node.target
    lowering = LOWERINGS.get(target)
    return (
        node.op == "call_function"
        and lowering is not None
        and lowering.family in ELEMENTWISE_FAMILIES
        and _supported(node)
    )


def _reshape_of_contiguous(node: fx.Node) -> bool:
    value, source = node.meta.get("val"), node.args[0]
    if node.target not in RESHAPES or not isinstance(source, fx.Node):
        return False
    src = source.meta.get("val")
    return (
        isinstance(value, torch.Tensor)
        and isinstance(src, torch.Tensor)
        and (src.is_contiguous() and value.is_contiguous())
    )


def _groups(graph: fx.Graph, outputs: set[fx.Node]) -> list[list[fx.Node]]:
    """Greedy groups in graph order: a node joins the groups of its single-use inputs."""
    group_of: dict[fx.Node, int] = {}
    groups: dict[int, list[fx.Node]] = {}

    def joins(user: fx.Node, numel: int | None) -> bool:
        return _numel(user) == numel and (_elementwise(user) or _reshape_of_contiguous(user))

    def absorbable(producer: fx.Node, user: fx.Node) -> bool:
        """A producer's value can stay inside a group when every user of it is elementwise
        over the same elements (they all join the group; ``_closed`` checks they did)."""
        numel = _numel(producer)
        return (
            producer in group_of
            and producer not in outputs
            and _numel(user) == numel
            and (len(producer.users) == 1 or all(joins(u, numel) for u in producer.users))
        )

    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if node.target in MATMULS and _supported(node):
            group_of[node] = len(groups)
            groups[len(groups)] = [node]
            continue
        reshape = _reshape_of_contiguous(node)
        if not (reshape or _elementwise(node)):
            continue
        inputs = _tensor_args(node)[:1] if reshape else _tensor_args(node)
        joined = sorted({group_of[a] for a in inputs if absorbable(a, node)})
        # A matmul anchor must come first: a group holding one is never merged into another.
        anchored = [g for g in joined if groups[g][0].target in MATMULS]
        if len(anchored) > 1:
            joined = [g for g in joined if g not in anchored[1:]]
        if not joined:
            if reshape:
                continue  # a reshape alone is a free view: nothing to fuse
            group_of[node] = len(groups)
            groups[len(groups)] = [node]
            continue
        target = anchored[0] if anchored else joined[0]
        for g in joined:
            if g != target:
                for member in groups.pop(g):
                    group_of[member] = target
                    groups[target].append(member)
        groups[target].append(node)
        group_of[node] = target
    order = {n: i for i, n in enumerate(graph.nodes)}
    result = []
    for members in groups.values():
        members.sort(key=order.__getitem__)
        useful = [m for m in members if m.target not in RESHAPES]
        if len(useful) < 2:  # one op alone (or a lone matmul): nothing to gain
            continue
        while members and members[-1].target in RESHAPES:  # a trailing view stays a view
            members.pop()
        if _closed(members):
            result.append(members)
    return result


def _closed(members: list[fx.Node]) -> bool:
    """Only the last member's value may be used outside the group (it is the fused node's)."""
    inside = set(members)
    return all(set(m.users) <= inside for m in members[:-1])


def member_records(
    members: list[fx.Node], first: tuple[fx.Node, ...] = ()
) -> tuple[list[Member], list[fx.Node]]:
    """The ``Member`` records of ``members`` (graph order), their arguments as ``Inner`` (a
    member's result) or ``Ref`` (the fused node's argument i), and those outside nodes in
    order; the ``first`` nodes take the first places (a kernel that finds them by index)."""
    index = {m: j for j, m in enumerate(members)}
    outside: list[fx.Node] = []

    def ref(value: Any) -> Any:
        if not isinstance(value, fx.Node):
            return value
        if value in index:
            return Inner(index[value])
        if value not in outside:
            outside.append(value)
        return Ref(outside.index(value))

    for node in first:
        ref(node)
    records = []
    for m in members:
        args, kwargs = pytree.tree_map(ref, (m.args, m.kwargs))
        arg_vals, kwarg_vals = pytree.tree_map_only(
            fx.Node, lambda n: n.meta.get("val"), (m.args, m.kwargs)
        )
        records.append(
            Member(
                m.name,
                m.target,
                tuple(args),
                dict(kwargs),
                m.meta.get("val"),
                arg_vals,
                kwarg_vals,
                m.meta.get("original_aten"),
            )
        )
    return records, outside


def _replace(
    gm: fx.GraphModule,
    members: list[fx.Node],
    kernel_of: Callable[[list[Member]], FusedKernel] | None = None,
) -> None:
    """Replace ``members`` (graph order) by one node whose target is ``kernel_of(records)``
    (a ``FusedKernel`` by default; ``passes.reduction_fusion`` makes its own kind)."""
    records, outside = member_records(members)
    last = members[-1]
    kernel = (kernel_of or FusedKernel)(records)
    insert_fused(gm, kernel, outside, last, [m.name for m in members])
    for m in reversed(members):
        gm.graph.erase_node(m)


def fuse(gm: fx.GraphModule) -> dict[str, int]:
    """Replace every group (module docstring) by one fused node."""
    groups = _groups(gm.graph, graph_outputs(gm))
    for members in groups:
        _replace(gm, members)
    epilogues = sum(1 for g in groups if g[0].target in MATMULS)
    fused_nodes = sum(len(g) for g in groups)
    return {"groups": len(groups), "matmul_epilogues": epilogues, "fused_nodes": fused_nodes}
