"""A compiled graph's run reads its inputs where ``bind`` put them (views of the model's
parameters and of the call's inputs, weights prepared for the call) instead of copying them
into the simulator's HBM: the model's tensors are left as they were, and the results are those
of a run that copies them."""

from __future__ import annotations

import numpy as np
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from hwsim.bridge.graph_lowering import lower_graph
from hwsim.bridge.precision import Precision
from hwsim.machine import state
from hwsim.machine.simulator import run


def _mlp(x, w1, b1, w2, b2):
    hidden = torch.nn.functional.gelu(torch.nn.functional.linear(x, w1, b1))
    return torch.nn.functional.linear(hidden, w2, b2)


def _lowered():
    """The MLP lowered with its weights and biases as constants (prepared weights), at bf16."""
    g = torch.Generator().manual_seed(0)
    shapes = [(8, 64), (96, 64), (96,), (32, 96), (32,)]
    args = [torch.randn(shape, generator=g) for shape in shapes]
    graph = make_fx(_mlp)(*args)
    names = [n.name for n in graph.graph.nodes if n.op == "placeholder"]
    precision = Precision("matmult", "bf16")
    lowered = lower_graph(graph, args, config="tiny", precision=precision, constants=names[1:])
    return lowered, args


def test_inputs_are_read_in_place_and_left_as_they_were(monkeypatch):
    lowered, args = _lowered()
    before = [a.clone() for a in args]
    added: dict[str, tuple[bool, np.ndarray | None]] = {}
    real_add = state.Hbm.add

    def spying_add(self, name, shape, dtype, values=None, stack=0, **options):
        tensor = real_add(self, name, shape, dtype, values, stack, **options)
        if values is not None:
            added[name] = (options.get("read_in_place", False), tensor.data)
        return tensor

    monkeypatch.setattr(state.Hbm, "add", spying_add)
    got = lowered.run(args)
    inputs = {b.name for b in lowered.inputs}
    assert inputs and inputs <= set(added)
    assert all(added[name][0] for name in inputs)  # every input read in place
    assert not any(added[name][1].flags.writeable for name in inputs)
    x_data = added[lowered.inputs[0].name][1]
    assert np.shares_memory(x_data, args[0].numpy())  # the caller's own memory, not a copy
    for arg, was in zip(args, before, strict=True):
        assert torch.equal(arg, was)
    assert any(b.prepared is not None for b in lowered.inputs)  # prepared weights among them

    # the same program run with copies of its inputs: the same bits and ticks
    monkeypatch.setattr(state.Hbm, "add", real_add)
    lowered.bind(args, copy=True)
    copied = run(lowered.program, lowered.config)
    [name] = [o.name for o in lowered.outputs]
    out = got.outputs[0] if isinstance(got.outputs, (tuple, list)) else got.outputs
    assert np.array_equal(out.reshape(-1).numpy(), copied.outputs[name].reshape(-1)[: out.numel()])
    assert got.result.summary.total_ns == copied.summary.total_ns
