"""Putting a fused group into the graph: one call node in the place of its members.

Every fusion pass (elementwise chains, rows, attention, MLPs, ...) ends the same way: a node
calling the group's kernel goes in after the group's last member, takes over that member's
metadata and its users, and records which graph nodes it stands for (``meta["fused_nodes"]``,
read by the report); the pass then erases the members. Which nodes are the graph's outputs
decides what a group may swallow (a graph output's value must still be made).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import fx
from torch.utils import _pytree as pytree


def graph_outputs(gm: fx.GraphModule) -> set[fx.Node]:
    """The nodes whose values the graph returns."""
    outputs: set[fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op == "output":
            outputs |= {n for n in pytree.tree_leaves(node.args[0]) if isinstance(n, fx.Node)}
    return outputs


def insert_fused(
    gm: fx.GraphModule, kernel: Any, args: Sequence[Any], last: fx.Node, nodes: Sequence[str]
) -> fx.Node:
    """A node calling ``kernel`` on ``args``, after ``last`` (the group's last member) and in
    its place for every user; ``nodes``: the graph nodes the group stands for. The caller
    erases the members."""
    with gm.graph.inserting_after(last):
        fused = gm.graph.call_function(kernel, tuple(args))
    fused.meta = dict(last.meta)
    fused.meta["fused_nodes"] = list(nodes)
    last.replace_all_uses_with(fused)
    return fused
