"""Models on the ``hwsim`` device, where ``model.to("hwsim")`` and ``x.to("hwsim")`` are all that
changes: tiny GPT-2 and ResNet in eager mode and under torch.compile (outputs equal to CPU within
the fp32 tolerance), and an eager training step of an MLP."""

from __future__ import annotations

import copy

import pytest
import torch
import torch._dynamo
from torch import nn

from hwsim import bridge
from hwsim.bridge import device
from hwsim.bridge.device_session import TO_DEVICE, TO_HOST
from hwsim.bridge.device_tensor import HwsimTensor
from hwsim.bridge.models import tiny_gpt2, tiny_resnet, tokens
from hwsim.bridge.precision import TOLERANCES, compare
from tests.bridge.helpers import eager_stats

pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _gpt2():
    return tiny_gpt2(), {"input_ids": tokens(2, 16, seed=1), "use_cache": False}


def _resnet():
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    return tiny_resnet(), {"x": x}


def _output(result):
    return result.logits if hasattr(result, "logits") else result


def _on_device(kwargs):
    return {k: v.to("hwsim") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}


@pytest.mark.parametrize("build", [_gpt2, _resnet], ids=["gpt2", "resnet"])
def test_eager_on_the_device(build):
    model, kwargs = build()
    reference = copy.deepcopy(model)  # stays on the CPU
    report = device.configure("trn2", fallback="cpu")
    model.to("hwsim")
    with torch.no_grad():
        got = _output(model(**_on_device(kwargs)))
    assert isinstance(got, HwsimTensor)
    assert eager_stats(got.cpu(), lambda: _output(reference(**kwargs))).ok  # default auto-cast
    summary = device.summary()
    assert summary["simulator_ops"] > 20 and summary["ops_ns"] > 0 and report.numerics_ok
    state = [*model.parameters(), *model.buffers()]  # each once, tied weights included
    inputs = [v for v in kwargs.values() if isinstance(v, torch.Tensor)]
    assert summary["transfers"][TO_DEVICE]["count"] == len(state) + len(inputs)
    assert summary["transfers"][TO_HOST]["bytes"] >= got.numel() * 4
    assert summary["total_sim_ns"] == pytest.approx(report.total_sim_ns)
    # only mask building in transformers (tril) may run on the CPU; ResNet runs entirely
    assert {r.op for r in report.fallbacks()} <= {"aten.tril.default"}
    if build is _resnet:
        assert report.fallbacks() == []


@pytest.mark.parametrize("build", [_gpt2, _resnet], ids=["gpt2", "resnet"])
def test_compiled_on_the_device(build):
    model, kwargs = build()
    reference = copy.deepcopy(model)
    model.to("hwsim")
    device.configure("trn2")
    compiled = torch.compile(model, backend="hwsim", options={"fallback": "error"})
    with torch.no_grad():
        got = _output(compiled(**_on_device(kwargs)))
    assert isinstance(got, HwsimTensor)
    assert eager_stats(got.cpu(), lambda: _output(reference(**kwargs))).ok
    report = bridge.last_report()
    assert report.fallbacks() == [] and report.numerics_ok and report.total_sim_ns > 0


def test_eager_training_step_on_the_device():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 3))
    x, target = torch.randn(8, 12), torch.randn(8, 3)
    reference = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 3))
    reference.load_state_dict(model.state_dict())
    step(reference, x, target)

    report = device.configure("trn2", fallback="cpu", auto_cast="none")  # exact gradients
    model.to("hwsim")
    loss = step(model, x.to("hwsim"), target.to("hwsim"))
    assert isinstance(loss, HwsimTensor)
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        assert isinstance(got, HwsimTensor) and isinstance(got.grad, HwsimTensor)
        assert compare(got.detach().cpu(), want.detach(), TOLERANCES["fp32"]).ok
    updates = [
        r for r in report.ops if r.op == "aten.add.Tensor" and r.shapes.startswith("[16, 12]")
    ]
    assert updates and all(r.status == "simulator" for r in updates)  # SGD's p.add_(g, alpha=-lr)
    summary = device.summary()
    assert summary["cpu_fallbacks"] == len(report.fallbacks())
    assert all(r.reason for r in report.fallbacks())
    assert report.numerics_ok


def step(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = torch.nn.functional.mse_loss(model(x), target)
    loss.backward()
    optimizer.step()
    return loss.detach()
