"""torch.compile and torch.autocast on the ``hwsim`` device."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch import nn

from hwsim import bridge
from hwsim.bridge import device, device_autocast
from hwsim.bridge.device_tensor import HwsimTensor
from hwsim.bridge.precision import TOLERANCES, compare


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class WithFactories(nn.Module):
    """Factories naming the input's device, and an output made from a factory alone."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(x.shape[1], device=x.device)
        return torch.relu(self.linear(x)) + positions, torch.ones(2, device=x.device)


def test_compiled_graph_takes_and_returns_device_tensors():
    model, x = WithFactories(), torch.randn(3, 6)
    with torch.no_grad():
        expected = model(x)
    model.to("hwsim")
    device.configure("trn2")
    compiled = torch.compile(
        model, backend="hwsim", options={"fallback": "error", "auto_cast": "none"}
    )
    with torch.no_grad():
        got = compiled(x.to("hwsim"))
    for g, e in zip(got, expected, strict=True):
        assert isinstance(g, HwsimTensor) and g.device.type == "hwsim"
        assert compare(g.cpu(), e, TOLERANCES["fp32"]).ok
    report = bridge.last_report()
    assert report.fallbacks() == [] and report.numerics_ok and report.total_sim_ns > 0
    assert [o.stats.ok for o in report.eager_outputs] == [True, True]
    # the compiled call ran no eager device op (the eager reference runs on the host)
    assert device.summary()["simulator_ops"] == 0


def test_compiled_training_step_gives_gradients_on_the_device():
    cpu_model, x = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2)), torch.randn(4, 6)
    cpu_model(x).sum().backward()
    expected = [p.grad for p in cpu_model.parameters()]
    cpu_model.zero_grad(set_to_none=True)
    model = cpu_model.to("hwsim")
    device.configure("trn2")
    compiled = torch.compile(
        model, backend="hwsim", options={"fallback": "cpu", "auto_cast": "none"}
    )
    compiled(x.to("hwsim")).sum().backward()
    for p, e in zip(model.parameters(), expected, strict=True):
        assert isinstance(p.grad, HwsimTensor)
        assert compare(p.grad.cpu(), e, TOLERANCES["fp32"]).ok
    report = bridge.last_report()
    assert report.numerics_ok and len(report.gradients) == 4


def test_autocast_in_eager_mode_casts_matmuls_to_bf16_on_the_device():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(5, 8)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(x)
    model.to("hwsim")
    report = device.configure("trn2", fallback="error")
    with torch.no_grad(), torch.autocast("hwsim", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("hwsim")
        got = model(x.to("hwsim"))
    assert got.dtype == torch.bfloat16
    assert compare(got.cpu().float(), expected.float(), TOLERANCES["bf16"]).ok
    casts = [r for r in report.ops if r.op == "aten._to_copy.default"]
    assert len(casts) == 5 and all(r.status == "simulator" for r in casts)  # x, 2 W, 2 b
    assert report.numerics_ok


def test_autocast_keeps_fp32_ops_in_fp32():
    device.configure("trn2")
    x = torch.randn(4, 8).to("hwsim")
    with torch.autocast("hwsim", dtype=torch.bfloat16):
        assert torch.softmax(x.to(torch.bfloat16), -1).dtype == torch.float32
        assert (x @ x.T).dtype == torch.bfloat16
    assert (x @ x.T).dtype == torch.float32  # off again outside the block


def test_autocast_under_torch_compile():
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    x = torch.randn(5, 8)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(x)
    model.to("hwsim")
    device.configure("trn2")
    compiled = torch.compile(model, backend="hwsim", options={"fallback": "error"})
    with torch.no_grad(), torch.autocast("hwsim", dtype=torch.bfloat16):
        got = compiled(x.to("hwsim"))
    assert isinstance(got, HwsimTensor) and got.dtype == torch.bfloat16
    assert compare(got.cpu().float(), expected.float(), TOLERANCES["bf16"]).ok
    report = bridge.last_report()
    assert report.fallbacks() == [] and report.numerics_ok
    assert sum(r.op == "aten._to_copy.default" for r in report.ops) == 5


def test_autocast_lists_name_ops_pytorch_autocasts_on_cuda():
    cuda = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA"))
    names = (*device_autocast.LOWER_PRECISION, *device_autocast.FP32, *device_autocast.PROMOTE)
    assert len(set(names)) == len(names)
    assert {f"aten::{n}" for n in names} <= cuda
