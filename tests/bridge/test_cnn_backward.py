"""A CNN's backward on the simulator: ``convolution_backward``,
``max_pool2d_with_indices_backward`` and ``_adaptive_avg_pool2d_backward`` decomposed
(``bridge/cnn_backward_decompositions.py``), each against torch's own kernel, and a ResNet's
training step (batch norm in train mode) with 0 CPU ops and eager's gradients."""

from __future__ import annotations

import copy

import pytest
import torch
import torch._dynamo

from hwsim import bridge
from hwsim.bridge.cnn_backward_decompositions import (
    adaptive_avg_pool2d_backward,
    convolution_backward,
    max_pool2d_with_indices_backward,
)
from hwsim.bridge.models import tiny_resnet
from hwsim.bridge.precision import TOLERANCES, compare

aten = torch.ops.aten
FP32 = TOLERANCES["fp32"]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# (input shape, out channels, kernel, stride, padding, dilation, groups)
CONVS = {
    "3x3-same": ((2, 3, 16, 16), 16, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    "3x3-stride2": ((2, 16, 16, 16), 40, (3, 3), (2, 2), (1, 1), (1, 1), 1),
    "1x1-stride2": ((2, 16, 16, 16), 40, (1, 1), (2, 2), (0, 0), (1, 1), 1),
    "odd-sizes-dilated-grouped": ((1, 4, 9, 11), 6, (3, 3), (2, 2), (2, 2), (2, 2), 2),
    "stride3-depthwise": ((2, 6, 7, 8), 6, (3, 3), (3, 3), (0, 0), (1, 1), 6),
    "padding-past-the-kernel": ((1, 2, 5, 5), 4, (2, 2), (1, 1), (4, 4), (1, 1), 1),
    "rectangular": ((2, 4, 10, 10), 8, (3, 2), (2, 1), (1, 0), (1, 2), 4),
}


@pytest.mark.parametrize("name", CONVS)
def test_convolution_backward_matches_torch(name):
    shape, c_out, kernel, stride, padding, dilation, groups = CONVS[name]
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=generator)
    w = torch.randn(c_out, shape[1] // groups, *kernel, generator=generator)
    y = aten.convolution(x, w, None, stride, padding, dilation, False, [0, 0], groups)
    grad = torch.randn(y.shape, generator=generator)
    args = (grad, x, w, [c_out], stride, padding, dilation, False, [0, 0], groups)
    want = aten.convolution_backward(*args, [True, True, True])
    got = convolution_backward(*args, [True, True, True])
    for which, g, e in zip(("input", "weight", "bias"), got, want, strict=True):
        assert g.shape == e.shape, which
        assert compare(g, e, FP32).ok, (which, compare(g, e, FP32).max_abs)
    grad_input, grad_weight, grad_bias = convolution_backward(*args, [False, True, False])
    assert grad_input is None and grad_bias is None and grad_weight is not None


def test_conv1d_backward_matches_torch():
    generator = torch.Generator().manual_seed(2)
    x, w = torch.randn(2, 4, 13, generator=generator), torch.randn(6, 2, 3, generator=generator)
    y = aten.convolution(x, w, None, [2], [1], [2], False, [0], 2)
    args = (torch.randn(y.shape, generator=generator), x, w, None, [2], [1], [2], False, [0], 2)
    want = aten.convolution_backward(*args, [True, True, False])
    got = convolution_backward(*args, [True, True, False])
    for g, e in zip(got[:2], want[:2], strict=True):
        assert compare(g, e, FP32).ok


def test_transposed_and_3d_convolutions_are_left_to_the_fallback_policy():
    x, w = torch.randn(1, 2, 4, 4), torch.randn(2, 3, 3, 3)
    grad = torch.randn(1, 3, 6, 6)
    mask = [True, True, False]
    args = (grad, x, w, None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1, mask)
    assert convolution_backward(*args) is NotImplemented
    x3, w3 = torch.randn(1, 2, 4, 4, 4), torch.randn(3, 2, 3, 3, 3)
    grad3 = torch.randn(1, 3, 2, 2, 2)
    args3 = (grad3, x3, w3, None, [1] * 3, [0] * 3, [1] * 3, False, [0] * 3, 1, mask)
    assert convolution_backward(*args3) is NotImplemented


@pytest.mark.parametrize(
    "kernel,stride,padding,ceil_mode",
    [(3, 2, 1, False), (2, 2, 0, False), (3, 1, 1, False), (3, 2, 1, True)],
)
def test_max_pool2d_backward_matches_torch(kernel, stride, padding, ceil_mode):
    """Overlapping windows (stride < kernel) pick some elements twice: their gradients add."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 9, 10, generator=generator)
    pool = ([kernel] * 2, [stride] * 2, [padding] * 2, [1, 1], ceil_mode)
    y, indices = aten.max_pool2d_with_indices(x, *pool)
    grad = torch.randn(y.shape, generator=generator)
    want = aten.max_pool2d_with_indices_backward(grad, x, *pool, indices)
    got = max_pool2d_with_indices_backward(grad, x, *pool, indices)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("output_size", [(1, 1), (3, 5), (9, 10)])
def test_adaptive_avg_pool2d_backward_matches_torch_when_the_sizes_divide(output_size):
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 9, 10, generator=generator)
    grad = torch.randn(2, 3, *output_size, generator=generator)
    want = aten._adaptive_avg_pool2d_backward(grad, x)
    torch.testing.assert_close(adaptive_avg_pool2d_backward(grad, x), want, rtol=1e-6, atol=1e-7)


def test_uneven_adaptive_avg_pool2d_backward_is_left_to_the_fallback_policy():
    x, grad = torch.randn(1, 2, 4, 4), torch.randn(1, 2, 3, 3)
    assert adaptive_avg_pool2d_backward(grad, x) is NotImplemented


# ---- on the simulator -----------------------------------------------------------------------


def _loss(model: torch.nn.Module) -> torch.Tensor:
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(4))
    return model(x).square().mean()


def test_resnet_training_backward_runs_on_the_simulator_with_eager_gradients():
    """tiny_resnet in train mode (batch statistics): its backward has convolution_backward
    (stride 1 and 2, 3x3 and 1x1), max pool and adaptive average pool backward, and batch norm
    backward; under fallback='error' all of it lowers and every gradient equals eager's."""
    model = tiny_resnet().train()
    reference = copy.deepcopy(model)
    _loss(reference).backward()
    compiled = torch.compile(
        model, backend="hwsim", options={"fallback": "error", "auto_cast": "none"}
    )
    _loss(compiled).backward()
    report = bridge.last_report()
    assert report.fallbacks() == []
    assert {g["kind"] for g in report.graphs} == {"forward", "backward"}
    assert all(g["cpu"] == 0 for g in report.graphs)
    backward = [g["graph"] for g in report.graphs if g["kind"] == "backward"]
    assert {r["graph"] for r in report.runs} >= set(backward)  # simulated, not run on the CPU
    ops = {r.op for r in report.ops if r.phase == "backward"}
    assert {"aten.convolution.default", "aten.eq.Tensor"} <= ops
    assert report.phase_times()["backward"] > 0
    expected = dict(reference.named_parameters())
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert len(grads) == len(expected) > 10
    wrong = {
        n: None if g is None else compare(g, expected[n].grad, FP32).max_abs
        for n, g in grads.items()
        if g is None or not compare(g, expected[n].grad, FP32).ok
    }
    assert not wrong, f"gradients differ from eager: {wrong}"
    assert report.numerics_ok


def _strided_net(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = torch.nn.functional.conv2d(x, w, stride=2, padding=2, dilation=2, groups=2)
    y = torch.nn.functional.max_pool2d(y, 3, stride=2, padding=1, ceil_mode=True)
    return y.square().sum()


def test_grouped_dilated_conv_and_ceil_mode_pool_backward_on_the_simulator():
    """Odd sizes, stride 2, dilation 2, 2 groups, a ceil-mode pool: the decomposed backward's
    convolutions (a 6x7-tap grad_weight kernel, a zero-stuffed grad_output) all lower."""
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(2, 4, 11, 13, generator=generator, requires_grad=True)
    w = torch.randn(6, 2, 3, 3, generator=generator, requires_grad=True)
    compiled = torch.compile(
        _strided_net, backend="hwsim", options={"fallback": "error", "auto_cast": "none"}
    )
    compiled(x, w).backward()
    assert bridge.last_report().fallbacks() == []
    x_ref, w_ref = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    _strided_net(x_ref, w_ref).backward()
    for got, want in ((x.grad, x_ref.grad), (w.grad, w_ref.grad)):
        assert compare(got, want, FP32).ok, compare(got, want, FP32).max_abs
