"""``bridge.generation.generate``: greedy generation with a KV cache on both front doors (the
``hwsim`` device, and ``forward`` compiled with ``backend="hwsim"``) under ``fallback="error"``,
its tokens and every step's logits equal to eager's, timed per token; the static cache decodes
every token with one program (0 recompiles), the dynamic cache lowers one per token (counted).

The default run keeps one short GPT-2 generation on the compile front door; the five models on
both front doors, 16 tokens each, are ``slow``."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from hwsim import bridge
from hwsim.bridge import device
from hwsim.bridge.generation import generate
from hwsim.bridge.precision import TOLERANCES, compare

pytest.importorskip("transformers")

from hwsim.bridge import zoo

FP32 = TOLERANCES["fp32"]
#: fp32 end to end (compared with eager at the fp32 tolerance; auto-cast has its own tests).
OPTIONS = {"config": "trn2", "fallback": "error", "auto_cast": "none"}
#: The models of the issue's generation target ("Qwen": Qwen2).
MODELS = ["gpt2", "llama", "mistral", "qwen2", "t5"]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _prompt(name: str) -> torch.Tensor:
    return zoo.ZOO[name].inputs()["input_ids"][:1]


def _eager(name: str, tokens: int, **kwargs):
    model = zoo.ZOO[name].build()
    with torch.no_grad():
        return model.generate(
            _prompt(name),
            max_new_tokens=tokens,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
            **kwargs,
        )


def _on_simulator(name: str, door: str, tokens: int, cache: str = "static"):
    """The model on ``door`` ('compile' or 'device'), generated from with ``generate``; the
    report its work went to."""
    model, prompt = zoo.ZOO[name].build(), _prompt(name)
    if door == "device":
        device.configure(**OPTIONS)  # fp32 on both doors: auto-cast would cast the matmuls
        model, prompt = model.to("hwsim"), prompt.to("hwsim")
    else:
        model.forward = torch.compile(model.forward, backend="hwsim", options=dict(OPTIONS))
    output, record = generate(
        model,
        prompt,
        max_new_tokens=tokens,
        cache=cache,
        output_logits=True,
        return_dict_in_generate=True,
    )
    report = device.report() if door == "device" else bridge.last_report()
    return output, record, report


def _assert_equal_to_eager(output, expected) -> None:
    assert torch.equal(output.sequences.cpu(), expected.sequences)
    assert len(output.logits) == len(expected.logits)
    for step, (got, want) in enumerate(zip(output.logits, expected.logits, strict=True)):
        stats = compare(got.cpu(), want, FP32)
        assert stats.ok, (step, stats)


def _assert_timed(record, report, tokens: int) -> None:
    assert record.new_tokens == tokens
    assert len(record.steps) == tokens  # the prefill, then one decode step per further token
    assert record.prefill_ns > 0 and all(ns > 0 for ns in record.decode_ns)
    assert record.recompiles == 0  # one decode program served every token
    assert report.generations[-1] == record.to_dict()
    assert "generation (simulated time per token)" in report.text()


def test_gpt2_compiled_static_cache_three_tokens():
    """The default run's representative: 0 CPU ops, eager's tokens and logits, 0 recompiles,
    and the decode steps timed alike (the same program on the same shapes)."""
    expected = _eager("gpt2", 3)
    output, record, report = _on_simulator("gpt2", "compile", 3)
    _assert_equal_to_eager(output, expected)
    _assert_timed(record, report, 3)
    assert report.fallbacks() == [] and len(report.graphs) == 2  # prefill, decode
    assert record.decode_ns[0] == pytest.approx(record.decode_ns[1], rel=1e-9)
    assert record.max_cache_len == 64 and record.front_door == "compile"


@pytest.mark.slow
@pytest.mark.parametrize("door", ["compile", "device"])
@pytest.mark.parametrize("name", MODELS)
def test_sixteen_greedy_tokens_equal_eager_with_no_cpu_op(name, door):
    expected = _eager(name, 16)
    output, record, report = _on_simulator(name, door, 16)
    _assert_equal_to_eager(output, expected)
    _assert_timed(record, report, 16)
    assert report.fallbacks() == []
    if door == "compile":
        assert bridge.last_report().fallbacks() == []


@pytest.mark.slow
def test_the_dynamic_cache_lowers_a_program_per_token_and_says_so():
    """transformers' DynamicCache grows the cache by one position a token: each decode step
    after the first has new shapes, so the compiled graph is specialized again (and counted)."""
    expected = _eager("gpt2", 5)
    output, record, report = _on_simulator("gpt2", "compile", 5, cache="dynamic")
    _assert_equal_to_eager(output, expected)
    assert report.fallbacks() == [] and report.generations[-1]["recompiles"] == 3
    assert report.shape_recompiles == 2  # graph2's specializations after its first
    assert record.cache == "dynamic" and record.max_cache_len is None
    assert record.recompiles == 3  # decode steps 2, 3 and 4
    assert [s.forward_programs for s in record.steps] == [1, 1, 1, 1, 1]


def test_programs_lowered_again_for_new_shapes_are_counted():
    """A graph with symbolic sizes gets a program per shape; the report counts the extra ones."""
    options = {"fallback": "error", "config": "tiny"}
    compiled = torch.compile(torch.relu, backend="hwsim", options=options, dynamic=True)
    for n in (4, 5, 6, 5):  # the second 5 reuses its program
        compiled(torch.randn(3, n))
    report = bridge.last_report()
    assert report.shape_recompiles == 2
    assert report.to_dict()["dynamo"]["shape_recompiles"] == 2
    assert "2 programs lowered again for new shapes" in " ".join(report.text().split())


def test_bad_arguments_are_refused_before_anything_runs():
    ids = torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="cache='paged'; valid: 'static', 'dynamic'"):
        generate(None, ids, cache="paged")
    with pytest.raises(ValueError, match="bucket=0 must be a positive"):
        generate(None, ids, bucket=0)
    model = zoo.ZOO["gpt2"].build()
    with pytest.raises(ValueError, match="nothing of this model would run on the simulator"):
        generate(model, ids)  # on the CPU, forward not compiled
    with pytest.raises(ValueError, match=r"compile the forward instead: model.forward ="):
        generate(torch.compile(model, backend="hwsim"), ids)
