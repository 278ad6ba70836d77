"""Lowered graphs cached by graph hash (bridge.lowering_cache): a graph compiled again is not
lowered again, and what the hash leaves out (the weights' values) is bound on every call."""

from __future__ import annotations

import torch

from hwsim.bridge.lowering_cache import LOWERED

OPTIONS = {"config": "tiny", "fallback": "error"}


def _compile_and_run(model: torch.nn.Module, x: torch.Tensor, options=OPTIONS) -> torch.Tensor:
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="hwsim", options=options)
    with torch.no_grad():
        return compiled(x)


def _mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))


def test_a_graph_compiled_again_is_not_lowered_again_and_takes_its_own_weights():
    x = torch.randn(4, 32)
    first, second = _mlp(0).eval(), _mlp(1).eval()
    _compile_and_run(first, x)
    assert (LOWERED.hits, LOWERED.misses) == (0, 1)
    got = _compile_and_run(second, x)  # same graph, other weights: the program is reused
    assert (LOWERED.hits, LOWERED.misses) == (1, 1)
    with torch.no_grad():
        expected = second(x)
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)  # matmult/bf16
    assert not torch.allclose(expected, first(x).detach())  # the weights did differ


def test_another_layout_or_option_is_lowered_anew():
    model = _mlp(0).eval()
    _compile_and_run(model, torch.randn(4, 32))
    _compile_and_run(model, torch.randn(8, 32))
    _compile_and_run(model, torch.randn(4, 32), {**OPTIONS, "auto_cast": "none"})
    assert (LOWERED.hits, LOWERED.misses) == (0, 3)


def test_constants_are_digested_inside_a_fake_mode():
    """aot_autograd may call the compiler inside its fake mode (a generation step with a dynamic
    cache did): reading a real constant there raised "Please convert all Tensors to FakeTensors"."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from hwsim.bridge.lowering_cache import _constant_digest

    module = torch.nn.Module()
    module.register_buffer("empty", torch.tensor([]))
    module.register_buffer("ones", torch.ones(3))
    graph = torch.fx.Graph()
    graph.output((graph.get_attr("empty"), graph.get_attr("ones")))
    gm = torch.fx.GraphModule(module, graph)
    outside = _constant_digest(gm)
    with FakeTensorMode():
        inside = _constant_digest(gm)
    assert inside == outside and len(outside) == 2
