"""Graph rewrites before lowering: dead code, common subexpressions, view chains, constants.

All of them keep torch's semantics exactly (no reassociation): CSE merges only nodes applying
the same deterministic op to the same arguments; view cancellation only removes views whose
composition is the identity or collapses consecutive reshapes; constant folding computes, with
torch on the CPU at compile time, nodes whose inputs are all known then (no placeholder in
their ancestry), which is what the traced mask functions (``arange``/``le``/``where`` chains of
a fixed sequence length) are. A folded value becomes a tensor constant of the graph module
(``get_attr``), an HBM input filled on every run (``graph_lowering``).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.utils import _pytree as pytree

from hwsim.bridge.dtypes import MOVABLE_DTYPES, int64_representable

aten = torch.ops.aten

#: Folded constants larger than this (elements) stay computed on the device: a constant is an
#: HBM input read by DMA, and a huge one would cost more bytes than the device work it saves.
FOLD_MAX_ELEMENTS = 1 << 20

_RESHAPES = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}
_PERMUTES = {aten.permute.default}
_TRANSPOSES = {aten.transpose.int, aten.t.default}


def _pure(node: fx.Node) -> bool:
    """A call whose value depends on its arguments only (no mutation, no randomness)."""
    target = node.target
    if node.op != "call_function":
        return False
    if target is operator.getitem:
        return True
    if not isinstance(target, torch._ops.OpOverload):
        return False
    schema = target._schema
    if schema.is_mutable or any(a.alias_info and a.alias_info.is_write for a in schema.arguments):
        return False
    return torch.Tag.nondeterministic_seeded not in target.tags


def dead_code(gm: fx.GraphModule) -> dict[str, int]:
    """Remove pure nodes whose value nobody uses (repeatedly, so whole dead chains go)."""
    removed = 0
    for node in reversed(list(gm.graph.nodes)):
        if not node.users and _pure(node):
            gm.graph.erase_node(node)
            removed += 1
    return {"removed": removed}


def _key(node: fx.Node) -> Any:
    def freeze(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, tuple(freeze(v) for v in value))
        if isinstance(value, dict):
            return tuple(sorted((k, freeze(v)) for k, v in value.items()))
        if isinstance(value, (fx.Node, int, float, bool, str, type(None), torch.dtype)):
            return (type(value).__name__, value)
        if isinstance(value, (torch.device, torch.layout, torch.memory_format)):
            return (type(value).__name__, str(value))
        raise TypeError(type(value).__name__)  # unhashable argument: no CSE for this node

    return (node.target, freeze(node.args), freeze(node.kwargs))


def common_subexpressions(gm: fx.GraphModule) -> dict[str, int]:
    """Replace a pure node by an earlier one with the same op and arguments. A node that reads
    no value of the graph (``scalar_tensor``, ``full``: a constant made on the device) is left
    alone: making it again where it is used costs next to nothing, while one shared copy ties
    far-apart consumers to one producer and keeps its value alive between them (measured: BERT
    one layer, 0.4% slower with its two ``scalar_tensor(0.0)`` merged)."""
    seen: dict[Any, fx.Node] = {}
    merged = 0
    for node in list(gm.graph.nodes):
        if not _pure(node) or not node.all_input_nodes:
            continue
        try:
            key = _key(node)
        except TypeError:
            continue
        earlier = seen.get(key)
        if earlier is None:
            seen[key] = node
            continue
        node.replace_all_uses_with(earlier)
        gm.graph.erase_node(node)
        merged += 1
    return {"merged": merged}


def _shape(node: Any) -> tuple[int, ...] | None:
    value = node.meta.get("val") if isinstance(node, fx.Node) else None
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def _same_layout(a: fx.Node, b: fx.Node) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val")
    return (
        isinstance(va, torch.Tensor)
        and isinstance(vb, torch.Tensor)
        and tuple(va.shape) == tuple(vb.shape)
        and tuple(va.stride()) == tuple(vb.stride())
        and va.dtype == vb.dtype
    )


def _permutation(node: fx.Node) -> list[int] | None:
    """The dims a permute/transpose applies (None: not one)."""
    source = node.args[0]
    shape = _shape(source)
    if shape is None:
        return None
    rank = len(shape)
    args: Any = node.args
    if node.target in _PERMUTES:
        return [int(d) % rank for d in args[1]]
    if node.target in _TRANSPOSES:
        if node.target is aten.t.default:
            d0, d1 = 0, rank - 1
        else:
            d0, d1 = int(args[1]) % rank, int(args[2]) % rank
        dims = list(range(rank))
        dims[d0], dims[d1] = dims[d1], dims[d0]
        return dims
    return None


def cancel_views(gm: fx.GraphModule) -> dict[str, int]:
    """Views that undo each other or do nothing: permute∘permute = identity (or one permute),
    reshape∘reshape = one reshape, a view (or a clone) to the same layout = its source."""
    identities = collapsed = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        source = node.args[0] if node.args else None
        if not isinstance(source, fx.Node):
            continue
        is_view = node.target in _RESHAPES | _PERMUTES | _TRANSPOSES | {aten.expand.default}
        if node.target is aten.clone.default and _same_layout(node, source):
            if source.op == "placeholder" and any(u.op == "output" for u in node.users):
                continue  # an output must not become the caller's own input tensor
            # A copy to the layout it had (eval dropout): in a functional graph nothing can
            # tell it from its source, and without it the ops on either side can fuse.
            node.replace_all_uses_with(source)
            gm.graph.erase_node(node)
            identities += 1
            continue
        if not is_view:
            continue
        if _same_layout(node, source):  # a no-op view (reshape to its own shape, expand as is)
            node.replace_all_uses_with(source)
            gm.graph.erase_node(node)
            identities += 1
            continue
        if node.target in _RESHAPES and source.target in _RESHAPES:
            node.args = (source.args[0], *node.args[1:])  # one reshape from the first source
            collapsed += 1
        elif node.target in _PERMUTES | _TRANSPOSES and source.target in _PERMUTES | _TRANSPOSES:
            outer, inner = _permutation(node), _permutation(source)
            if outer is None or inner is None:
                continue
            dims = [inner[d] for d in outer]
            with gm.graph.inserting_before(node):
                replacement = gm.graph.call_function(aten.permute.default, (source.args[0], dims))
            replacement.meta = dict(node.meta)
            node.replace_all_uses_with(replacement)
            gm.graph.erase_node(node)
            collapsed += 1
            if dims == sorted(dims) and _same_layout(replacement, source.args[0]):  # type: ignore[arg-type]
                replacement.replace_all_uses_with(source.args[0])  # type: ignore[arg-type]
                gm.graph.erase_node(replacement)
                identities += 1
    dead = dead_code(gm)["removed"]
    return {"identities": identities, "collapsed": collapsed, "removed": dead}


# ---- constant folding ---------------------------------------------------------------------------


def _foldable(node: fx.Node, known: set[fx.Node]) -> bool:
    if not _pure(node) or node.target is operator.getitem:
        return False
    inputs = [a for a in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(a, fx.Node)]
    if not all(a in known for a in inputs):
        return False
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and value.numel() <= FOLD_MAX_ELEMENTS


def fold_constants(gm: fx.GraphModule) -> dict[str, int]:
    """Compute at compile time every node that reads no graph input (module docstring); the
    values that non-folded nodes (or outputs) use become ``get_attr`` constants."""
    with unset_fake_temporarily():  # real values, even inside dynamo's fake tracing
        return _fold(gm)


def _fold(gm: fx.GraphModule) -> dict[str, int]:
    known: set[fx.Node] = set()
    values: dict[fx.Node, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr" and isinstance(_attr(gm, node), torch.Tensor):
            known.add(node)
            values[node] = _attr(gm, node)
        elif node.op == "call_function" and _foldable(node, known):
            known.add(node)
    computed = [n for n in gm.graph.nodes if n in known and n.op == "call_function"]
    try:
        for node in computed:  # in graph order
            args, kwargs = pytree.tree_map_only(
                fx.Node, lambda n: values[n], (node.args, node.kwargs)
            )
            target: Any = node.target
            values[node] = target(*args, **kwargs)
    except Exception:  # e.g. a factory for another device: leave the graph as it is
        return {"folded": 0, "constants": 0}
    if any(isinstance(v, FakeTensor) for v in values.values()):
        return {"folded": 0, "constants": 0}  # a fake constant has no values to fold
    # A lone source (an arange nothing folded reads) stays a device op: one iota is cheaper
    # than a DMA of its values; a chain of folded work is what a constant saves.
    frontier = [
        n
        for n in computed
        if any(u not in known for u in n.users)
        and any(isinstance(a, fx.Node) for a in pytree.tree_leaves((n.args, n.kwargs)))
        and _representable(values[n])
    ]
    for i, node in enumerate(sorted(frontier, key=lambda n: n.name)):
        constant = values[node]
        want = node.meta["val"]
        if tuple(constant.stride()) != tuple(want.stride()):
            constant = torch.empty_strided(want.shape, want.stride(), dtype=want.dtype).copy_(
                constant
            )
        attr = f"_hwsim_folded_{i}"
        while hasattr(gm, attr):
            attr += "_"
        gm.register_buffer(attr, constant.detach().clone(), persistent=False)
        with gm.graph.inserting_before(node):
            constant_node = gm.graph.get_attr(attr)
        constant_node.meta = dict(node.meta)
        constant_node.meta["val"] = getattr(gm, attr)
        node.replace_all_uses_with(constant_node)
    removed = dead_code(gm)["removed"]
    return {"folded": removed, "constants": len(frontier)}


def _representable(value: Any) -> bool:
    """Whether a folded value can be a device input as is: a movable dtype, and int64 values
    the device holds (else the device ops stay, and refuse the value as they would unfolded)."""
    if not isinstance(value, torch.Tensor) or value.dtype not in MOVABLE_DTYPES:
        return False
    if value.dtype == torch.int64 and value.numel():
        return bool(int64_representable(value).all())
    return True


def _attr(gm: fx.GraphModule, node: fx.Node) -> Any:
    value: Any = gm
    for part in str(node.target).split("."):
        value = getattr(value, part, None)
    return value
