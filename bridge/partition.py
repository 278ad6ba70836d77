"""Which nodes of a graph the simulator runs, and cutting the graph into simulator/CPU parts.

``analyze`` asks ``check_support`` about every ``call_function`` node (from its metadata, before
anything is lowered) and records the verdict. ``partition`` uses PyTorch's
``CapabilityBasedPartitioner``: maximal groups of supported nodes (that keep the graph acyclic)
become submodules ``fused_0``, ``fused_1``, … of the returned GraphModule; everything else stays
in the top-level graph and runs eagerly on the CPU. When every node is supported the graph is
returned whole, as a single part.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.utils import _pytree as pytree

from hwsim.bridge.errors import Unsupported, op_name
from hwsim.bridge.registry import OpCall, check_support
from hwsim.bridge.report import OpRecord


@dataclass(frozen=True)
class Verdict:
    """Whether a node can run on the simulator; ``unsupported`` says why not."""

    node: str
    op: str
    unsupported: Unsupported | None
    shapes: str

    @property
    def supported(self) -> bool:
        return self.unsupported is None


def op_record(node: fx.Node, verdict: Verdict, phase: str = "") -> OpRecord:
    """The report's record of a node: where it runs (and why not on the simulator), and, from
    the node's metadata, what a decomposition made it from, which torch code called it and from
    which module (``module_path``); ``phase``: its graph's kind (forward, backward, optimizer)."""
    problem = verdict.unsupported
    original = node.meta.get("original_aten")
    decomposed_from = ""
    if original is not None and op_name(original) != op_name(node.target):
        decomposed_from = op_name(original)
    stack = node.meta.get("source_fn_stack") or []
    source = str(getattr(stack[-1][1], "__name__", stack[-1][1])) if stack else ""
    return OpRecord(
        verdict.node,
        verdict.op,
        "simulator" if problem is None else "cpu",
        "" if problem is None else problem.reason.value,
        "" if problem is None else problem.detail,
        verdict.shapes,
        decomposed_from=decomposed_from,
        source=source,
        phase=phase,
        module=module_path(node),
    )


_ROOT = re.compile(r"^L\[['\"][^'\"]+['\"]\]")
_INDEX = re.compile(r"\[(\d+)\]")
_KEYED = re.compile(r"(?:\._modules)?\[['\"]([^'\"]+)['\"]\]")


def module_path(node: fx.Node) -> str:
    """The innermost module that ran the node, as a dotted path from the compiled model
    (``transformer.h.0.attn``): from dynamo's ``nn_module_stack`` (forward nodes) or the
    forward node's stack AOTAutograd copies onto backward nodes (``fwd_nn_module_stack``)."""
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}
    if not stack:
        return ""
    path = _ROOT.sub("", str(list(stack.values())[-1][0]))  # L['self'].h[0] -> .h[0]
    path = _KEYED.sub(lambda m: "." + m.group(1), _INDEX.sub(lambda m: "." + m.group(1), path))
    return path.strip(".")


def node_call(node: fx.Node) -> OpCall:
    """The node as a support check sees it (tensors are their ``meta['val']``)."""
    args, kwargs = pytree.tree_map_only(
        fx.Node, lambda n: n.meta.get("val"), (node.args, node.kwargs)
    )
    return OpCall(node.target, tuple(args), dict(kwargs), node.meta.get("val"))


def shapes_of(call: OpCall) -> str:
    return " x ".join(str(list(t.shape)) for t in call.input_tensors())


def analyze(graph: fx.Graph) -> dict[fx.Node, Verdict]:
    """A verdict for every ``call_function`` node (getitem follows its producer)."""
    verdicts: dict[fx.Node, Verdict] = {}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        call = node_call(node)
        if node.target is operator.getitem and isinstance(node.args[0], fx.Node):
            source = verdicts.get(node.args[0])
            problem = source.unsupported if source is not None else None
            verdicts[node] = Verdict(node.name, "getitem", problem, "")
            continue
        try:
            check_support(call)
            problem = None
        except Unsupported as error:
            problem = error
        verdicts[node] = Verdict(node.name, op_name(node.target), problem, shapes_of(call))
    return verdicts


class _Support(OperatorSupportBase):
    def __init__(self, verdicts: Mapping[fx.Node, Verdict]) -> None:
        self.verdicts = verdicts

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: fx.Node) -> bool:
        verdict = self.verdicts.get(node)
        return verdict is not None and verdict.supported


def partition(gm: fx.GraphModule, verdicts: Mapping[fx.Node, Verdict]) -> fx.GraphModule:
    """``gm`` with maximal supported subgraphs fused into ``fused_<n>`` submodules."""
    partitioner = CapabilityBasedPartitioner(
        gm, _Support(verdicts), allows_single_node_partition=True
    )
    return partitioner.partition_and_fuse(prefix="fused_")
