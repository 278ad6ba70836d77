"""Symbolic ints a graph uses as values, not as sizes: computed on the host, and fed to the
program as data, so one program serves every value.

A graph dynamo compiles with symbolic sizes is specialized to each concrete set of its int
inputs (``dynamo._PerShape``). Some of those ints are no size at all: a sliding-window KV cache
layer of ``transformers`` keeps its write count as a Python int, and the compiled forward
computes the token's positions from it (``arange(n) + s9``) and returns it plus one (``s9 + 1``).
Specializing on such an int lowers a new program per token for a value the program could read.

``value_ints(gm)`` finds them: int placeholders whose symbol is in no tensor's shape, strides or
offset anywhere in the graph, used only by Python int arithmetic (``HOST_INT_OPS``) and as the
``Tensor``-typed operand of ATen ops (``add.Tensor(arange, s9)``). ``ValueInts.rewrite`` gives
each int operand of a tensor op its own placeholder, a 0-d int64 tensor (type promotion treats a
0-d tensor as it treats a scalar, so results keep their dtypes); ``ValueInts.call`` computes,
for a call, those tensors and the int outputs on the host. The specialization key leaves the
value ints out. Anything else about an int (a shape, a view's size, an op that takes an int
argument) keeps it a specialization symbol.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

#: Int arithmetic that may run on the host (the ops dynamo records on SymInts).
HOST_INT_OPS = frozenset(
    {
        operator.add,
        operator.sub,
        operator.mul,
        operator.floordiv,
        operator.mod,
        operator.neg,
        torch.sym_max,
        torch.sym_min,
    }
)


@dataclass
class ValueInts:
    """The value ints of a graph and how to feed them.

    inputs: positions (among the placeholders) of the int inputs that are values;
    outputs: output position -> the host int node it returns;
    operands: host int nodes some tensor op reads, each given a tensor placeholder by
    ``rewrite`` (in this order, after the graph's own placeholders)."""

    inputs: frozenset[int] = frozenset()
    outputs: dict[int, fx.Node] = field(default_factory=dict)
    operands: list[fx.Node] = field(default_factory=list)
    placeholders: list[fx.Node] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.inputs)

    def rewrite(self, gm: fx.GraphModule) -> fx.GraphModule:
        """``gm`` with each operand int read from a new 0-d int64 placeholder (in place)."""
        if not self.operands:
            return gm
        host = _host_nodes(self)
        last = self.placeholders[-1]
        for i, node in enumerate(self.operands):
            with gm.graph.inserting_after(last):
                tensor = gm.graph.placeholder(f"value_int{i}")
            tensor.meta["val"] = torch.empty((), dtype=torch.int64)
            last = tensor
            for user in list(node.users):
                if user.op == "call_function" and user not in host:
                    user.replace_input_with(node, tensor)
        gm.graph.lint()
        gm.recompile()
        return gm

    def call(self, args: Sequence[Any]) -> tuple[list[torch.Tensor], dict[int, int]]:
        """For one call: the operand tensors (appended to the tensor inputs) and the int
        outputs by position."""
        env = {n: args[i] for i, n in enumerate(self.placeholders) if i in self.inputs}
        operands = [torch.tensor(_evaluate(n, env), dtype=torch.int64) for n in self.operands]
        return operands, {i: _evaluate(n, env) for i, n in self.outputs.items()}


def value_ints(gm: fx.GraphModule) -> ValueInts:
    """The value ints of ``gm`` (module docstring); empty (falsy) when there are none."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    sizes = _size_symbols(gm)
    host = {
        n
        for n in placeholders
        if isinstance(n.meta.get("val"), torch.SymInt) and not _symbols(n.meta["val"]) & sizes
    }
    while True:  # drop the ints with a use that is neither host arithmetic nor a tensor operand
        kept = {n for n in host if _value_only(n, host)}
        if kept == host:
            break
        host = kept
    if not host:
        return ValueInts(placeholders=placeholders)
    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    results = output.args[0] if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    outputs = {
        i: n for i, n in enumerate(results) if isinstance(n, fx.Node) and _computed_from(n, host)
    }
    operands = [
        n
        for n in gm.graph.nodes
        if _computed_from(n, host) and any(_tensor_operand_use(u, n) for u in n.users)
    ]
    positions = frozenset(i for i, n in enumerate(placeholders) if n in host)
    return ValueInts(positions, outputs, operands, placeholders)


def _host_nodes(values: ValueInts) -> set[fx.Node]:
    host = {values.placeholders[i] for i in values.inputs}
    graph = values.placeholders[0].graph
    return {n for n in graph.nodes if _computed_from(n, host)}


def _symbols(value: Any) -> set[Any]:
    if isinstance(value, torch.SymInt):
        return set(value.node.expr.free_symbols)
    return set()


def _size_symbols(gm: fx.GraphModule) -> set[Any]:
    """Every symbol in a tensor's shape, strides or storage offset, anywhere in ``gm``."""
    found: set[Any] = set()
    for node in gm.graph.nodes:
        value = node.meta.get("val")
        for t in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(t, torch.Tensor):
                for n in (*t.shape, *t.stride(), t.storage_offset()):
                    found |= _symbols(n)
    return found


def _value_only(node: fx.Node, host: set[fx.Node]) -> bool:
    """Every use of ``node`` is the output, host int arithmetic over host ints and constants
    (itself value-only), or a tensor op's Tensor-typed operand."""
    for user in node.users:
        if user.op == "output" or _tensor_operand_use(user, node):
            continue
        if not _computed_from(user, host) or not _value_only(user, host):
            return False
    return True


def _tensor_operand_use(user: fx.Node, value: fx.Node) -> bool:
    """``user`` is an ATen op that takes ``value`` only where its schema says Tensor."""
    if user.op != "call_function" or not isinstance(user.target, torch._ops.OpOverload):
        return False
    schema = user.target._schema.arguments
    positions = [i for i, a in enumerate(user.args) if a is value]
    if any(k for k, v in user.kwargs.items() if v is value) or not positions:
        return False
    return all(i < len(schema) and str(schema[i].type) == "Tensor" for i in positions)


def _computed_from(node: Any, host: set[fx.Node]) -> bool:
    """``node`` is a host int, or host arithmetic over host ints and constants."""
    if not isinstance(node, fx.Node):
        return isinstance(node, int)
    if node in host:
        return True
    if node.op != "call_function" or node.target not in HOST_INT_OPS:
        return False
    return all(_computed_from(a, host) for a in node.args)


def _evaluate(node: fx.Node, env: dict[fx.Node, int]) -> int:
    if node in env:
        return int(env[node])
    args = [_evaluate(a, env) if isinstance(a, fx.Node) else a for a in node.args]
    return int(node.target(*args))  # type: ignore[operator]
