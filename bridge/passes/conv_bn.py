"""The conv + batch norm (+ ReLU) pass: an eval batch norm after a convolution, and a ReLU after
that, are applied as the convolution's PSUM evacuation.

An eval batch norm is a per-channel affine ``y = x * s + t`` with ``s = w * rsqrt(var + eps)``
and ``t = b - mean * s`` (``lowerings.batch_norm``). After a convolution it can be folded into
the conv's weights, but only when they are constants: under ``torch.compile`` and ``hwsim
export`` weights and running statistics are graph inputs. So the fold happens on chip instead,
exact for any weights: s and t (with the conv's bias b_c folded in as ``t + b_c * s``) are
computed once per block of output channels, and each PSUM block is evacuated by one ScalarE
``activation(relu or identity, acc, scale=s, bias=t)`` (``conv.ChannelEpilogue``), where the
unfused graph stores the conv's output, reloads it for the batch norm, stores that, and reloads
it again for the ReLU.

Matched: ``convolution`` (groups 1) whose only user is ``_native_batch_norm_legit_no_training``,
whose only used output is ``getitem(_, 0)``, optionally followed by that value's only user
``relu``. The conv's and the batch norm's values must not be graph outputs. The fused node's
instructions carry every source node in their tag (``fused[conv_bn_relu]/convolution+...``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from torch.utils import _pytree as pytree

from hwsim.bridge.errors import Unsupported
from hwsim.bridge.passes.fused_kinds import group_tag, register_fused
from hwsim.bridge.passes.fused_nodes import graph_outputs
from hwsim.bridge.passes.fusion import FusedKernel, Member, _replace, _supported
from hwsim.bridge.passes.reduction_fusion import _val
from hwsim.bridge.registry import OpCall, check_support

aten = torch.ops.aten
_BN_EVAL = aten._native_batch_norm_legit_no_training.default


class ConvBnKernel(FusedKernel):
    """Target of a fused conv + batch norm [+ ReLU] node; ``lower_conv_bn`` emits it."""

    def __init__(self, members: list[Member], relu: bool) -> None:
        super().__init__(members)
        self.relu = relu
        self.__name__ = "fused[conv_bn_relu]" if relu else "fused[conv_bn]"


@register_fused(ConvBnKernel)
def lower_conv_bn(ctx: Any, kernel: ConvBnKernel, outside: list[Any], escapes: bool) -> Any:
    """The convolution with the batch norm (and ReLU) on its PSUM evacuation."""
    from hwsim.bridge.lowerings.batch_norm import channel_affine
    from hwsim.bridge.lowerings.conv import ChannelEpilogue, convolution
    from hwsim.bridge.passes.fused_lowering import _call, _meta, _resolve
    from hwsim.kernels.ops import ActivationFunction as Act

    tag = group_tag(kernel)
    conv, bn = kernel.members[0], kernel.members[1]
    conv_args, _ = _resolve(conv, outside, [])
    x, weight, conv_bias, *rest = conv_args
    values: list[Any] = [None]  # the conv's value is never needed outside the epilogue
    bn_args, _ = _resolve(bn, outside, values)
    _, bn_weight, bn_bias, mean, var, _momentum, eps = bn_args

    def columns(chunks):
        return channel_affine(ctx, chunks, bn_weight, bn_bias, mean, var, eps, conv_bias)

    last = kernel.members[-1]
    ctx.epilogue = ChannelEpilogue(Act.relu if kernel.relu else Act.identity, columns)
    try:
        with ctx.node(last.name, _meta(last.val), _call(conv), escapes=escapes, tag=tag):
            result = convolution(ctx, x, weight, None, *rest)
    finally:
        ctx.epilogue = None
    ctx.fusion_notes.append({"group": kernel.node_names, "fused": True, "conv_bn": True})
    return result


def _only_user(node: fx.Node) -> fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def match_conv_bn(conv: fx.Node) -> tuple[list[fx.Node], bool] | None:
    """The nodes ``fuse_conv_bn`` replaces at ``conv`` (the conv, its batch norm and the batch
    norm's getitems, then the ReLU if one follows) and whether a ReLU follows; None if it leaves
    the conv alone. ``patch_conv`` leaves the convs this matches to this pass."""
    bn = _only_user(conv)
    if bn is None or bn.target is not _BN_EVAL or bn.args[0] is not conv:
        return None
    if len(conv.args) < 9 or conv.args[6] or conv.args[8] != 1:  # transposed, groups
        return None
    cv = _val(conv)
    if not isinstance(cv, torch.Tensor) or cv.dtype != torch.float32 or cv.ndim not in (3, 4):
        return None
    if not (_supported(conv) and _supported_bn(bn)):
        return None
    getitems = list(bn.users)
    if any(u.target is not operator.getitem for u in getitems):
        return None
    used = [u for u in getitems if u.users or u.args[1] == 0]
    if len(used) != 1 or used[0].args[1] != 0:
        return None
    value = used[0]
    members = [conv, bn, *getitems]
    relu = _only_user(value)
    if relu is not None and relu.target is aten.relu.default:
        return [*members, relu], True
    return members, False


def _supported_bn(bn: fx.Node) -> bool:
    args, kwargs = pytree.tree_map_only(fx.Node, lambda n: n.meta.get("val"), (bn.args, bn.kwargs))
    try:
        check_support(OpCall(bn.target, tuple(args), dict(kwargs), bn.meta.get("val")))
    except Unsupported:
        return False
    return True


def _kernel(relu: bool) -> Callable[[list[Member]], FusedKernel]:
    def make(records: list[Member]) -> FusedKernel:
        return ConvBnKernel(records, relu)

    return make


def fuse_conv_bn(gm: fx.GraphModule) -> dict[str, int]:
    """Replace every matched conv + batch norm [+ ReLU] (module docstring) by one node."""
    outputs = graph_outputs(gm)
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    counts = {"conv_bn": 0, "conv_bn_relu": 0}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.convolution.default:
            continue
        match = match_conv_bn(node)
        if match is None:
            continue
        members, relu = match
        members.sort(key=order.__getitem__)
        if members[-1].target is operator.getitem:  # the used getitem must come last
            used = next(m for m in members if m.target is operator.getitem and m.users)
            members.remove(used)
            members.append(used)
        inside = set(members)
        if any(m in outputs or not set(m.users) <= inside for m in members[:-1]):
            continue
        _replace(gm, members, _kernel(relu))
        counts["conv_bn_relu" if relu else "conv_bn"] += 1
    return counts
