"""Training through torch.compile(backend="hwsim"): every parameter gradient equals eager's, and
the bridge's own check (``bridge.eager_check``) sees a wrong gradient when there is one.

The regression of issue 14: with PyTorch's stock decomposition of SDPA's CPU op, 18 of GPT-2's 28
gradients were wrong while the loss, every forward output and ``numerics_ok`` looked right."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch._dynamo
from torch import nn

from hwsim import bridge
from hwsim.bridge import decompositions
from hwsim.bridge.models import tiny_llama, tiny_resnet
from hwsim.bridge.precision import TOLERANCES, compare

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def gpt2(dropout: float) -> nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=128,
        n_head=4,
        vocab_size=512,
        n_positions=64,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
    )
    return transformers.GPT2LMHeadModel(config).train()


def _ids() -> torch.Tensor:
    return torch.randint(0, 512, (1, 16), generator=torch.Generator().manual_seed(2))


def _lm_loss(model: nn.Module) -> torch.Tensor:
    ids = _ids()
    return model(ids, labels=ids, use_cache=False).loss


def _cnn_loss(model: nn.Module) -> torch.Tensor:
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(4))
    return model(x).square().mean()


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[nn.Module], torch.Tensor]]] = {
    "gpt2": (lambda: gpt2(0.0), _lm_loss),
    "gpt2-dropout": (lambda: gpt2(0.1), _lm_loss),
    "llama": (lambda: tiny_llama().train(), _lm_loss),
    "cnn-batchnorm-train": (lambda: tiny_resnet().train(), _cnn_loss),
}


def _gradients(model: nn.Module, loss_of, compiled: bool) -> dict[str, torch.Tensor]:
    torch.manual_seed(7)  # the same dropout masks in both runs
    run = (
        torch.compile(model, backend="hwsim", options={"fallback": "cpu", "auto_cast": "none"})
        if compiled
        else model
    )
    loss_of(run).backward()
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", MODELS)
def test_every_parameter_gradient_matches_eager(name):
    make, loss_of = MODELS[name]
    model = make()
    expected = _gradients(copy.deepcopy(model), loss_of, compiled=False)
    got = _gradients(model, loss_of, compiled=True)
    assert got.keys() == expected.keys() and len(got) > 10
    wrong = {
        n: compare(got[n], expected[n], TOLERANCES["fp32"]).max_abs
        for n in got
        if not compare(got[n], expected[n], TOLERANCES["fp32"]).ok
    }
    assert not wrong, f"gradients differ from eager: {wrong}"
    report = bridge.last_report()
    assert report.numerics_ok
    checked = {g.name.split("grad[", 1)[1].rstrip("]") for g in report.gradients}
    assert set(got) <= checked, set(got) - checked  # the check saw every parameter


def test_the_check_sees_wrong_gradients_that_the_forward_checks_cannot(monkeypatch):
    """Put torch's stock SDPA decomposition back: the loss and every forward output still
    match, but the report's gradient check fails and names the parameters."""
    from torch._decomp import core_aten_decompositions

    monkeypatch.setattr(decompositions, "decomposition_table", core_aten_decompositions)
    model = gpt2(0.0)
    expected = _lm_loss(copy.deepcopy(model))
    compiled = torch.compile(
        model, backend="hwsim", options={"fallback": "cpu", "auto_cast": "none"}
    )
    loss = _lm_loss(compiled)
    assert torch.allclose(loss, expected, rtol=1e-5)
    report = bridge.last_report()
    assert all(o.stats.ok for o in report.outputs) and all(o.stats.ok for o in report.eager_outputs)
    assert report.numerics_ok  # nothing is wrong until backward runs
    loss.backward()
    assert not report.numerics_ok
    wrong = {g.name.split(".grad[", 1)[1].rstrip("]") for g in report.gradients if not g.stats.ok}
    assert {"transformer.wte.weight", "transformer.h.0.attn.c_attn.weight"} <= wrong
