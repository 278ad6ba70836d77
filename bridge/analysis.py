"""``analyze(model, *inputs)``: the op-support table of a model before anything runs.

Traces the model with FakeTensors (no compute) into Core ATen with the same decompositions as the
``torch.compile`` path, then asks ``check_support`` about every node; nothing is lowered or
simulated. Parameters and buffers are traced as inputs, so a module needs no real forward pass.
The trace follows Python straight through (make_fx), so it shows what the ops need, not where
dynamo would break the graph.
"""

from __future__ import annotations

from typing import Any

import torch
from rich.console import Console

from hwsim.bridge.partition import analyze as analyze_graph
from hwsim.bridge.partition import op_record
from hwsim.bridge.report import Report


def trace_core_aten(
    model: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any] | None = None
) -> torch.fx.GraphModule:
    """``model(*inputs, **kwargs)`` as a Core ATen FX graph with FakeTensor metadata on every
    node (tensors among ``kwargs`` are traced as inputs too)."""
    kwargs = dict(kwargs or {})
    names = [k for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    tensors = tuple(kwargs.pop(k) for k in names)
    count = len(inputs)
    from torch.fx.experimental.proxy_tensor import make_fx

    from hwsim.bridge.decompositions import decomposition_table

    if isinstance(model, torch.nn.Module):
        state = {**dict(model.named_parameters()), **dict(model.named_buffers())}

        def call(state: dict[str, Any], *args: Any) -> Any:
            named = {**kwargs, **dict(zip(names, args[count:], strict=True))}
            return torch.func.functional_call(model, state, args[:count], named)

        traced_args: tuple[Any, ...] = (state, *inputs, *tensors)
    else:

        def call(*args: Any) -> Any:  # type: ignore[misc]
            named = {**kwargs, **dict(zip(names, args[count:], strict=True))}
            return model(*args[:count], **named)

        traced_args = (*inputs, *tensors)
    decompositions: Any = decomposition_table()
    with torch.no_grad():
        return make_fx(call, decomposition_table=decompositions, tracing_mode="fake")(*traced_args)


def analyze(
    model: Any,
    *inputs: Any,
    show: bool = True,
    console: Console | None = None,
    kwargs: dict[str, Any] | None = None,
) -> Report:
    """Which ops of ``model(*inputs, **kwargs)`` would run on the simulator and which on the CPU
    (and why). Prints the table when ``show``; returns the report (mode 'analyze')."""
    graph = trace_core_aten(model, inputs, kwargs)
    report = Report("analyze", "-", {}, "-")
    for node, verdict in analyze_graph(graph.graph).items():
        if verdict.op != "getitem":
            report.add(op_record(node, verdict))
    if show:
        report.print(console)
    return report
