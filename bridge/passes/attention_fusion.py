"""The attention pass: q kᵀ, scale, mask, softmax and · v become one fused node.

Core ATen graphs carry attention decomposed (``bridge.decompositions.sdpa_flash_cpu`` for
``scaled_dot_product_attention``, ``_softmax``'s decomposition for the eager form):

    bmm(q, kᵀ) [-> view] [-> mul/div by a positive scalar] [-> add mask | where(mask, ·, -inf)]
      -> softmax over the last dim -> [view] -> bmm(·, v)
      [-> view [-> permute(0, 2, 1, 3) -> clone]]

with the softmax in one of two forms:

- **plain**: ``_softmax`` itself, or its decomposition amax, sub, exp, sum, div;
- **safe** (the sdpa decomposition): amax, where(amax == -inf, 0, amax), sub, exp, sum,
  log-sum-exp = where(sum > 0, log(sum) + max, 0), exp(x - logsumexp); a row masked entirely
  gives probabilities 0.

q, kᵀ and v may arrive through ``clone`` + ``view`` of a 4-D [B, H, ., .] view (the head
split of the QKV projection): the clone and view join the group and the kernel reads the view
itself, so the copies disappear too. The matched nodes become one ``call_function`` node whose
target is a ``FusedAttention`` (a ``FusedKernel``: its members run with torch for graph
interpretation, and lower one by one if the kernel cannot take them);
``lowerings.flash_attention`` lowers it as one flash-attention kernel whose scores never reach
HBM.

A group is formed only when every intermediate value is used inside it alone: a training
graph that keeps the probabilities or the log-sum-exp for the backward pass is left as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypeGuard

import torch
from torch import fx

from hwsim.bridge.passes.fused_nodes import graph_outputs, insert_fused
from hwsim.bridge.passes.fusion import RESHAPES, FusedKernel, Member, member_records
from hwsim.bridge.passes.rewrites import _pure

aten = torch.ops.aten
NEG_INF = float("-inf")
#: Largest head dim (contraction of q kᵀ, one PE-array pass) and free size of · v.
MAX_HEAD_DIM = 128
FLOATS = (torch.float32, torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class AttentionPlan:
    """What the kernel needs, as indices into the fused node's arguments."""

    q: int  # [B, H, L, D] or [BH, L, D]
    kt: int  # [B, H, D, S] or [BH, D, S]
    v: int  # [B, H, S, Dv] or [BH, S, Dv]
    mask: int | None  # broadcast to the scores' shape
    mask_kind: str  # 'add' (additive), 'keep' (where(m, x, -inf)), 'drop' (where(m, -inf, x))
    batch: int
    heads: int
    scale: float
    out_layout: str  # 'bhld' (the bmm's [BH, L, Dv] or its [B, H, L, Dv] view) or 'blhd'
    safe: bool  # the safe softmax form: a row masked entirely gives 0


class FusedAttention(FusedKernel):
    """Target of a fused attention node (module docstring)."""

    def __init__(self, members: list[Member], plan: AttentionPlan) -> None:
        super().__init__(members)
        self.plan = plan
        self.__name__ = "fused[attention]"


def _call(node: Any, *targets: Any) -> TypeGuard[fx.Node]:
    return isinstance(node, fx.Node) and node.op == "call_function" and node.target in targets


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, fx.Node) else None


#: The graph's dead nodes while ``fuse_attention`` runs (``_dead_nodes``).
_DEAD: set[fx.Node] = set()


def _only_user(node: fx.Node) -> fx.Node | None:
    """The one user of ``node`` whose value is used (dead users do not count)."""
    live = [u for u in node.users if u not in _DEAD]
    return live[0] if len(live) == 1 else None


def _is_scalar(arg: Any, value: float) -> bool:
    """A Python number or a ``scalar_tensor`` node equal to ``value``."""
    if _call(arg, aten.scalar_tensor.default):
        arg = arg.args[0]
    return isinstance(arg, (int, float)) and not isinstance(arg, bool) and float(arg) == value


def _last_dim(dims: Any, ndim: int) -> bool:
    return isinstance(dims, (list, tuple)) and len(dims) == 1 and dims[0] in (-1, ndim - 1)


def _row_reduce(node: Any, target: Any, src: fx.Node) -> bool:
    """``target(src, [-1], keepdim=True)``."""
    if not _call(node, target) or node.args[0] is not src:
        return False
    keep = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    return _last_dim(node.args[1], _val(src).ndim) and bool(keep) and not node.kwargs.get("dtype")


def _users(node: fx.Node, pred: Any) -> list[fx.Node]:
    return [u for u in node.users if pred(u)]


def _softmax(x: fx.Node, region: list[fx.Node]) -> tuple[fx.Node, bool] | None:
    """The probabilities node of a softmax of ``x`` over its last dim and whether it is the
    safe form; its nodes are appended to ``region``."""
    whole = [u for u in x.users if _call(u, aten._softmax.default) and u.args[0] is x]
    last_dim = bool(whole) and _last_dim([whole[0].args[1]], _val(x).ndim)
    if last_dim and len(x.users) == 1 and not whole[0].args[2]:  # no half-to-float change
        region.append(whole[0])
        return whole[0], False
    maxes = _users(x, lambda u: _row_reduce(u, aten.amax.default, x))
    if len(maxes) != 1:
        return None
    row_max = shift = maxes[0]
    region.append(row_max)
    eqs = _users(row_max, lambda u: _call(u, aten.eq.Scalar) and _is_scalar(u.args[1], NEG_INF))
    if eqs:  # shift = where(max == -inf, 0, max)
        wheres = _users(eqs[0], lambda u: _call(u, aten.where.self))
        if len(wheres) != 1:
            return None
        shift = wheres[0]
        if shift.args[0] is not eqs[0] or not _is_scalar(shift.args[1], 0.0):
            return None
        if shift.args[2] is not row_max:
            return None
        region += [eqs[0], shift]
    subs = _users(shift, lambda u: _call(u, aten.sub.Tensor) and u.args[:2] == (x, shift))
    if len(subs) != 1 or not _call(_only_user(subs[0]), aten.exp.default):
        return None
    exp = _only_user(subs[0])
    assert exp is not None
    sums = _users(exp, lambda u: _row_reduce(u, aten.sum.dim_IntList, exp))
    if len(sums) != 1:
        return None
    total = sums[0]
    region += [subs[0], exp, total]
    divs = _users(exp, lambda u: _call(u, aten.div.Tensor) and u.args[:2] == (exp, total))
    if divs and shift is row_max:  # plain: exp / sum
        region.append(divs[0])
        return divs[0], False
    if shift is row_max:
        return None
    return _safe_tail(x, shift, total, region)


def _safe_tail(
    x: fx.Node, shift: fx.Node, total: fx.Node, region: list[fx.Node]
) -> tuple[fx.Node, bool] | None:
    """lse = where(sum > 0, log(sum) + shift, 0) [squeeze/unsqueeze], probs = exp(x - lse)."""
    gts = _users(total, lambda u: _call(u, aten.gt.Scalar) and _is_scalar(u.args[1], 0.0))
    logs = _users(total, lambda u: _call(u, aten.log.default))
    if len(gts) != 1 or len(logs) != 1:
        return None
    adds = _users(
        logs[0], lambda u: _call(u, aten.add.Tensor) and set(u.args[:2]) == {logs[0], shift}
    )
    if len(adds) != 1 or len(adds[0].args) > 2 or adds[0].kwargs:
        return None
    lse = _only_user(adds[0])
    if not _call(lse, aten.where.self) or lse.args[:2] != (gts[0], adds[0]):
        return None
    assert lse is not None
    if not _is_scalar(lse.args[2], 0.0):
        return None
    region += [gts[0], logs[0], adds[0], lse]
    node = lse
    rows = tuple(_val(total).shape)
    while True:  # squeeze / unsqueeze / view back to [..., 1]
        user = _only_user(node)
        if not _call(user, aten.squeeze.dims, aten.squeeze.dim, aten.unsqueeze.default, *RESHAPES):
            break
        assert user is not None
        region.append(user)
        node = user
    if tuple(_val(node).shape) != rows:
        return None
    sub = _only_user(node)
    if not _call(sub, aten.sub.Tensor) or sub.args[:2] != (x, node):
        return None
    assert sub is not None
    probs = _only_user(sub)
    if not _call(probs, aten.exp.default):
        return None
    assert probs is not None
    region += [sub, probs]
    return probs, True


def _bypass_clone(arg: fx.Node, shape4: tuple[int, ...], members: list[fx.Node]) -> fx.Node:
    """A bmm operand view(clone(src4)) of a 4-D src of shape ``shape4`` ([B, H, ., .] as the
    scores split batch and heads): src (the clone and the view join the group); otherwise the
    operand itself."""
    clone = arg.args[0] if _call(arg, *RESHAPES) and len(arg.users) == 1 else None
    if not _call(clone, aten.clone.default) or len(clone.users) != 1:
        return arg
    assert isinstance(clone, fx.Node)
    src = clone.args[0]
    value = _val(src)
    if not isinstance(value, torch.Tensor) or value.ndim != 4:
        return arg
    if tuple(value.shape) != shape4 or not _tensor(src):
        return arg
    members += [clone, arg]
    assert isinstance(src, fx.Node)
    return src


def _tensor(node: Any, ndim: int | None = None) -> TypeGuard[fx.Node]:
    value = _val(node)
    return (
        isinstance(node, fx.Node)
        and isinstance(value, torch.Tensor)
        and all(isinstance(n, int) for n in (*value.shape, *value.stride()))
        and (ndim is None or value.ndim == ndim)
    )


@dataclass
class _Match:
    members: list[fx.Node]
    q: fx.Node
    kt: fx.Node
    v: fx.Node
    mask: fx.Node | None
    mask_kind: str
    scale: float
    safe: bool
    out_layout: str
    scores_shape: tuple[int, ...]
    dead: set[fx.Node]  # unused nodes hanging off the members, erased with them


def _scale_and_mask(
    x: fx.Node, members: list[fx.Node]
) -> tuple[fx.Node, float, fx.Node | None, str] | None:
    """Follow the scores through a scalar scale and a mask; the masked scores node."""
    scale = 1.0
    user = _only_user(x)
    if _call(user, aten.mul.Tensor, aten.div.Tensor) and len(user.args) == 2:
        assert user is not None
        a, b = user.args
        factor = b if a is x else a if user.target is aten.mul.Tensor and b is x else None
        if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 0:
            scale = float(factor) if user.target is aten.mul.Tensor else 1.0 / float(factor)
            members.append(user)
            x, user = user, _only_user(user)
    shape = tuple(_val(x).shape)
    if _call(user, aten.add.Tensor) and len(user.args) == 2 and not user.kwargs:
        assert user is not None
        other = user.args[1] if user.args[0] is x else user.args[0]
        if _tensor(other) and _broadcasts(other, shape) and _val(other).dtype in FLOATS:
            members.append(user)
            return user, scale, other, "add"
    if _call(user, aten.where.self):
        assert user is not None
        cond, a, b = user.args
        if _tensor(cond) and _val(cond).dtype == torch.bool and _broadcasts(cond, shape):
            kind = (
                "keep"
                if a is x and _is_scalar(b, NEG_INF)
                else "drop"
                if b is x and _is_scalar(a, NEG_INF)
                else None
            )
            if kind is not None:
                members.append(user)
                return user, scale, cond, kind
    return x, scale, None, "add"


def _broadcasts(node: Any, shape: tuple[int, ...]) -> bool:
    value = _val(node)
    try:
        return tuple(torch.broadcast_shapes(tuple(value.shape), shape)) == shape
    except RuntimeError:
        return False


def _match(qk: fx.Node, outputs: set[fx.Node]) -> _Match | None:
    q3, kt3 = qk.args[:2]
    if not (_tensor(q3, 3) and _tensor(kt3, 3) and _tensor(qk, 3)):
        return None
    bh, length, dim = _val(q3).shape
    keys = _val(kt3).shape[2]
    if dim > MAX_HEAD_DIM or _val(q3).dtype not in FLOATS or _val(qk).dtype not in FLOATS:
        return None
    members = [qk]
    x = qk
    view = _only_user(x)
    if _call(view, *RESHAPES) and tuple(_val(view).shape)[-2:] == (length, keys):
        assert view is not None
        members.append(view)
        x = view
    if _val(x).ndim not in (3, 4) or math.prod(_val(x).shape[:-2]) != bh:
        return None
    found = _scale_and_mask(x, members)
    if found is None:
        return None
    x, scale, mask, kind = found
    region: list[fx.Node] = []
    softmax = _softmax(x, region)
    if softmax is None:
        return None
    probs, safe = softmax
    members += region
    node = _only_user(probs)
    while _call(node, *RESHAPES) or _identity_expand(node):  # to the bmm's [BH, L, S]
        members.append(node)
        node = _only_user(node)
    if not _call(node, aten.bmm.default) or node.args[0] is not members[-1]:
        return None
    assert node is not None
    pv, v3 = node, node.args[1]
    if not (
        _tensor(v3, 3) and _val(v3).shape[:2] == (bh, keys) and _val(v3).shape[2] <= MAX_HEAD_DIM
    ):
        return None
    members.append(pv)
    last, layout = pv, "bhld"
    view = _only_user(pv)
    if (
        _call(view, *RESHAPES)
        and _val(view).ndim == 4
        and _val(view).shape[:2] == _val(x).shape[:2]
    ):
        members.append(view)
        last = view
        perm = _only_user(view)
        clone = _only_user(perm) if _call(perm, aten.permute.default) else None
        if (
            _call(perm, aten.permute.default)
            and perm.args[1] in ([0, 2, 1, 3], (0, 2, 1, 3))
            and _call(clone, aten.clone.default)
            and _val(clone).is_contiguous()
            and clone.kwargs.get("memory_format", torch.contiguous_format)
            is torch.contiguous_format
        ):
            assert clone is not None
            members += [perm, clone]
            last, layout = clone, "blhd"
    heads = tuple(_val(x).shape[:-2]) if _val(x).ndim == 4 else (1, bh)
    q = _bypass_clone(q3, (*heads, length, dim), members)
    kt = _bypass_clone(kt3, (*heads, dim, keys), members)
    v = _bypass_clone(v3, (*heads, keys, _val(v3).shape[2]), members)
    if last is not members[-1]:
        members.remove(last)
        members.append(last)
    inside = set(members)
    dead: set[fx.Node] = set()
    for m in members:
        if m is not last:
            for user in m.users:
                if user not in inside and user not in _DEAD:
                    return None  # an intermediate is used elsewhere (backward keeps it)
    for m in members:  # the dead nodes hanging off the members go with them
        stack = [u for u in m.users if u in _DEAD]
        while stack:
            node = stack.pop()
            if node not in dead and node not in inside:
                dead.add(node)
                stack += node.users
    if any(m in outputs for m in members if m is not last):
        return None
    if mask is not None and mask in inside:
        return None
    return _Match(members, q, kt, v, mask, kind, scale, safe, layout, tuple(_val(x).shape), dead)


def _identity_expand(node: Any) -> TypeGuard[fx.Node]:
    """An ``expand`` to its input's own shape (the ``views`` pass removes them)."""
    return (
        _call(node, aten.expand.default)
        and isinstance(node.args[0], fx.Node)
        and tuple(_val(node).shape) == tuple(_val(node.args[0]).shape)
    )


def _dead_nodes(graph: fx.Graph) -> set[fx.Node]:
    """Pure nodes whose value nothing uses, even through other such nodes (the log-sum-exp an
    inference graph drops; the ``dce`` pass would remove them): one pass in reverse order."""
    dead: set[fx.Node] = set()
    for node in reversed(graph.nodes):
        if _pure(node) and all(u in dead for u in node.users):
            dead.add(node)
    return dead


def _replace(gm: fx.GraphModule, match: _Match) -> None:
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    members = sorted(match.members, key=order.__getitem__)
    last = members[-1]
    first = tuple(n for n in (match.q, match.kt, match.v, match.mask) if n is not None)
    records, outside = member_records(members, first)
    shape = match.scores_shape
    batch, heads = (shape[0], shape[1]) if len(shape) == 4 else (1, shape[0])
    plan = AttentionPlan(
        outside.index(match.q),
        outside.index(match.kt),
        outside.index(match.v),
        None if match.mask is None else outside.index(match.mask),
        match.mask_kind,
        batch,
        heads,
        match.scale,
        match.out_layout,
        match.safe,
    )
    kernel = FusedAttention(records, plan)
    insert_fused(gm, kernel, outside, last, [m.name for m in members])
    for m in sorted(match.dead, key=order.__getitem__, reverse=True):
        gm.graph.erase_node(m)
    for m in reversed(members):
        gm.graph.erase_node(m)


def fuse_attention(gm: fx.GraphModule) -> dict[str, int]:
    """Replace every attention pattern (module docstring) by one fused node."""
    outputs = graph_outputs(gm)
    matches: list[_Match] = []
    taken: set[fx.Node] = set()
    _DEAD.update(_dead_nodes(gm.graph))
    try:
        for node in list(gm.graph.nodes):
            if _call(node, aten.bmm.default) and node not in taken:
                match = _match(node, outputs)
                if match is not None and not taken & (set(match.members) | match.dead):
                    matches.append(match)
                    taken |= set(match.members) | match.dead
    finally:
        _DEAD.clear()
    for match in matches:
        _replace(gm, match)
    return {"attention": len(matches), "fused_nodes": sum(len(m.members) for m in matches)}
