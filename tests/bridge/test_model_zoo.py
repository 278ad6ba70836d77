"""The model zoo (``bridge.zoo``, docs/models.md): every architecture through
``torch.compile(backend="hwsim")`` with ``fallback="error"`` (any op left on the CPU raises), its
output equal to eager's within the fp32 tolerance, and six of them trained one step (forward,
backward, SGD) with every gradient and updated parameter equal to eager's.

The default run keeps one representative, BLOOM (integer pow for ALiBi, repeat); the rest are
``slow`` (``make test-all``): a few seconds each, the mixture-of-experts and ConvNeXt models
minutes (their compile time is the dependency resolution's, docs/models.md)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch import nn

from hwsim import bridge
from hwsim.bridge.precision import CANCELLATION_NOISE_FACTOR, TOLERANCES, compare

pytest.importorskip("transformers")

from hwsim.bridge import zoo
from hwsim.bridge.models import tiny_resnet

FP32 = TOLERANCES["fp32"]
#: fp32 end to end (compared with eager at the fp32 tolerance; auto-cast has its own tests).
OPTIONS = {"config": "trn2", "fallback": "error", "auto_cast": "none"}
#: The default run's representative.
FAST = {"bloom"}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "models.md"


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _by_speed(names):
    return [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in names]


def test_the_zoo_has_41_architectures_each_documented():
    assert len(zoo.ZOO) == 41
    text = DOCS.read_text()
    missing = [m.name for m in zoo.ZOO.values() if f"`{m.name}`" not in text]
    assert not missing, f"docs/models.md does not list {missing}"


@pytest.mark.parametrize("name", _by_speed(zoo.ZOO))
def test_inference_runs_every_op_on_the_simulator(name):
    entry = zoo.ZOO[name]
    model, inputs = entry.build(), entry.inputs()
    with torch.no_grad():
        expected = entry.pick(model(**inputs))
        got = entry.pick(torch.compile(model, backend="hwsim", options=dict(OPTIONS))(**inputs))
    report = bridge.last_report()
    assert report.fallbacks() == [] and report.runs
    assert all(g["cpu"] == 0 for g in report.graphs)
    stats = compare(got.float(), expected.float(), FP32)
    assert stats.ok, stats
    assert report.numerics_ok


# ---- one training step ----------------------------------------------------------------------


def _train_mode(model: nn.Module) -> nn.Module:
    """Train mode with every dropout module off (eager and compiled draw no random masks)."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    return model.train()


_BERT_DROPOUT_OFF = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def _language_model(name: str, **dropout_off: float):
    entry = zoo.ZOO[name]
    model = _train_mode(entry.build_as(entry.model_class, **dropout_off))
    ids, labels = zoo.token_ids(2, 8), zoo.token_ids(2, 8, seed=5)
    return model, lambda m, cast: m(input_ids=ids, labels=labels, use_cache=False).loss


def _bert():
    model = _train_mode(zoo.ZOO["bert"].build_as("BertForMaskedLM", **_BERT_DROPOUT_OFF))
    ids, labels = zoo.token_ids(2, 12), zoo.token_ids(2, 12, seed=5)
    mask = zoo.padding_mask(2, 12, 3)
    return model, lambda m, cast: m(input_ids=ids, attention_mask=mask, labels=labels).loss


def _t5():
    """T5's ``_shift_right`` writes a slice of the decoder's inputs (slice_scatter)."""
    model = _train_mode(zoo.ZOO["t5"].build_as("T5ForConditionalGeneration", dropout_rate=0.0))
    ids, labels = zoo.token_ids(2, 12), zoo.token_ids(2, 6, seed=5)
    return model, lambda m, cast: m(input_ids=ids, labels=labels, use_cache=False).loss


def _vit():
    vit = zoo.ZOO["vit"].build_as("ViTForImageClassification", num_labels=10, **_BERT_DROPOUT_OFF)
    pixels, labels = zoo.floats(2, 3, 32, 32), torch.tensor([1, 7])
    return _train_mode(vit), lambda m, cast: m(pixel_values=cast(pixels), labels=labels).loss


def _cnn():
    """The tiny ResNet in train mode: batch norm from batch statistics."""
    x = zoo.floats(2, 3, 16, 16)
    return tiny_resnet().train(), lambda m, cast: m(cast(x)).square().mean()


TRAINING: dict[str, Callable[[], tuple[nn.Module, Callable[..., torch.Tensor]]]] = {
    "gpt2": lambda: _language_model("gpt2", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    "llama": lambda: _language_model("llama"),
    "bert": _bert,
    "t5": _t5,
    "vit": _vit,
    "cnn": _cnn,
}
LR = 0.05
#: A gradient that is zero in exact arithmetic (a key projection's bias: softmax does not see
#: a shift of every score of a row) comes out of fp32 as rounding noise, eager's and ours
#: alike. It is that noise when the float64 gradient is below eager's distance from it, and
#: ours is within the report's own factor of that distance (the one judgement of a
#: cancellation, ``precision.CANCELLATION_NOISE_FACTOR``). TensorE sums each column's products
#: one partition after another, as a PE column does, where the CPU's BLAS sums in blocks: the
#: noise differs by a factor (measured on ViT's key biases: 2.0x and 6.3x eager's).
NOISE_FACTOR = CANCELLATION_NOISE_FACTOR


def _distance(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def _mismatches(
    got: dict[str, torch.Tensor], eager: dict[str, torch.Tensor], exact: dict[str, torch.Tensor]
) -> tuple[dict[str, float], set[str]]:
    """Gradients off eager's (name -> max |difference|), and those that are rounding noise of
    an exact zero (see NOISE_FACTOR)."""
    wrong, noise = {}, set()
    for name, g in got.items():
        stats = compare(g, eager[name], FP32)
        if stats.ok:
            continue
        theirs = _distance(eager[name], exact[name])
        if float(exact[name].abs().max()) <= theirs and _distance(g, exact[name]) <= (
            NOISE_FACTOR * theirs
        ):
            noise.add(name)
            continue
        wrong[name] = stats.max_abs
    return wrong, noise


def _gradients(
    model: nn.Module, loss_of, run: nn.Module | None = None, cast=lambda x: x
) -> dict[str, torch.Tensor]:
    """``model``'s gradients after a backward pass of the loss, computed by ``run`` (``model``
    itself, or its compiled wrapper)."""
    loss_of(model if run is None else run, cast).backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.slow
@pytest.mark.parametrize("name", TRAINING)
def test_one_training_step_runs_on_the_simulator_and_equals_eager(name):
    model, loss_of = TRAINING[name]()
    eager, exact = copy.deepcopy(model), copy.deepcopy(model).double()
    want = _gradients(eager, loss_of)
    truth = _gradients(exact, loss_of, cast=lambda x: x.double())
    compiled = torch.compile(model, backend="hwsim", options=dict(OPTIONS))
    got = _gradients(model, loss_of, run=compiled)
    report = bridge.last_report()
    assert report.fallbacks() == []
    assert {g["kind"] for g in report.graphs} >= {"forward", "backward"}
    assert all(g["cpu"] == 0 for g in report.graphs)
    assert got.keys() == want.keys() and len(got) > 10
    wrong, noise = _mismatches(got, want, truth)
    assert not wrong, f"gradients differ from eager: {wrong}"
    flagged = {g.name.split(".grad[", 1)[1].rstrip("]") for g in report.gradients if not g.stats.ok}
    assert flagged <= noise, flagged - noise  # the report flags nothing but exact zeros' noise
    # the SGD step, compiled too: each parameter moves by -LR times its (checked) gradient
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    step = torch.compile(
        torch.optim.SGD(model.parameters(), lr=LR, foreach=False).step,
        backend="hwsim",
        options=dict(OPTIONS),
    )
    step()
    assert bridge.last_report().fallbacks() == []
    for n, p in model.named_parameters():
        moved = before[n] - LR * got[n] if n in got else before[n]
        assert compare(p.detach(), moved, FP32).ok, n
