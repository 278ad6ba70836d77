"""Patch convolutions as matmuls: a convolution whose stride equals its kernel (no padding, no
dilation, groups 1) — a vision transformer's patch embedding — becomes one ``addmm``.

Such a convolution's output positions read disjoint patches of the image, so it is exactly

    out[n, co, oh, ow] = patches[(n, oh, ow), (ci, kh, kw)] @ W.view(co, ci*kh*kw)ᵀ + b[co]

as the Neuron compiler lowers it. As a convolution it contracts over ``ci`` partitions only
(3 for an RGB image: TensorE's 128 rows run at 3/128 of their rate) with one matmul per tap,
and its blocking depends on the SBUF left to it. As a matmul it contracts over
``ci*kh*kw`` (768 for ViT's 16x16 RGB patches), and the weight becomes a constant matmul
operand like nn.Linear's: ``prepare_constants`` (which runs after this pass) prepares it at
compile time, and the matmul streams it (``tiling.weights``).

The patch gather is an ``[N, C, OH, kh, OW, kw] -> [N, OH, OW, C, kh, kw]`` permuted view of
the image made contiguous (a ``clone``: one strided DMA copy whose runs are ``kw`` elements,
of the image's size, a few hundred KB for ViT), and the result ``[N*OH*OW, co]`` is permuted
back to the convolution's NCHW layout the same way — unless the conv's only reader is a patch
embedding's ``flatten(2).transpose(1, 2)``, whose [N, patches, co] tokens are the product's own
rows: then that permuted view is the product, and nothing is copied. Each copy is one graph
node, lowered by the bridge's copy lowering (the gather is not folded into the matmul's loads:
their access patterns take 2-D operands). A conv whose output feeds an eval batch norm is left
to ``conv_bn``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from hwsim.bridge.passes.conv_bn import match_conv_bn

aten = torch.ops.aten

_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def _ints(values: Any) -> list[int]:
    return [int(v) for v in values]


def patch_shape(node: fx.Node) -> tuple[int, ...] | None:
    """(N, C, OH, KH, OW, KW, CO) when ``node`` is a qualifying 2-D patch convolution."""
    if node.op != "call_function" or node.target is not aten.convolution.default:
        return None
    if len(node.args) < 9:
        return None
    x, w, _bias, stride, padding, dilation, transposed, _out_pad, groups = node.args[:9]
    xv, wv = _val(x), _val(w)
    if xv is None or wv is None or xv.ndim != 4 or wv.ndim != 4:
        return None
    if transposed or groups != 1:
        return None
    kh, kw = int(wv.shape[2]), int(wv.shape[3])
    if _ints(stride) != [kh, kw] or any(_ints(padding)) or _ints(dilation) != [1, 1]:
        return None
    if kh * kw == 1:
        return None  # a 1x1 conv reads no patch: the conv path already contracts over C
    n, c, h, width = (int(s) for s in xv.shape)
    if h % kh or width % kw:
        return None  # a ragged last patch (the conv drops it): not a pure reshape
    if match_conv_bn(node) is not None:
        return None  # conv_bn folds the batch norm into the conv's evacuation
    return (n, c, h // kh, kh, width // kw, kw, int(wv.shape[0]))


def _fake_mode(node: fx.Node) -> FakeTensorMode:
    value = _val(node)
    return value.fake_mode if isinstance(value, FakeTensor) else FakeTensorMode()


def _like(value: torch.Tensor) -> torch.Tensor:
    """A tensor of ``value``'s shape, strides and dtype in the current fake mode."""
    return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=value.device)


def _val(node: Any) -> Any:
    value = node.meta.get("val") if isinstance(node, fx.Node) else None
    return value if isinstance(value, torch.Tensor) else None


def patch_convs_to_matmul(gm: fx.GraphModule) -> dict[str, int]:
    """Replace each qualifying convolution by patches @ Wᵀ + b (module docstring)."""
    graph = gm.graph
    rewritten = 0
    for node in list(graph.nodes):
        shape = patch_shape(node)
        if shape is None:
            continue
        _rewrite(graph, node, shape)
        rewritten += 1
    return {"patch_convs": rewritten}


def _rewrite(graph: fx.Graph, conv: fx.Node, shape: tuple[int, ...]) -> None:
    n, c, oh, kh, ow, kw, co = shape
    x, w, bias = conv.args[0], conv.args[1], conv.args[2]
    k = c * kh * kw

    mode = _fake_mode(conv)

    def add(target: Any, *args: Any, **kwargs: Any) -> fx.Node:
        node = graph.call_function(target, args, kwargs)
        with mode:  # the graph's values may come from several fake modes: one, here
            values = [_like(_val(a)) if isinstance(a, fx.Node) else a for a in args]
            node.meta["val"] = target(*values, **kwargs)
        return node

    with graph.inserting_before(conv):
        image = add(aten.view.default, x, [n, c, oh, kh, ow, kw])
        permuted = add(aten.permute.default, image, [0, 2, 4, 1, 3, 5])
        gathered = add(aten.clone.default, permuted, memory_format=torch.contiguous_format)
        patches = add(aten.view.default, gathered, [n * oh * ow, k])
        matrix = add(aten.view.default, w, [co, k])
        weight_t = add(aten.permute.default, matrix, [1, 0])
        if bias is None:
            product = add(aten.mm.default, patches, weight_t)
        else:
            product = add(aten.addmm.default, bias, patches, weight_t)
        tokens = _tokens_view(conv, n, co, oh * ow)
        if tokens is not None:  # ViT's flatten(2).transpose(1, 2): the product's own layout
            out = add(aten.view.default, product, [n, oh * ow, co])
            tokens.replace_all_uses_with(out)
            flat = tokens.args[0]
            graph.erase_node(tokens)
            graph.erase_node(flat)  # type: ignore[arg-type]
            graph.erase_node(conv)
            return
        rows = add(aten.view.default, product, [n, oh, ow, co])
        nchw = add(aten.permute.default, rows, [0, 3, 1, 2])
        out = add(aten.clone.default, nchw, memory_format=torch.contiguous_format)
    conv.replace_all_uses_with(out)
    graph.erase_node(conv)


def _tokens_view(conv: fx.Node, n: int, co: int, patches: int) -> fx.Node | None:
    """The ``permute(view(conv, [n, co, patches]), [0, 2, 1])`` that alone reads the conv (a
    patch embedding's tokens), if it does: the matmul's [n * patches, co] rows are it."""
    users = list(conv.users)
    if len(users) != 1 or users[0].target not in _VIEWS or users[0].args[0] is not conv:
        return None
    flat = users[0]
    if _ints(flat.args[1]) != [n, co, patches] or len(flat.users) != 1:
        return None
    (tokens,) = flat.users
    if tokens.target is aten.permute.default:
        swaps_last_two = _ints(tokens.args[1]) == [0, 2, 1]
    else:
        dims = [d for d in tokens.args[1:3] if isinstance(d, int)]
        pair = sorted(d % 3 for d in dims)
        swaps_last_two = tokens.target is aten.transpose.int and pair == [1, 2]
    if not swaps_last_two or any(u.op == "output" for u in tokens.users):
        return None  # a graph output keeps the strides torch gives it
    return tokens
