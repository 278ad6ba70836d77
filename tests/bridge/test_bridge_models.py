"""Whole small models through torch.compile(backend="hwsim") with fallback='error': tiny GPT-2 and
Llama from ``transformers`` configs (random weights, nothing downloaded) and
nn.TransformerEncoderLayer with its fast path off. Every op runs on the simulator (the report
lists no CPU op) and the logits match CPU PyTorch eager run with the same auto-cast rounding
(``bridge.auto_cast``) within the tolerance of the cast dtype: the default matmult/bf16, and for
the two main models each auto-cast mode."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch import nn

from hwsim import bridge
from hwsim.bridge.models import tiny_gpt2, tiny_llama
from hwsim.bridge.precision import AUTO_CAST_MODES, TOLERANCES
from tests.bridge.helpers import eager_stats

transformers = pytest.importorskip("transformers")

OPTIONS = {"config": "trn2", "fallback": "error"}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


gpt2, llama = tiny_gpt2, tiny_llama


def inputs(padded: bool) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(1))
    kwargs = {"input_ids": ids}
    if padded:  # left padding on the second sequence: a data-dependent mask on the device
        mask = torch.ones(2, 16, dtype=torch.long)
        mask[1, :3] = 0
        kwargs["attention_mask"] = mask
    return kwargs


def run_on_simulator(model: nn.Module, kwargs: dict[str, torch.Tensor], options=OPTIONS):
    """(simulated logits, their eager computation, report) of one forward pass."""
    with torch.no_grad():
        compiled = torch.compile(model, backend="hwsim", options=dict(options))
        got = compiled(**kwargs, use_cache=False).logits
    return got, lambda: model(**kwargs, use_cache=False).logits, bridge.last_report()


def assert_all_on_simulator_and_close(got, eager, report, dtype_name=None):
    """``eager()``: the logits computed eagerly, with the report's auto-cast rounding
    (``helpers.eager_stats``); ``dtype_name``: the tolerance's dtype (default: the auto-cast
    type, or fp32 when nothing is cast)."""
    assert report.fallbacks() == []
    assert [g["cpu"] for g in report.graphs] == [0] * len(report.graphs)
    assert report.numerics_ok and report.runs and report.runs[-1]["total_ns"] > 0
    tolerance = TOLERANCES[dtype_name] if dtype_name else None
    stats = eager_stats(got, eager, report.precision, tolerance)
    assert stats.ok, stats


@pytest.mark.parametrize("auto_cast", AUTO_CAST_MODES)
def test_tiny_gpt2_with_padding_mask_runs_entirely_on_the_simulator(auto_cast):
    options = {**OPTIONS, "auto_cast": auto_cast}
    got, expected, report = run_on_simulator(gpt2(), inputs(padded=True), options)
    assert_all_on_simulator_and_close(got, expected, report)
    ops = {r.op for r in report.lowered()}
    assert {"aten.embedding.default", "aten.native_layer_norm.default"} <= ops
    assert {"aten.where.self", "aten.pow.Tensor_Scalar", "aten.tanh.default"} <= ops
    dtypes = {r.op: r.compute_dtype for r in report.lowered()}  # what auto-cast cast
    matmul, other = ("fp32", "fp32") if auto_cast == "none" else ("bf16", "fp32")
    other = "bf16" if auto_cast == "all" else other
    assert dtypes["aten.addmm.default"] == matmul and dtypes["aten.tanh.default"] == other


@pytest.mark.parametrize("auto_cast", AUTO_CAST_MODES)
def test_tiny_llama_gqa_runs_entirely_on_the_simulator(auto_cast):
    options = {**OPTIONS, "auto_cast": auto_cast}
    got, expected, report = run_on_simulator(llama(), inputs(padded=False), options)
    assert_all_on_simulator_and_close(got, expected, report)
    ops = {r.op for r in report.lowered()}
    assert {"aten.cos.default", "aten.sin.default", "aten.cat.default", "aten.rsqrt.default"} <= ops


def test_analyze_lists_every_op_as_supported():
    kwargs = {**inputs(padded=True), "use_cache": False}
    ids = kwargs.pop("input_ids")
    report = bridge.analyze(llama("sdpa"), ids, kwargs=kwargs, show=False)
    assert report.fallbacks() == [] and len(report.lowered()) > 100


@pytest.mark.parametrize("dynamic", [False, None], ids=["static", "default"])
def test_new_sequence_lengths(dynamic):
    """dynamic=False: dynamo recompiles with static shapes. The default: the second length
    makes dynamo compile a graph with symbolic sizes, which the backend specializes to each
    concrete length it meets (one program per shape)."""
    model = gpt2()
    compiled = torch.compile(model, backend="hwsim", dynamic=dynamic, options=dict(OPTIONS))
    with torch.no_grad():
        for length in (16, 11, 13, 11):
            ids = torch.randint(0, 512, (2, length), generator=torch.Generator().manual_seed(2))
            got = compiled(input_ids=ids, use_cache=False).logits
            assert eager_stats(got, lambda ids=ids: model(input_ids=ids, use_cache=False).logits).ok
    report = bridge.last_report()
    assert report.fallbacks() == [] and len(report.runs) == 4
    forward = [g["kind"] for g in report.graphs]
    if dynamic is False:
        assert forward == ["forward"] * 3
    else:  # lengths 11 and 13 specialize the one dynamic graph; 11 again reuses its program
        assert forward[0] == "forward" and len(forward) == 3
        assert all(kind.startswith("forward (dynamic") for kind in forward[1:])


def test_hand_written_causal_attention():
    """tril / triu masks (core ATen: arange, comparisons, where) and a matmul broadcasting
    its batch dims (expand + bmm)."""

    def attention(x, w):
        scores = x @ w
        n = scores.shape[-1]
        causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
        scores = scores.masked_fill(~causal, float("-inf"))
        return torch.softmax(scores, -1) @ x, torch.triu(x, 1)

    x, w = torch.randn(2, 4, 9, 9), torch.randn(1, 4, 9, 9)
    options = {**OPTIONS, "config": "tiny"}
    got = torch.compile(attention, backend="hwsim", options=options)(x, w)
    for i, actual in enumerate(got):
        assert eager_stats(actual, lambda i=i: attention(x, w)[i]).ok
    assert bridge.last_report().fallbacks() == []


@pytest.mark.parametrize("mask", ["none", "causal", "padding"])
def test_transformer_encoder_layer_without_fast_path(mask):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, batch_first=True).eval()
    x = torch.randn(2, 16, 128)
    kwargs = {}
    if mask == "causal":
        kwargs = {"src_mask": nn.Transformer.generate_square_subsequent_mask(16), "is_causal": True}
    if mask == "padding":
        padding = torch.zeros(2, 16, dtype=torch.bool)
        padding[1, 10:] = True
        kwargs = {"src_key_padding_mask": padding}
    fast_path = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad():
            got = torch.compile(layer, backend="hwsim", options=dict(OPTIONS))(x, **kwargs)
        assert_all_on_simulator_and_close(got, lambda: layer(x, **kwargs), bridge.last_report())
    finally:
        torch.backends.mha.set_fastpath_enabled(fast_path)


def test_eager_offload_runs_gpt2_except_item():
    """HwsimMode, op by op: only transformers' ``.item()`` (a value read on the host) stays on
    the CPU; the fused SDPA kernel runs on the simulator."""
    model = gpt2()
    ids = inputs(padded=False)["input_ids"]
    with torch.no_grad(), bridge.HwsimMode("trn2", fallback="cpu") as mode:
        got = model(input_ids=ids, use_cache=False).logits
    assert {r.op for r in mode.report.fallbacks()} <= {"aten._local_scalar_dense.default"}
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default" in {
        r.op for r in mode.report.lowered()
    }
    assert mode.report.numerics_ok
    assert eager_stats(got, lambda: model(input_ids=ids, use_cache=False).logits).ok


@pytest.mark.slow
@pytest.mark.parametrize(
    "build, padded",
    [
        pytest.param(lambda: gpt2("eager"), False, id="gpt2-eager"),
        pytest.param(lambda: gpt2("eager"), True, id="gpt2-eager-padded"),
        pytest.param(lambda: llama("sdpa"), True, id="llama-sdpa-padded"),
        pytest.param(lambda: llama(kv_heads=4), False, id="llama-mha"),
    ],
)
def test_model_variants(build, padded):
    got, expected, report = run_on_simulator(build(), inputs(padded))
    assert_all_on_simulator_and_close(got, expected, report)


@pytest.mark.slow
@pytest.mark.parametrize("build", [gpt2, llama], ids=["gpt2", "llama"])
def test_bf16_model_and_bf16_compute(build):
    model = build()
    got, expected, report = run_on_simulator(model, inputs(False), {**OPTIONS, "auto_cast": "all"})
    assert report.outputs[0].computed_in == "bf16"
    assert_all_on_simulator_and_close(got, expected, report, "bf16")
    torch._dynamo.reset()
    got, expected, report = run_on_simulator(model.to(torch.bfloat16), inputs(False))
    assert_all_on_simulator_and_close(got, expected, report, "bf16")
