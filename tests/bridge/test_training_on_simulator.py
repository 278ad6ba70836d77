"""Training on the simulator: backward graphs lowered like forward ones (CPU fallbacks counted
and refused under fallback='error'), the training decompositions against torch's kernels, and
compiled optimizer steps."""

from __future__ import annotations

import copy

import pytest
import torch
import torch._dynamo
from torch import nn

from hwsim import bridge
from hwsim.bridge.errors import FallbackError
from hwsim.bridge.precision import TOLERANCES, compare
from hwsim.bridge.training_decompositions import (
    embedding_dense_backward,
    nll_loss_backward,
    nll_loss_forward,
)

aten = torch.ops.aten
FP32 = TOLERANCES["fp32"]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# ---- the decompositions against torch's kernels --------------------------------------------


@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_forward_and_backward_match_torch(reduction, weighted):
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(6, 5, generator=generator).log_softmax(-1)
    target = torch.tensor([0, 4, -100, 2, 2, 1])  # -100: ignored
    weight = torch.rand(5, generator=generator) + 0.5 if weighted else None
    want = aten.nll_loss_forward(x, target, weight, reduction, -100)
    got = nll_loss_forward(x, target, weight, reduction, -100)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-7)
    grad = torch.randn(want[0].shape, generator=generator)
    total = want[1]
    want_grad = aten.nll_loss_backward(grad, x, target, weight, reduction, -100, total)
    got_grad = nll_loss_backward(grad, x, target, weight, reduction, -100, total)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("padding_idx", [-1, 3])
@pytest.mark.parametrize("by_freq", [False, True])
def test_embedding_dense_backward_matches_torch(padding_idx, by_freq):
    generator = torch.Generator().manual_seed(3)
    indices = torch.tensor([[1, 3, 3, 7], [0, 1, 1, 1]])  # repeats accumulate
    grad = torch.randn(2, 4, 6, generator=generator)
    want = aten.embedding_dense_backward(grad, indices, 9, padding_idx, by_freq)
    got = embedding_dense_backward(grad, indices, 9, padding_idx, by_freq)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert got[8].abs().max() == 0  # a row no index names gets nothing


# ---- backward graphs on the simulator -------------------------------------------------------


def gpt2() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=128,
        n_head=4,
        vocab_size=512,
        n_positions=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return transformers.GPT2LMHeadModel(config).train()


def _ids() -> torch.Tensor:
    return torch.randint(0, 512, (1, 16), generator=torch.Generator().manual_seed(2))


def test_gpt2_backward_runs_on_the_simulator_with_no_cpu_op():
    """fallback='error': every node of every graph, forward and backward, is lowered; the
    gradients are eager's and each backward graph has simulated runs."""
    model = gpt2()
    reference = copy.deepcopy(model)
    ids = _ids()
    reference(ids, labels=ids, use_cache=False).loss.backward()
    compiled = torch.compile(model, backend="hwsim", options={"fallback": "error"})
    compiled(ids, labels=ids, use_cache=False).loss.backward()
    report = bridge.last_report()
    assert report.fallbacks() == []
    kinds = [g["kind"] for g in report.graphs]
    assert kinds.count("backward") >= 1 and kinds.count("forward") >= 1
    backward = [g["graph"] for g in report.graphs if g["kind"] == "backward"]
    assert {r["graph"] for r in report.runs} >= set(backward)  # simulated, not run on the CPU
    assert all(g["cpu"] == 0 for g in report.graphs)
    ops = {r.op for r in report.ops if r.phase == "backward"}
    assert "aten.mm.default" in ops and "aten.eq.Tensor" in ops  # one-hot embedding gradient
    assert not ops & {"aten.index_put.default", "aten.scatter.value"}
    phases = report.phase_times()
    assert phases["backward"] > 0 and phases["forward"] > 0
    wrong = {}
    for (name, got), (_, want) in zip(
        model.named_parameters(), reference.named_parameters(), strict=True
    ):
        stats = compare(got.grad, want.grad, FP32)
        if not stats.ok:
            wrong[name] = stats.max_abs
    assert not wrong, wrong
    assert report.numerics_ok


def _pool(x: torch.Tensor) -> torch.Tensor:
    return nn.functional.max_pool2d(x, 2).sum()


def test_an_unsupported_backward_op_is_counted_as_a_cpu_op_of_backward():
    """max_pool2d lowers, its backward (no decomposition in PyTorch) does not: the backward
    graph runs partly on the CPU and the report counts that op, phase 'backward'."""
    x = torch.randn(1, 2, 4, 4, requires_grad=True)
    compiled = torch.compile(_pool, backend="hwsim", options={"fallback": "cpu"})
    compiled(x).backward()
    report = bridge.last_report()
    [cpu] = report.fallbacks()
    assert (cpu.op, cpu.phase) == ("aten.max_pool2d_with_indices_backward.default", "backward")
    assert report.to_dict()["counts"]["cpu"] == 1
    expected = x.detach().clone().requires_grad_(True)
    _pool(expected).backward()
    torch.testing.assert_close(x.grad, expected.grad)


def test_fallback_error_refuses_an_unsupported_backward_op():
    x = torch.randn(1, 2, 4, 4, requires_grad=True)
    compiled = torch.compile(_pool, backend="hwsim", options={"fallback": "error"})
    loss = compiled(x)  # the forward lowers whole
    with pytest.raises(FallbackError, match="max_pool2d_with_indices_backward"):
        loss.backward()
