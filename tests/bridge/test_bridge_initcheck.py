"""The bridge's ``initcheck`` option reaches the simulator on both front doors, whatever
HWSIM_INITCHECK says, and an empty output is not an HBM tensor nothing writes."""

from __future__ import annotations

import pytest
import torch

from hwsim.bridge.offload import HwsimMode
from hwsim.machine.initcheck import ENV_VAR, InitChecker
from tests.bridge.helpers import check_op


@pytest.fixture
def checked(monkeypatch):
    """The instructions initcheck saw (none unless a run turned it on)."""
    seen = []
    execute = InitChecker.execute

    def counting(self, state, pc, instruction):
        seen.append(instruction)
        execute(self, state, pc, instruction)

    monkeypatch.setattr(InitChecker, "execute", counting)
    monkeypatch.setenv(ENV_VAR, "0")
    return seen


def test_compile_option_turns_the_check_on(checked):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU())
    x = torch.randn(4, 16)
    off = torch.compile(model, backend="hwsim", options={"config": "tiny", "fallback": "error"})
    off(x)
    assert checked == []
    options = {"config": "tiny", "fallback": "error", "initcheck": True, "auto_cast": "none"}
    y = torch.compile(model, backend="hwsim", options=options)(x)
    assert checked and torch.allclose(y, model(x), atol=1e-5)


def test_eager_option_turns_the_check_on(checked):
    x = torch.randn(8, 8)
    with torch.no_grad(), HwsimMode("tiny", fallback="error", initcheck=True):
        x + 1
    assert checked


def test_empty_outputs_are_constants_not_tensors_to_write(monkeypatch):
    """Eval batch norm returns empty saved statistics: an HBM placeholder for them would be an
    output no instruction writes (an initcheck finding)."""

    def fn(x, mean, var):
        return torch.ops.aten.native_batch_norm(x, None, None, mean, var, False, 0.1, 1e-5)

    monkeypatch.setenv(ENV_VAR, "1")
    run = check_op(fn, [(4, 6), torch.zeros(6), torch.ones(6)])
    assert [tuple(o.shape) for o in run.outputs] == [(4, 6), (0,), (0,)]
