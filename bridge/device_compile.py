"""torch.compile on the ``hwsim`` device: a graph whose inputs are hwsim tensors.

Dynamo and AOTAutograd see through ``HwsimTensor`` (a traceable subclass): the graph AOTAutograd
traces, and the backend lowers, is over the host tensors, plain CPU tensors. What remains of the
device in dynamo's graph are factory calls naming it (``torch.arange(n, device=x.device)``
becomes ``arange(..., device=hwsim:0)``): ``on_device`` rewrites them to the CPU, where the host
tensors are, so the traced program has one device. The outputs dynamo's graph has on the device
come back as hwsim tensors (AOTAutograd wraps those computed from hwsim inputs; the wrapper made
here wraps those computed from factories alone). Autocast regions keep naming ``hwsim``: the
device's autocast kernels cast the hwsim tensors while AOTAutograd traces.

The compiled program's simulated time is in the compile report (``bridge.last_report()``); host
tensors are already in simulated HBM, so a compiled call records no transfer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx
from torch.utils import _pytree as pytree

from hwsim.bridge.device_tensor import BACKEND, HwsimTensor

_PREPARED = "hwsim_device_graph"


def on_device(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> list[bool] | None:
    """For a graph with inputs on the device (not yet prepared): rewrite its device arguments
    to the CPU, in place, and return, per output, whether it is on the device. None for other
    graphs."""
    if gm.meta.get(_PREPARED) or not any(isinstance(x, HwsimTensor) for x in example_inputs):
        return None
    gm.meta[_PREPARED] = True
    outputs = [_on_device_value(v) for v in _output_values(gm)]
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method") and not _is_autocast(node):
            node.args = _to_cpu(node.args)
            node.kwargs = _to_cpu_kwargs(node)
    gm.recompile()
    return outputs


def keep_on_device(compiled: Callable[..., Any], on_device: list[bool]) -> Callable[..., Any]:
    """``compiled`` with its outputs that belong on the device wrapped as hwsim tensors."""

    def run(*args: Any) -> Any:
        outputs = compiled(*args)
        leaves, spec = pytree.tree_flatten(outputs)
        if len(leaves) == len(on_device):
            leaves = [
                HwsimTensor(x) if device and _plain(x) else x
                for x, device in zip(leaves, on_device, strict=True)
            ]
        return pytree.tree_unflatten(leaves, spec)

    return run


def _plain(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and not isinstance(value, HwsimTensor)


def _output_values(gm: fx.GraphModule) -> list[Any]:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    values = []
    for arg in pytree.tree_leaves(output.args):
        if isinstance(arg, fx.Node):
            values.append(arg.meta.get("example_value"))
        else:
            values.append(arg)
    return values


def _on_device_value(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == BACKEND


def _is_autocast(node: fx.Node) -> bool:
    """``torch.amp`` enter/exit calls: their device stays ``hwsim``."""
    module = getattr(node.target, "__module__", "") or ""
    return module.startswith("torch.amp") or "autocast" in str(node.target)


def _to_cpu(value: Any) -> Any:
    def cpu(v: Any) -> Any:
        if isinstance(v, torch.device) and v.type == BACKEND:
            return torch.device("cpu")
        return v

    return pytree.tree_map(cpu, value)


def _to_cpu_kwargs(node: fx.Node) -> dict[str, Any]:
    """Keyword ``device=`` given as a string too (``device="hwsim"``); positional strings only
    in ``.to(...)`` calls (other string arguments are not devices)."""
    kwargs = dict(_to_cpu(node.kwargs))
    device = kwargs.get("device")
    if isinstance(device, str) and torch.device(device).type == BACKEND:
        kwargs["device"] = torch.device("cpu")
    if node.target == "to" or node.target is torch.Tensor.to:
        node.args = tuple(
            torch.device("cpu") if isinstance(a, str) and a.split(":")[0] == BACKEND else a
            for a in node.args
        )
    return kwargs
