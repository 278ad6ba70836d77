"""Batch norm (eval and training forward) and a ResNet basic block end to end: conv3x3 -> BN ->
ReLU -> conv3x3 -> BN, + identity or a 1x1 stride-2 conv + BN downsample, ReLU, behind a stem
conv + max pool and in front of adaptive average pool + Linear, through
torch.compile(backend="hwsim") with fallback='error' on the tiny config."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch import nn

import bridge
from bridge.errors import Unsupported
from bridge.precision import TOLERANCES, compare
from bridge.registry import OpCall, check_support
from tests.bridge.helpers import check_op

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


class BasicBlock(nn.Module):
    """torchvision's BasicBlock, written out (torchvision is not a dependency)."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + identity)


class TinyResNet(nn.Module):
    """Stem conv + BN + ReLU + max pool, an identity block, a stride-2 block (40 channels: more
    than tiny's 32 partitions), adaptive average pool, Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.block1 = BasicBlock(16, 16, 1)
        self.block2 = BasicBlock(16, 40, 2)
        self.head = nn.Linear(40, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.bn(self.stem(x))))
        x = self.block2(self.block1(x))
        return self.head(F.adaptive_avg_pool2d(x, (1, 1)).flatten(1))


def tiny_resnet() -> nn.Module:
    torch.manual_seed(0)
    model = TinyResNet()
    for module in model.modules():  # statistics a trained model would have, not 0 and 1
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 1.5)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.uniform_(-0.5, 0.5)
    return model.eval()


def test_resnet_basic_blocks_run_entirely_on_the_simulator():
    torch._dynamo.reset()
    model = tiny_resnet()
    x = torch.randn(2, 3, 15, 15, generator=torch.Generator().manual_seed(1))
    options = {"config": "tiny", "fallback": "error"}
    with torch.no_grad():
        expected = model(x)
        got = torch.compile(model, backend="hwsim", options=options)(x)
    torch._dynamo.reset()
    report = bridge.last_report()
    assert report.fallbacks() == []
    assert [g["cpu"] for g in report.graphs] == [0] * len(report.graphs)
    assert report.numerics_ok and report.runs[-1]["total_ns"] > 0
    assert compare(got, expected, TOLERANCES["fp32"]).ok
    ops = {r.op for r in report.lowered()}
    assert {
        "aten.convolution.default",
        "aten._native_batch_norm_legit_no_training.default",
        "aten.max_pool2d_with_indices.default",
    } <= ops
