"""Batch norm (eval and training forward) and a ResNet basic block end to end: conv3x3 -> BN ->
ReLU -> conv3x3 -> BN, + identity or a 1x1 stride-2 conv + BN downsample, ReLU, behind a stem
conv + max pool and in front of adaptive average pool + Linear, through
torch.compile(backend="hwsim") with fallback='error' on the tiny config."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from hwsim import bridge
from hwsim.bridge.errors import Unsupported
from hwsim.bridge.models import tiny_resnet
from hwsim.bridge.registry import OpCall, check_support
from tests.bridge.helpers import check_op, eager_stats

aten = torch.ops.aten


def test_registry_admits_empty_outputs_next_to_real_ones():
    x, stat = torch.empty(2, 3, 4, 4), torch.empty(3)
    args = (x, stat, stat, stat, stat, 0.1, 1e-5)
    out = (x, torch.empty(0), torch.empty(0))
    check_support(OpCall(aten._native_batch_norm_legit_no_training.default, args, {}, out))
    with pytest.raises(Unsupported, match="empty"):  # but an op with only empty outputs is not
        empty = torch.empty(0)
        check_support(OpCall(aten.relu.default, (empty,), {}, empty))


def bn_eval(affine: bool, eps: float = 1e-5):
    def fn(x, w, b, mean, var):
        weight, bias = (w, b) if affine else (None, None)
        out = aten._native_batch_norm_legit_no_training(x, weight, bias, mean, var, 0.1, eps)
        return out[0]

    return fn


@pytest.mark.parametrize(
    "shape, affine", [((2, 40, 5, 7), True), ((3, 5, 4), False), ((4, 6), True)], ids=str
)
def test_batch_norm_eval(shape, affine):
    c = shape[1]
    var = torch.rand(c, generator=torch.Generator().manual_seed(3)) + 0.1
    check_op(bn_eval(affine), [shape, (c,), (c,), (c,), var])


def test_batch_norm_eval_bf16():
    var = torch.rand(6, generator=torch.Generator().manual_seed(3)).bfloat16() + 0.1
    check_op(bn_eval(True), [(2, 6, 5, 5), (6,), (6,), (6,), var], torch.bfloat16)


@pytest.mark.parametrize("shape", [(2, 40, 5, 7), (4, 3, 30, 30)], ids=str)
def test_batch_norm_training_forward_all_outputs(shape):
    """out, save_mean, save_invstd and both updated running statistics."""
    c = shape[1]

    def fn(x, w, b, mean, var):
        return aten._native_batch_norm_legit_functional(x, w, b, mean, var, True, 0.1, 1e-5)

    var = torch.rand(c, generator=torch.Generator().manual_seed(3)) + 0.1
    check_op(fn, [shape, (c,), (c,), (c,), var])


def test_resnet_basic_blocks_run_entirely_on_the_simulator():
    torch._dynamo.reset()
    model = tiny_resnet()
    x = torch.randn(2, 3, 15, 15, generator=torch.Generator().manual_seed(1))
    options = {"config": "tiny", "fallback": "error"}
    with torch.no_grad():
        got = torch.compile(model, backend="hwsim", options=options)(x)
    torch._dynamo.reset()
    report = bridge.last_report()
    assert report.fallbacks() == []
    assert [g["cpu"] for g in report.graphs] == [0] * len(report.graphs)
    assert report.numerics_ok and report.runs[-1]["total_ns"] > 0
    assert eager_stats(got, lambda: model(x)).ok  # with the default auto-cast's rounding
    ops = {r.op for r in report.lowered()}
    assert {
        "aten.convolution.default",
        "aten._native_batch_norm_legit_no_training.default",
        "aten.max_pool2d_with_indices.default",
    } <= ops
