"""The mlp pass: up-projection, activation and down-projection as one kernel (``tiling.mlp``).

After ``fusion``, a transformer's MLP is two fused nodes: the up-projection with its activation
in the epilogue (``fused[addmm+gelu]``) and the down-projection with the residual add in its
epilogue (``fused[addmm+add]``). When both read a weight prepared at compile time, the first
one's value (possibly through a reshape) is used by nothing but the second, as its left operand,
and the activation reads nothing from outside, the two become one ``MlpKernel`` node: its
members are both groups' (so the graph still computes the same), and its lowering keeps the
hidden activation h in SBUF (``tiling.mlp``). When the kernel cannot be emitted (h's row block
does not fit SBUF, a layout it does not take), the two groups lower as they would have apart,
h through HBM, and the reason is in the pipeline's fusion notes.

A gated MLP (Llama's: ``down(silu(x @ Wg) * (x @ Wu))``) fuses as ``fused[mm+silu+mul]`` whose
``mul`` reads the plain product ``mm(x, Wu)`` from outside. When that product is of the same x
and a prepared weight of the same shape, and nothing else reads it, the kernel takes it in too
(``MlpKernel.product``): its argument becomes Wu, and the kernel computes both products per
tile of hᵀ, so neither reaches HBM.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import torch
from torch import fx
from torch.utils import _pytree as pytree

from hwsim.bridge.passes.fused_kinds import group_tag, register_fused
from hwsim.bridge.passes.fused_nodes import insert_fused
from hwsim.bridge.passes.fusion import RESHAPES, FusedKernel, Inner, Member, Ref
from hwsim.bridge.passes.prepare_constants import PreparedWeight

aten = torch.ops.aten

_ANCHORS = (aten.addmm.default, aten.mm.default)


class MlpKernel(FusedKernel):
    """Target of a fused MLP node: ``up`` and ``down`` are the two groups it joins; its
    arguments are ``up``'s, then ``down``'s without the one that was ``up``'s value
    (``down_index``); ``reshape``: the shape ``up``'s value was viewed as in between."""

    def __init__(
        self,
        up: FusedKernel,
        down: FusedKernel,
        down_index: int,
        reshape: tuple[int, ...] | None,
        product: Member | None = None,
        product_index: int | None = None,
        product_view: tuple[int, ...] | None = None,
    ) -> None:
        self.up, self.down, self.down_index, self.reshape = up, down, down_index, reshape
        #: A gated MLP's second product ``mm(x, Wu)`` (its args refer to ``up``'s), which
        #: ``up``'s argument ``product_index`` was (viewed as ``product_view``, if not None);
        #: that argument is Wu in the joined node.
        self.product, self.product_index = product, product_index
        self.product_view = product_view
        self.up_arity = 1 + max(_refs(up.members), default=-1)
        super().__init__(_joined(self))
        gated = "" if product is None else "mm*"
        self.__name__ = f"fused[mlp:{gated}{up.__name__[6:-1]}|{down.__name__[6:-1]}]"

    def split(self, outside: list[Any], hidden: Any) -> tuple[list[Any], list[Any]]:
        """The arguments of ``up`` and of ``down`` (``hidden``: what stands for h in it)."""
        rest = list(outside[self.up_arity :])
        rest.insert(self.down_index, hidden)
        return list(outside[: self.up_arity]), rest


def _refs(members: list[Member]) -> list[int]:
    found: list[int] = []
    for m in members:
        leaves = pytree.tree_leaves((m.args, m.kwargs), is_leaf=lambda x: isinstance(x, Ref))
        found.extend(x.index for x in leaves if isinstance(x, Ref))
    return found


def _joined(kernel: MlpKernel) -> list[Member]:
    """``up``'s members (after its anchor, a gated MLP's second product), the reshape, then
    ``down``'s, indexed into the joined node's args."""
    members = list(kernel.up.members)
    if kernel.product is not None:
        members = _with_product(kernel, kernel.product, members)
    hidden = Inner(len(members) - 1)
    if kernel.reshape is not None:
        last = members[-1]
        view = Member(
            f"{last.name}_mlp_view",
            aten.view.default,
            (hidden, list(kernel.reshape)),
            {},
            last.val.reshape(kernel.reshape),
            (last.val, list(kernel.reshape)),
            {},
        )
        members.append(view)
        hidden = Inner(len(members) - 1)
    offset = len(members)

    def remap(ref: Any) -> Any:
        if isinstance(ref, Inner):
            return Inner(ref.index + offset)
        if ref.index == kernel.down_index:
            return hidden
        shift = 0 if ref.index < kernel.down_index else 1
        return Ref(kernel.up_arity + ref.index - shift)

    for m in kernel.down.members:
        args, kwargs = pytree.tree_map_only((Ref, Inner), remap, (m.args, m.kwargs))
        members.append(dataclasses.replace(m, args=tuple(args), kwargs=dict(kwargs)))
    return members


def _with_product(kernel: MlpKernel, product: Member, members: list[Member]) -> list[Member]:
    """``up``'s members with a gated MLP's second product (and its view) after the anchor, the
    argument it was replaced by an inner reference to it."""
    inserted = [product]
    if kernel.product_view is not None:
        shape = list(kernel.product_view)
        val = product.val.reshape(kernel.product_view)
        name = f"{product.name}_mlp_view"
        inserted.append(
            Member(name, aten.view.default, (Inner(1), shape), {}, val, (product.val, shape), {})
        )
    value = Inner(len(inserted))

    def shift(ref: Any) -> Any:
        if isinstance(ref, Inner):
            return ref if ref.index == 0 else Inner(ref.index + len(inserted))
        return value if ref.index == kernel.product_index else ref

    rest = [
        dataclasses.replace(m, args=tuple(a), kwargs=dict(k))
        for m in members[1:]
        for a, k in [pytree.tree_map_only((Ref, Inner), shift, (m.args, m.kwargs))]
    ]
    return [members[0], *inserted, *rest]


def _prepared(node: Any) -> bool:
    return isinstance(node, fx.Node) and isinstance(node.target, PreparedWeight)


def _matmul_group(node: Any) -> bool:
    """A fused group that starts with mm/addmm of a prepared weight."""
    if not (isinstance(node, fx.Node) and type(node.target) is FusedKernel):
        return False
    anchor = node.target.anchor
    if anchor is None or anchor.target not in _ANCHORS:
        return False
    weight = anchor.args[-1]
    return isinstance(weight, Ref) and _prepared(node.args[weight.index])


def _source(down: fx.Node) -> tuple[int, fx.Node, fx.Node | None] | None:
    """(index of h in ``down``'s args, the up group's node, the reshape between or None) when
    ``down``'s left operand is the value of a matmul group that nothing else reads."""
    kernel: Any = down.target
    a_ref = kernel.anchor.args[-2]
    if not isinstance(a_ref, Ref):
        return None
    hidden: Any = down.args[a_ref.index]
    reshape: fx.Node | None = None
    if isinstance(hidden, fx.Node) and hidden.target in RESHAPES and len(hidden.users) == 1:
        reshape, hidden = hidden, hidden.args[0]
    if not _matmul_group(hidden) or len(hidden.users) != 1:
        return None
    if down.args.count(reshape or hidden) != 1:
        return None
    return a_ref.index, hidden, reshape


def _second_product(up: fx.Node) -> tuple[int, fx.Node, fx.Node | None] | None:
    """(index in ``up``'s args, the node, the reshape between or None) of a gated MLP's second
    product: the one outside operand of ``up``'s epilogue that is ``mm`` of ``up``'s own x and
    a prepared weight of W1's shape (possibly through a reshape), read by nothing else."""
    kernel: Any = up.target
    anchor = kernel.anchor
    x_ref, w_ref = anchor.args[-2], anchor.args[-1]
    if anchor.target is not aten.mm.default or not isinstance(x_ref, Ref):
        return None
    epilogue = {r for r in _refs(kernel.members[1:])}
    if len(epilogue) != 1:
        return None
    (index,) = epilogue
    node = up.args[index]
    if not isinstance(node, fx.Node) or len(node.users) != 1 or up.args.count(node) != 1:
        return None
    reshape = None
    if node.target in RESHAPES:
        reshape, node = node, node.args[0]
        if not isinstance(node, fx.Node) or len(node.users) != 1:
            return None
    if node.target is not aten.mm.default or len(node.args) != 2:
        return None
    x, weight = node.args
    if x is not up.args[x_ref.index] or not _prepared(weight) or not isinstance(w_ref, Ref):
        return None
    w1 = up.args[w_ref.index]
    assert isinstance(weight, fx.Node) and isinstance(w1, fx.Node)
    if weight.meta["val"].shape != w1.meta["val"].shape:
        return None
    return index, node, reshape


def _product_member(node: fx.Node, x_index: int, w_index: int) -> Member:
    """The second product as a member over the joined node's args (x's and Wu's)."""
    args = node.args
    return Member(
        node.name,
        node.target,
        (Ref(x_index), Ref(w_index)),
        {},
        node.meta["val"],
        tuple(a.meta["val"] for a in args if isinstance(a, fx.Node)),
        {},
        node.meta.get("original_aten"),
    )


def fuse_mlps(gm: fx.GraphModule) -> dict[str, int]:
    """Join each up-projection group to the down-projection group that alone reads it (and a
    gated MLP's second product, ``_second_product``)."""
    joined = gated = 0
    for down in list(gm.graph.nodes):
        found = _source(down) if _matmul_group(down) else None
        if found is None:
            continue
        index, up, reshape = found
        shape = None if reshape is None else tuple(int(d) for d in reshape.meta["val"].shape)
        up_kernel: Any = up.target
        second = _second_product(up)
        up_args = list(up.args)
        product = product_index = view = None
        if second is not None:
            product_index, product_node, reshape_node = second
            if reshape_node is not None:
                view = tuple(int(d) for d in reshape_node.meta["val"].shape)
            up_args[product_index] = product_node.args[1]  # Wu in the product's place
            x_index = up_kernel.anchor.args[-2].index
            product = _product_member(product_node, x_index, product_index)
        kernel = MlpKernel(
            up_kernel, cast(FusedKernel, down.target), index, shape, product, product_index, view
        )
        rest = [a for i, a in enumerate(down.args) if i != index]
        insert_fused(gm, kernel, (*up_args, *rest), down, kernel.node_names)
        gm.graph.erase_node(down)
        if reshape is not None:
            gm.graph.erase_node(reshape)
        gm.graph.erase_node(up)
        if second is not None:
            if second[2] is not None:
                gm.graph.erase_node(second[2])
            gm.graph.erase_node(second[1])
            gated += 1
        joined += 1
    return {"mlps": joined, "gated": gated}


@register_fused(MlpKernel)
def lower_mlp(ctx: Any, kernel: MlpKernel, outside: list[Any], escapes: bool) -> Any:
    """The MLP as one kernel (``tiling.mlp``), or its two groups apart when it cannot be."""
    from hwsim.bridge.passes.fused_lowering import FusionFallback, lower_fused
    from hwsim.bridge.passes.mlp_lowering import emit_mlp, lower_product

    try:
        return emit_mlp(ctx, kernel, outside, escapes, group_tag(kernel))
    except FusionFallback as why:
        ctx.capture = ctx.epilogue = None
        ctx.fusion_notes.append({"group": kernel.node_names, "fused": False, "why": str(why)})
    up_args, _ = kernel.split(outside, None)
    product = None
    if kernel.product is not None:  # the second product first, as the graph had it
        product = lower_product(ctx, kernel.product, up_args)
        view = product if kernel.product_view is None else product.view(kernel.product_view)
        up_args[cast(int, kernel.product_index)] = view
    hidden = lower_fused(ctx, kernel.up, up_args, False)
    if kernel.reshape is not None:
        hidden = hidden.view(kernel.reshape)
    _, down_args = kernel.split(outside, hidden)
    if product is not None:  # release what the groups apart would after the up group
        _release_after_up(ctx, product, down_args)
    return lower_fused(ctx, kernel.down, down_args, escapes)


def _release_after_up(ctx: Any, product: Any, down_args: list[Any]) -> None:
    """After a gated MLP's up group lowered apart: free the second product (read by that group
    alone) and, as the graph's nodes apart would, every value neither the down group nor a later
    node reads (``LoweringContext.needed_after``)."""
    from hwsim.bridge.values import HbmValue

    if ctx.needed_after is None:
        ctx.release_dead(product.tile.name)
        return
    read = {leaf.tile.name for leaf in pytree.tree_leaves(down_args) if isinstance(leaf, HbmValue)}
    ctx.release_all_but(ctx.needed_after | read)
