"""The conv + batch norm (+ ReLU) pass (bridge.passes.conv_bn): the eval batch norm and the ReLU
applied on the convolution's PSUM evacuation."""

from __future__ import annotations

import torch
from torch import nn

from hwsim.bridge.context import TilingOptions
from hwsim.bridge.export import _drop_unused_inputs, _export, _placeholder_values
from hwsim.bridge.graph_lowering import lower_graph
from hwsim.bridge.passes import PassSelection, run_pipeline
from hwsim.bridge.passes.conv_bn import ConvBnKernel
from hwsim.bridge.precision import Precision, compare
from hwsim.isa.origin import Origin, origin_of


class ConvBn(nn.Module):
    def __init__(self, bias: bool, channels: int = 200, returns_conv: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, channels, 3, 1, 1, bias=bias)
        self.bn = nn.BatchNorm2d(channels)
        self.returns_conv = returns_conv
        with torch.no_grad():  # statistics that make the fold visible
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-1, 1)

    def forward(self, x: torch.Tensor):
        c = self.conv(x)
        y = torch.relu(self.bn(c))
        return (y, c) if self.returns_conv else y


def _exported(model: nn.Module, x: torch.Tensor):
    exported = _export(model, (x,), {})
    graph = exported.graph_module
    return graph, _drop_unused_inputs(graph.graph, _placeholder_values(exported, (x,), {}))


def _kernels(graph, passes=("conv_bn",)):
    gm, _ = run_pipeline(graph, PassSelection.parse(list(passes)))
    return [n.target for n in gm.graph.nodes if isinstance(n.target, ConvBnKernel)]


def _run(model, x, passes):
    graph, examples = _exported(model, x)
    # one core's HBM traffic (LNC=2 would split the unfused relu: its second core's reads count)
    options = TilingOptions(lnc=1)
    lowered = lower_graph(graph, examples, config="trn2", passes=passes, options=options)
    run = lowered.run(examples)
    want = model(x)
    want = want if isinstance(want, tuple) else (want,)
    got = run.outputs if isinstance(run.outputs, (tuple, list)) else (run.outputs,)
    for g, w in zip(got, want, strict=True):
        ok = compare(g, w, Precision().tolerance(torch.float32))
        assert ok.ok, ok
    return lowered, run


def test_conv_bn_relu_is_one_evacuation_and_saves_four_round_trips():
    """200 output channels (two blocks of 128 + 72) over [2, 3, 12, 12]: fused, the conv's
    output is written once; unfused it is also stored by the conv, loaded and stored by the
    batch norm and loaded by the ReLU, and nothing else changes: exactly 4 x its bytes more."""
    model, x = ConvBn(bias=False).eval(), torch.randn(2, 3, 12, 12)
    graph, _ = _exported(model, x)
    (kernel,) = _kernels(graph)
    assert kernel.relu and kernel.__name__ == "fused[conv_bn_relu]"
    _, on = _run(model, x, ["conv_bn"])
    _, off = _run(model, x, "none")
    out_bytes = 2 * 200 * 12 * 12 * 4
    assert off.result.summary.hbm_bytes - on.result.summary.hbm_bytes == 4 * out_bytes
    assert on.result.summary.total_ns < off.result.summary.total_ns
    origins = {origin_of(r.instruction.tag) for r in on.result.trace.instructions}
    members = ("convolution", "_native_batch_norm_legit_no_training", "getitem", "relu")
    assert origins == {Origin("fused[conv_bn_relu]", "+".join(members), members)}


def test_a_conv_bias_is_folded_into_the_shift():
    model, x = ConvBn(bias=True, channels=40).eval(), torch.randn(1, 3, 9, 9)
    graph, _ = _exported(model, x)
    assert len(_kernels(graph)) == 1
    _run(model, x, None)


def test_a_conv_output_that_is_also_returned_is_not_fused():
    model, x = ConvBn(bias=False, channels=16, returns_conv=True).eval(), torch.randn(1, 3, 8, 8)
    graph, _ = _exported(model, x)
    assert _kernels(graph) == []
    _run(model, x, None)


def test_batch_norm_used_twice_keeps_the_relu_outside():
    class Twice(ConvBn):
        def forward(self, x):
            y = self.bn(self.conv(x))
            return torch.relu(y) + y

    model, x = Twice(bias=False, channels=16).eval(), torch.randn(1, 3, 8, 8)
    graph, _ = _exported(model, x)
    (kernel,) = _kernels(graph)
    assert not kernel.relu and kernel.__name__ == "fused[conv_bn]"
    _run(model, x, None)
    assert _kernels(graph, passes=()) == []
