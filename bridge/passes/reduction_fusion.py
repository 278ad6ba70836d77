"""The reduction-fusion pass: a row reduction and its elementwise work become one row pass.

Core ATen decompositions take softmax and RMS norm apart into a chain of reductions over one
dim (``amax``, ``sum``, ``mean``) and elementwise ops between the full rows and their [.., 1]
statistics. Lowered one by one, every op is a round trip through HBM, and each statistic comes
back as a stride-0 broadcast operand. This pass finds the chains and replaces each by one node
(a ``RowKernel``) that lowers as a single pass over rows in SBUF: each row tile of the input is
loaded once, the statistics and the result are computed on chip, and the result is stored once.

Patterns (every intermediate must be used only inside the chain and not be a graph output; the
reduced dim, ``keepdim=True`` and the dtypes are checked; anything else is left as it is):

- **softmax** ``y = exp(x - amax(x)) / sum(exp(x - amax(x)))`` (``aten._softmax``'s
  decomposition) lowers as ``_softmax`` (``lowerings.reduction``);
- **log-sum-exp softmax** ``y = exp(x - lse(x))`` with ``lse = where(s > 0, log(s) + m', 0)``,
  ``m' = where(m == -inf, 0, m)``, ``s = sum(exp(x - m'))`` (the bridge's SDPA decomposition,
  ``bridge.decompositions``: fully masked rows give 0) lowers as ``_safe_softmax``, which gives
  0 for those rows too;
- **RMS norm** ``y = [w *] (x * rsqrt(mean(x ** 2) + eps))`` over the last dim (Llama) lowers as
  ``lowerings.norm.rms_norm``;
- **LayerNorm** arrives whole (Core ATen keeps ``native_layer_norm``, and its lowering already
  normalises and applies the affine in one row pass); when only its first output is used it
  lowers without storing the per-row mean and 1/std.

Every instruction of a fused node carries all its source nodes in its tag
(``fused[softmax]/amax_1+sub_1+exp_1+sum_1+div_1``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from torch.utils import _pytree as pytree
from typing_extensions import TypeIs

from hwsim.bridge.passes.fused_kinds import group_tag, register_fused
from hwsim.bridge.passes.fused_nodes import graph_outputs
from hwsim.bridge.passes.fusion import FusedKernel, Member, _replace

aten = torch.ops.aten

#: Views that may sit between the log-sum-exp and its use (squeeze then unsqueeze of the dim).
_ROW_VIEWS = frozenset(
    {aten.squeeze.dims, aten.squeeze.dim, aten.unsqueeze.default, aten.view.default}
)
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


class RowKernel(FusedKernel):
    """Target of a fused row node: the members (for interpretation and attribution), the
    pattern's ``kind`` and its parameters; ``lower_row_kernel`` emits it (module docstring)."""

    def __init__(self, members: list[Member], kind: str, **params: Any) -> None:
        super().__init__(members)
        self.kind = kind
        self.params = params
        self.__name__ = f"fused[{kind}]"


@register_fused(RowKernel)
def lower_row_kernel(ctx: Any, kernel: RowKernel, outside: list[Any], escapes: bool) -> Any:
    """Lower the group as one row pass; outside[0] is the row input x."""
    from hwsim.bridge.lowerings.norm import layer_norm, rms_norm
    from hwsim.bridge.lowerings.reduction import softmax_rows
    from hwsim.bridge.passes.fused_lowering import _call, _meta

    last = kernel.members[-1]
    tag = group_tag(kernel)
    params = kernel.params
    with ctx.node(last.name, _meta(last.val), _call(last), escapes=escapes, tag=tag):
        if kernel.kind == "layer_norm":
            w, b = (outside[i] if i is not None else None for i in params["affine"])
            dims, eps = params["normalized_dims"], params["eps"]
            result, _ = layer_norm(ctx, outside[0], dims, w, b, eps, with_stats=False)
        elif kernel.kind == "rms_norm":
            weight = params["weight"]
            w = outside[weight] if weight is not None else None
            result = rms_norm(ctx, outside[0], w, params["eps"])
        else:
            safe = kernel.kind == "lse_softmax"
            result = softmax_rows(ctx, outside[0], params["dim"], safe)
    ctx.fusion_notes.append({"group": kernel.node_names, "fused": True, "row": kernel.kind})
    return result


# ---- matching helpers ---------------------------------------------------------------------


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def _is(node: Any, *targets: Any) -> TypeIs[fx.Node]:
    return isinstance(node, fx.Node) and node.op == "call_function" and node.target in targets


def _only_user(node: fx.Node) -> fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _users(node: fx.Node) -> set[fx.Node]:
    return set(node.users)


def _scalar(value: Any, gm: fx.GraphModule) -> float | None:
    """A Python number, a ``scalar_tensor`` node or a 0-d tensor constant, as a float."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if _is(value, aten.scalar_tensor.default) and isinstance(value.args[0], (int, float)):
        return float(value.args[0])
    if isinstance(value, fx.Node) and value.op == "get_attr":
        tensor = getattr(gm, str(value.target), None)
        if isinstance(tensor, torch.Tensor) and tensor.numel() == 1:
            return float(tensor.item())
    return None


def _row_dim(node: fx.Node, x: fx.Node) -> int | None:
    """The one dim ``node`` (amax/sum/mean(x, [d], keepdim=True)) reduces, wrapped."""
    xv = _val(x)
    if not isinstance(xv, torch.Tensor) or xv.dtype not in _FLOATS or xv.ndim == 0:
        return None
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    if not keepdim or not isinstance(dims, (list, tuple)) or len(dims) != 1:
        return None
    if node.kwargs.get("dtype") is not None or not isinstance(dims[0], int):
        return None
    return dims[0] % xv.ndim


def _same_meta(a: fx.Node, b: fx.Node) -> bool:
    va, vb = _val(a), _val(b)
    return (
        isinstance(va, torch.Tensor)
        and isinstance(vb, torch.Tensor)
        and tuple(va.shape) == tuple(vb.shape)
        and va.dtype == vb.dtype
    )


def _row_stat(node: fx.Node, x: fx.Node, dim: int) -> bool:
    """``node`` is x's shape with ``dim`` kept as 1, in x's dtype."""
    v, xv = _val(node), _val(x)
    if not isinstance(v, torch.Tensor) or not isinstance(xv, torch.Tensor):
        return False
    kept = tuple(1 if d == dim else n for d, n in enumerate(xv.shape))
    return tuple(v.shape) == kept and v.dtype == xv.dtype


# ---- patterns ---------------------------------------------------------------------------------

#: A match: (members in graph order, kind, parameters).
Match = tuple[list[fx.Node], str, dict[str, Any]]


def _softmax(amax: fx.Node, gm: fx.GraphModule) -> Match | None:
    """amax -> sub -> exp -> sum -> div (``aten._softmax``'s decomposition)."""
    x = amax.args[0]
    if not isinstance(x, fx.Node) or (dim := _row_dim(amax, x)) is None:
        return None
    sub = _only_user(amax)
    if not (_is(sub, aten.sub.Tensor) and sub.args == (x, amax)):
        return None
    exp = _only_user(sub)
    if not _is(exp, aten.exp.default) or len(exp.users) != 2:
        return None
    total = next((u for u in exp.users if _is(u, aten.sum.dim_IntList)), None)
    div = next((u for u in exp.users if _is(u, aten.div.Tensor)), None)
    if total is None or div is None or _row_dim(total, exp) != dim:
        return None
    if div.args != (exp, total) or _users(total) != {div}:
        return None
    if not (_same_meta(div, x) and _same_meta(exp, x) and _row_stat(total, x, dim)):
        return None
    return [amax, sub, exp, total, div], "softmax", {"dim": dim}


def _lse_softmax(amax: fx.Node, gm: fx.GraphModule) -> Match | None:
    """The log-sum-exp form of ``bridge.decompositions._row_logsumexp`` followed by
    ``exp(x - lse)`` (module docstring)."""
    x = amax.args[0]
    if not isinstance(x, fx.Node) or (dim := _row_dim(amax, x)) is None:
        return None
    members = [amax]
    eq = next((u for u in amax.users if _is(u, aten.eq.Scalar)), None)
    shift = next((u for u in amax.users if _is(u, aten.where.self)), None)
    if eq is None or shift is None or _users(amax) != {eq, shift}:
        return None
    if eq.args != (amax, -math.inf) or _users(eq) != {shift}:
        return None
    if shift.args[0] is not eq or shift.args[2] is not amax or _scalar(shift.args[1], gm) != 0.0:
        return None
    members += [eq, shift]
    sub = next((u for u in shift.users if _is(u, aten.sub.Tensor)), None)
    add = next((u for u in shift.users if _is(u, aten.add.Tensor)), None)
    if sub is None or add is None or _users(shift) != {sub, add} or sub.args != (x, shift):
        return None
    exp = _only_user(sub)
    if not _is(exp, aten.exp.default):
        return None
    total = _only_user(exp)
    if not _is(total, aten.sum.dim_IntList) or _row_dim(total, exp) != dim:
        return None
    gt = next((u for u in total.users if _is(u, aten.gt.Scalar)), None)
    log = next((u for u in total.users if _is(u, aten.log.default)), None)
    if gt is None or log is None or _users(total) != {gt, log} or gt.args != (total, 0):
        return None
    if _users(log) != {add} or add.args not in ((log, shift), (shift, log)):
        return None
    lse = _only_user(add)
    if not (_is(lse, aten.where.self) and lse.args[0] is gt and lse.args[1] is add):
        return None
    if _scalar(lse.args[2], gm) != 0.0 or _users(gt) != {lse}:
        return None
    members += [sub, exp, total, gt, log, add, lse]
    value = lse
    while True:  # squeeze(-1) then unsqueeze(-1): views of the [.., 1] statistic
        user = _only_user(value)
        if not _is(user, *_ROW_VIEWS) or user.args[0] is not value:
            break
        members.append(user)
        value = user
    final_sub = _only_user(value)
    if not (_is(final_sub, aten.sub.Tensor) and final_sub.args == (x, value)):
        return None
    if not _row_stat(value, x, dim) or not _row_stat(lse, x, dim):
        return None
    final_exp = _only_user(final_sub)
    if not _is(final_exp, aten.exp.default) or not _same_meta(final_exp, x):
        return None
    members += [final_sub, final_exp]
    return members, "lse_softmax", {"dim": dim}


def _rms_norm(power: fx.Node, gm: fx.GraphModule) -> Match | None:
    """[w *] (x * rsqrt(mean(x ** 2, -1, keepdim) + eps)) (Llama's RMSNorm)."""
    x = power.args[0]
    if not isinstance(x, fx.Node) or len(power.args) != 2 or power.args[1] not in (2, 2.0):
        return None
    mean = _only_user(power)
    if not _is(mean, aten.mean.dim) or mean.args[0] is not power:
        return None
    xv = _val(x)
    if (dim := _row_dim(mean, power)) is None or dim != xv.ndim - 1:
        return None
    add = _only_user(mean)
    if not (_is(add, aten.add.Scalar, aten.add.Tensor) and add.args[0] is mean):
        return None
    eps = _scalar(add.args[1], gm)
    rsqrt = _only_user(add)
    if eps is None or not _is(rsqrt, aten.rsqrt.default):
        return None
    scaled = _only_user(rsqrt)
    if not (_is(scaled, aten.mul.Tensor) and set(scaled.args) == {x, rsqrt}):
        return None
    if not (_same_meta(scaled, x) and _row_stat(rsqrt, x, dim)):
        return None
    members = [power, mean, add, rsqrt, scaled]
    weight = None
    affine = _only_user(scaled)
    if _is(affine, aten.mul.Tensor) and len(affine.args) == 2 and _same_meta(affine, x):
        other = affine.args[0] if affine.args[1] is scaled else affine.args[1]
        ov = _val(other)
        if (
            isinstance(other, fx.Node)
            and other is not scaled
            and isinstance(ov, torch.Tensor)
            and tuple(ov.shape) == (xv.shape[-1],)
            and ov.dtype == xv.dtype
        ):
            members.append(affine)
            weight = other
    return members, "rms_norm", {"eps": eps, "weight_node": weight}


def _layer_norm(norm: fx.Node, gm: fx.GraphModule) -> Match | None:
    """``native_layer_norm`` whose mean and 1/std nobody uses: the lowering then stores only
    the normalised rows (no [.., 1] statistic per row tile)."""
    getitems = list(norm.users)
    if not getitems or any(u.target is not operator.getitem for u in getitems):
        return None
    used = [u for u in getitems if u.users]
    if len(used) != 1 or used[0].args[1] != 0 or len(norm.args) < 5:
        return None
    x, shape, weight, bias, eps = norm.args[:5]
    if not (isinstance(x, fx.Node) and isinstance(eps, (int, float))):
        return None
    if not isinstance(shape, (list, tuple)):
        return None
    unused = [u for u in getitems if u is not used[0]]
    params = {"normalized_dims": len(shape), "eps": float(eps)}
    return [norm, *unused, used[0]], "layer_norm", params | {"affine_nodes": (weight, bias)}


#: Where each pattern starts.
_STARTS: dict[Any, tuple[Callable[[fx.Node, fx.GraphModule], Match | None], ...]] = {
    aten.amax.default: (_softmax, _lse_softmax),
    aten.pow.Tensor_Scalar: (_rms_norm,),
    aten.native_layer_norm.default: (_layer_norm,),
}


def _kernel(kind: str, params: dict[str, Any], members: list[fx.Node]):
    """A factory for ``fusion._replace``: the RowKernel over the member records, with the
    indices (into the fused node's arguments) of a norm's weight (and bias)."""
    named = {"weight": params.pop("weight_node", None)} if kind == "rms_norm" else {}
    if kind == "layer_norm":
        named = dict(zip(("weight", "bias"), params.pop("affine_nodes"), strict=True))
    inside = set(members)
    outside: list[fx.Node] = []  # in fusion._replace's order: first use in member order
    for m in members:
        for a in pytree.tree_leaves((m.args, m.kwargs)):
            if isinstance(a, fx.Node) and a not in inside and a not in outside:
                outside.append(a)
    index = {k: outside.index(v) if isinstance(v, fx.Node) else None for k, v in named.items()}
    if kind == "layer_norm":
        params["affine"] = (index["weight"], index["bias"])
    elif kind == "rms_norm":
        params["weight"] = index["weight"]

    def make(records: list[Member]) -> RowKernel:
        return RowKernel(records, kind, **params)

    return make


def fuse_reductions(gm: fx.GraphModule) -> dict[str, int]:
    """Replace every matched chain (module docstring) by one ``RowKernel`` node."""
    outputs = graph_outputs(gm)
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    gone: set[fx.Node] = set()
    counts = {"softmax": 0, "lse_softmax": 0, "rms_norm": 0, "layer_norm": 0}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node in gone:
            continue
        for matcher in _STARTS.get(node.target, ()):
            match = matcher(node, gm)
            if match is None:
                continue
            members, kind, params = match
            final = members[-1]  # the chain's value (unused getitems may follow it)
            members = sorted((m for m in members if m is not final), key=order.__getitem__)
            members.append(final)
            inside = set(members)
            # Only the last member's value may leave the group (it is the fused node's).
            if any(m in outputs or not set(m.users) <= inside for m in members[:-1]):
                continue
            _replace(gm, members, _kernel(kind, params, members))
            gone |= inside
            counts[kind] += 1
            break
    return counts
