"""Weights prepared at compile time: constants cast and laid out as their matmul wants them.

The Neuron compiler treats a traced model's parameters as constants: it casts them to the dtype
auto-cast gives their consumer (``--auto-cast matmult`` casts a matmul's FP32 weight to BF16) and
stores them in HBM in the layout the consumer reads, once, when the graph is compiled; the
program run per inference only streams them. This pass marks those constants: every use of a
constant 2-D tensor W as the moving operand ``b`` of ``mm``/``addmm`` — directly ([K, N]) or
through ``permute(W, [1, 0])`` / ``t(W)``, nn.Linear's Wᵀ of its [N, K] weight, or of a
contiguous N-D constant viewed as its [N, K] matrix first (a patch convolution's weight,
``passes.patch_conv``) — becomes a
``PreparedWeight`` node over W. The lowering binds each to an HBM input of its own holding
``prepare(W)`` (``graph_lowering``): Wᵀ (or W) in the matmul's dtype, in the layout
``PreparedLayout`` describes — blocks of columns, each with K on partitions in tiles of 128 rows
and each partition's rows of every K tile contiguous, so a block is one DMA whose descriptors
are whole runs of ``K/128 x width x itemsize`` bytes (9 KiB for a 768 x 768 bf16 weight, past
the DMA's 4 KiB saturation point [HARDWARE.md §2.5]) — and the matmul streams it block by block
with no transpose and no cast on the way in (``tiling.weights``). A use of W by anything else
(a tied embedding's gather) keeps W as it is.

Which placeholders are constants is the caller's knowledge (``lower_graph(constants=)``):
torch.compile's inference graphs (parameters and buffers, which dynamo marks as static inputs),
``hwsim export``'s parameters and buffers, and the graph's own tensor constants. Training graphs
have none: their weights change every step. The host does the preparation whenever the program
is bound to values (``InputBinding.prepared``), so a changed parameter is never stale; the
simulated program does not pay for it, as the compiled NEFF does not.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from hwsim.bridge.values import PreparedLayout

__all__ = ["PreparedLayout", "PreparedWeight", "prepare_constants"]

aten = torch.ops.aten

#: ``gm.meta`` key under which ``lower_graph`` lists the names of constant placeholders.
CONSTANTS_KEY = "hwsim_constants"

_TRANSPOSES = (aten.permute.default, aten.t.default, aten.transpose.int)
_FLATTENS = (aten.view.default, aten.reshape.default, aten._unsafe_view.default)


class PreparedWeight:
    """Target of a node standing for constant W prepared for a matmul: ``transposed`` says the
    matmul reads Wᵀ. Called on W (graph interpretation) it is that view."""

    __name__ = "prepared_weight"

    def __init__(self, transposed: bool, flattened: bool = False) -> None:
        self.transposed = transposed
        #: W is a contiguous N-D weight (a patch convolution's [co, ci, kh, kw]) the matmul
        #: reads as its [co, ci*kh*kw] matrix (``passes.patch_conv``).
        self.flattened = flattened

    def __call__(self, weight: torch.Tensor) -> torch.Tensor:
        if self.flattened:
            weight = weight.reshape(weight.shape[0], -1)
        return weight.t() if self.transposed else weight

    def __repr__(self) -> str:
        return f"prepared_weight(transposed={self.transposed}, flattened={self.flattened})"


def _moving_operand_of(user: fx.Node, value: fx.Node) -> bool:
    """Whether ``user`` reads ``value`` only as the moving operand b of mm/addmm."""
    positions: dict[Any, int] = {aten.mm.default: 1, aten.addmm.default: 2}
    position = positions.get(user.target)
    if position is None or len(user.args) <= position or user.args[position] is not value:
        return False
    return all(a is not value for i, a in enumerate(user.args) if i != position) and not any(
        v is value for v in user.kwargs.values()
    )


def _is_transpose(node: fx.Node) -> bool:
    if node.op != "call_function" or node.target not in _TRANSPOSES:
        return False
    if node.target is aten.permute.default:
        return list(node.args[1]) == [1, 0]  # type: ignore[arg-type]
    if node.target is aten.transpose.int:
        return sorted(int(d) % 2 for d in node.args[1:3]) == [0, 1]  # type: ignore[arg-type]
    return True


def _two_d(node: fx.Node) -> bool:
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and value.ndim == 2 and value.is_floating_point()


def _flattening_view(node: fx.Node, weight: fx.Node) -> bool:
    """Whether ``node`` views contiguous N-D ``weight`` as its [dim 0, rest] matrix (a patch
    convolution's weight, ``passes.patch_conv``)."""
    if node.op != "call_function" or node.target not in _FLATTENS or node.args[0] is not weight:
        return False
    source, value = weight.meta.get("val"), node.meta.get("val")
    if not (isinstance(source, torch.Tensor) and source.is_contiguous() and _two_d(node)):
        return False
    assert isinstance(value, torch.Tensor)  # _two_d
    return tuple(value.shape) == (source.shape[0], source.numel() // max(1, source.shape[0]))


def _prepare_uses(graph: fx.Graph, weight: fx.Node, matrix: fx.Node, flattened: bool) -> int:
    """Prepare every matmul use of ``matrix`` (``weight`` itself, or its flattening view)."""
    prepared = 0
    for user in list(matrix.users):
        if _moving_operand_of(user, matrix):
            _replace_use(graph, weight, user, matrix, transposed=False, flattened=flattened)
            prepared += 1
        elif (
            _is_transpose(user)
            and user.users
            and all(_moving_operand_of(u, user) for u in user.users)
        ):
            for matmul in list(user.users):
                _replace_use(graph, weight, matmul, user, transposed=True, flattened=flattened)
                prepared += 1
            graph.erase_node(user)
    return prepared


def prepare_constants(gm: fx.GraphModule) -> dict[str, int]:
    """Mark each matmul weight use of a constant (module docstring)."""
    constants = set(gm.meta.get(CONSTANTS_KEY, ()))
    graph = gm.graph
    prepared = 0
    for node in list(graph.nodes):
        is_constant = (node.op == "placeholder" and node.name in constants) or node.op == "get_attr"
        if not is_constant:
            continue
        if _two_d(node):
            prepared += _prepare_uses(graph, node, node, flattened=False)
            continue
        for view in [u for u in node.users if _flattening_view(u, node)]:
            prepared += _prepare_uses(graph, node, view, flattened=True)
            if not view.users:
                graph.erase_node(view)
    return {"prepared_uses": prepared}


def _replace_use(
    graph: fx.Graph,
    weight: fx.Node,
    matmul: fx.Node,
    old: fx.Node,
    *,
    transposed: bool,
    flattened: bool,
) -> None:
    """Make ``matmul`` read a new PreparedWeight node over ``weight`` where it read ``old``."""
    with graph.inserting_before(matmul):
        node = graph.call_function(PreparedWeight(transposed, flattened), (weight,))
    node.meta = dict(old.meta)
    matmul.replace_input_with(old, node)
