"""The architectures of issue 14's finding 4 through torch.compile(backend="hwsim") with
fallback='error': BERT and RoBERTa with a padding mask (gather), T5 (integer abs in its
relative-position buckets), Mixtral's MoE routing (topk, sort, histc, integer floor division,
index_put, empty_permuted, the grouped-mm experts) and a MobileNetV2-shaped CNN (ReLU6 =
hardtanh, depthwise convs). Tiny configs, random weights, nothing downloaded. Every op runs on
the simulator and the outputs match CPU eager with the same auto-cast rounding (the default,
matmult/bf16: ``bridge.auto_cast``) within the bf16 tolerance (fp32 where no matmul is on the
way)."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from hwsim import bridge
from hwsim.bridge import models
from hwsim.bridge.precision import TOLERANCES
from tests.bridge.helpers import eager_stats

transformers = pytest.importorskip("transformers")

OPTIONS = {"config": "trn2", "fallback": "error"}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def padded_batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(0, models.VOCAB, (2, 16), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, :3] = 0
    return {"input_ids": ids, "attention_mask": mask}


def run(model, kwargs, pick):
    """(simulated output, its eager computation, report)."""
    with torch.no_grad():
        got = pick(torch.compile(model, backend="hwsim", options=dict(OPTIONS))(**kwargs))
    return got, lambda: pick(model(**kwargs)), bridge.last_report()


def assert_on_simulator_and_close(got, eager, report, must_lower, tolerance=None):
    """``eager()``: the output computed eagerly, judged with the default auto-cast's rounding
    (``helpers.eager_stats``); ``tolerance``: the bf16 tolerance unless given."""
    assert report.fallbacks() == []
    assert [g["cpu"] for g in report.graphs] == [0] * len(report.graphs)
    assert report.numerics_ok
    stats = eager_stats(got, eager, tolerance=tolerance)
    assert stats.ok, stats
    lowered = {r.op for r in report.lowered()}
    assert set(must_lower) <= lowered, set(must_lower) - lowered


@pytest.mark.parametrize("build", [models.tiny_bert, models.tiny_roberta])
def test_bert_family_with_padding_mask(build):
    got, expected, report = run(build(), padded_batch(), lambda o: o.last_hidden_state)
    assert_on_simulator_and_close(got, expected, report, ["aten.gather.default"])


def test_t5_relative_position_buckets():
    kwargs = {**padded_batch(), "decoder_input_ids": padded_batch()["input_ids"][:, :8]}
    kwargs["use_cache"] = False
    got, expected, report = run(models.tiny_t5(), kwargs, lambda o: o.last_hidden_state)
    assert_on_simulator_and_close(got, expected, report, ["aten.abs.default"])


def test_mixtral_moe_routing():
    kwargs = {"input_ids": padded_batch()["input_ids"], "use_cache": False}
    got, expected, report = run(models.tiny_mixtral(), kwargs, lambda o: o.logits)
    routing = [
        "aten.topk.default",
        "aten.sort.default",
        "aten.histc.default",
        "aten.div.Tensor_mode",
        "aten.index_put.default",
        "aten.empty_permuted.default",
    ]
    assert_on_simulator_and_close(got, expected, report, routing)


def test_mobilenet_v2_shaped_cnn():
    model = models.tiny_mobilenet_v2()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = torch.compile(model, backend="hwsim", options=dict(OPTIONS))(x)
    report = bridge.last_report()
    assert_on_simulator_and_close(got, lambda: model(x), report, ["aten.convolution.default"])
    assert any(r.op in ("aten.hardtanh.default", "aten.clamp.default") for r in report.lowered())


def compiled_module_run(model, x):
    with torch.no_grad():
        got = torch.compile(model, backend="hwsim", options=dict(OPTIONS))(x)
    first = (lambda o: o[0]) if isinstance(got, tuple) else (lambda o: o)
    return first(got), lambda: first(model(x)), bridge.last_report()


@pytest.mark.parametrize(
    "build",
    [
        lambda: torch.nn.LSTM(8, 16, num_layers=2, batch_first=True),
        lambda: torch.nn.LSTM(8, 16, bidirectional=True),
        lambda: torch.nn.GRU(8, 16, batch_first=True),
    ],
    ids=["lstm-2-layers", "lstm-bidirectional", "gru"],
)
def test_rnns_run_step_by_step_on_the_simulator(build):
    torch.manual_seed(0)
    with torch._dynamo.config.patch(allow_rnn=True):
        got, expected, report = compiled_module_run(build().eval(), torch.randn(2, 5, 8))
    assert_on_simulator_and_close(got, expected, report, ["aten.addmm.default"])
    ops = [r.op for r in report.lowered()]
    assert ops.count("aten.sigmoid.default") >= 5  # a gate per step: the recurrence unrolled


def test_group_norm():
    torch.manual_seed(0)
    model = torch.nn.GroupNorm(2, 8)
    torch.nn.init.uniform_(model.weight, 0.5, 1.5)
    got, expected, report = compiled_module_run(model, torch.randn(2, 8, 4, 4))
    no_matmul = TOLERANCES["fp32"]  # nothing to cast: fp32 throughout
    assert_on_simulator_and_close(got, expected, report, ["aten.var_mean.correction"], no_matmul)


def test_conv3d_compiled_and_eager_decomposed_into_2d_convolutions():
    from hwsim.bridge.offload import HwsimMode

    torch.manual_seed(0)
    model = torch.nn.Conv3d(3, 4, 3, stride=(2, 1, 1), padding=1).eval()
    x = torch.randn(2, 3, 5, 6, 6)
    got, expected, report = compiled_module_run(model, x)
    assert_on_simulator_and_close(got, expected, report, ["aten.convolution.default"])
    with torch.no_grad(), HwsimMode(fallback="error") as mode:
        eager = model(x)
    assert eager_stats(eager, lambda: model(x)).ok
    convs = [r for r in mode.report.lowered() if r.op == "aten.convolution.default"]
    assert len(convs) == 3  # one 2-D convolution per depth tap
