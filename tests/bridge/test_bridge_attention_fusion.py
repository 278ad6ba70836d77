"""The attention pass (bridge.passes.attention_fusion) and its flash-attention kernel
(bridge.lowerings.flash_attention): what it matches, numerics against eager, HBM traffic."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from hwsim.bridge.decompositions import decomposition_table
from hwsim.bridge.graph_lowering import lower_graph
from hwsim.bridge.passes import PassSelection, run_pipeline
from hwsim.bridge.passes.attention_fusion import FusedAttention
from hwsim.bridge.precision import Precision, compare
from hwsim.isa.origin import origin_of

FP32 = torch.float32


def _inputs(*shapes: tuple[int, ...], dtype: torch.dtype = FP32) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g).to(dtype) for s in shapes]


def _graph(fn, inputs):
    return make_fx(fn, decomposition_table=decomposition_table())(*inputs)


def _fused(fn, inputs) -> list[FusedAttention]:
    gm, _ = run_pipeline(_graph(fn, inputs), PassSelection.all())
    return [n.target for n in gm.graph.nodes if isinstance(n.target, FusedAttention)]


def _run(fn, inputs, passes=None, dtype=FP32):
    lowered = lower_graph(_graph(fn, inputs), inputs, passes=passes)
    run = lowered.run(inputs)
    got, want = run.outputs, fn(*inputs)
    pairs = zip(got, want, strict=True) if isinstance(want, tuple) else [(got, want)]
    for a, b in pairs:
        ok = compare(a, b, Precision().tolerance(dtype))
        assert ok.ok, ok
    return lowered, run


def _causal_mask(queries: int, keys: int) -> torch.Tensor:
    mask = torch.zeros(1, 1, queries, keys)
    return mask.masked_fill(torch.ones(queries, keys, dtype=torch.bool).triu(1), float("-inf"))


def sdpa(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def unmasked(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def eager_softmax(q, k, v):
    """The transformers 'eager' form: matmul, divide, softmax (amax/sub/exp/sum/div), matmul."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v


SHAPES = [(2, 3, 40, 16)]


@pytest.mark.parametrize(
    "fn, extra",
    [(sdpa, "additive"), (sdpa, "bool"), (causal, None), (unmasked, None), (eager_softmax, None)],
    ids=["additive-mask", "bool-mask", "is_causal", "no-mask", "plain-softmax"],
)
def test_matched_and_equal_to_eager(fn, extra):
    q, k, v = _inputs(*SHAPES * 3)
    inputs = [q, k, v]
    if extra == "additive":
        inputs.append(_causal_mask(40, 40))
    elif extra == "bool":
        inputs.append(torch.ones(40, 40, dtype=torch.bool).tril())
    fused = _fused(fn, inputs)
    assert len(fused) == 1
    plan = fused[0].plan
    assert (plan.batch, plan.heads) == (2, 3)
    assert plan.scale == pytest.approx(1 / math.sqrt(16))
    assert plan.mask is not None if (extra or fn is causal) else plan.mask is None
    lowered, _ = _run(fn, inputs)
    notes = lowered.pipeline["fusion"]
    assert any(n.get("attention") and n["fused"] for n in notes)


def test_every_instruction_of_the_kernel_carries_all_its_source_nodes():
    inputs = [*_inputs(*SHAPES * 3), _causal_mask(40, 40)]
    _, run = _run(sdpa, inputs)
    origins = {origin_of(r.instruction.tag) for r in run.result.trace.instructions}
    fused = [o for o in origins if o is not None and o.op == "fused[attention]"]
    assert len(fused) == 1 and fused[0].node == "+".join(fused[0].members)
    names = fused[0].members
    assert names[0] == "bmm" and "amax" in names and "bmm_1" in names and "exp_1" in names


def test_scores_never_reach_hbm():
    """q, k, v and the mask are read once (every head of both batches is on chip at once, and
    the mask, broadcast over them, is loaded once), the output written once: the exact HBM
    bytes, no [B, H, L, S] round trip."""
    b, h, length, d = 2, 3, 40, 16
    inputs = [*_inputs(*[(b, h, length, d)] * 3), _causal_mask(length, length)]
    _, on = _run(sdpa, inputs)
    moved = 4 * (3 * b * h * length * d + length * length + b * h * length * d)
    # the 0.0 of each of the safe softmax's two where nodes (a scalar_tensor node each: CSE
    # leaves constants made on the device where they are used) stays in SBUF: the residency
    # pass elides their stores; without residency they cost 4 bytes each
    assert on.result.summary.hbm_bytes == moved
    _, kept = _run(sdpa, inputs, passes={"residency": False})
    assert kept.result.summary.hbm_bytes == moved + 8
    _, off = _run(sdpa, inputs, passes={"attention": False})
    assert off.result.summary.hbm_bytes > moved + 4 * b * h * length * length
    assert on.result.summary.total_ns < off.result.summary.total_ns


def test_many_key_blocks_and_query_tiles_use_the_online_softmax():
    """600 keys are two PSUM blocks (512 + 88): the running max and sum rescale the output;
    130 queries are two query tiles."""
    inputs = [*_inputs((1, 2, 130, 8), (1, 2, 600, 8), (1, 2, 600, 8)), torch.randn(130, 600)]
    assert len(_fused(sdpa, inputs)) == 1
    _run(sdpa, inputs)


def test_a_row_masked_entirely_gives_zeros_as_the_cpu_kernel():
    mask = _causal_mask(16, 16)
    mask[0, 0, 3, :] = float("-inf")
    inputs = [*_inputs(*[(1, 2, 16, 8)] * 3), mask]
    _, run = _run(sdpa, inputs)
    assert torch.equal(run.outputs[:, :, 3], torch.zeros(1, 2, 8))


def test_grouped_query_heads():
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    inputs = _inputs((1, 4, 24, 16), (1, 2, 24, 16), (1, 2, 24, 16))
    assert len(_fused(fn, inputs)) == 1
    _run(fn, inputs)


def test_bf16():
    inputs = [*_inputs(*SHAPES * 3, dtype=torch.bfloat16), _causal_mask(40, 40)]
    assert len(_fused(sdpa, inputs)) == 1
    _run(sdpa, inputs, dtype=torch.bfloat16)


def test_probabilities_used_elsewhere_are_not_fused():
    """A graph that also returns the probabilities (as a training graph keeps them) keeps the
    unfused ops, and stays right."""

    def fn(q, k, v):
        probs = torch.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1)
        return probs @ v, probs

    inputs = _inputs(*SHAPES * 3)
    assert _fused(fn, inputs) == []
    _run(fn, inputs)


def test_softmax_over_another_dim_is_not_fused():
    def fn(q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1), dim=-2) @ v

    inputs = _inputs(*SHAPES * 3)
    assert _fused(fn, inputs) == []
    _run(fn, inputs)


def test_a_negative_scale_is_not_fused():
    """The running max is kept scaled (-scale * max): only a positive scale keeps its order."""

    def fn(q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1) * -0.5, dim=-1) @ v

    inputs = _inputs(*SHAPES * 3)
    assert _fused(fn, inputs) == []
    _run(fn, inputs)


def test_the_pass_switches_off():
    inputs = _inputs(*SHAPES * 3)
    gm, log = run_pipeline(_graph(causal, inputs), PassSelection.parse({"attention": False}))
    assert not any(isinstance(n.target, FusedAttention) for n in gm.graph.nodes)
    assert "attention" not in [s["pass"] for s in log.steps]


@pytest.mark.parametrize("heads", [3, 10], ids=["masks-shared-per-tile", "mask-per-head"])
def test_a_mask_per_batch_and_head(heads):
    """A mask that differs per head: up to MASKS_SHARED distinct mask blocks are loaded once
    per query tile, more are loaded by each head as it starts."""
    inputs = [*_inputs(*[(2, heads, 20, 8)] * 3), torch.randn(2, heads, 20, 20)]
    assert len(_fused(sdpa, inputs)) == 1
    _run(sdpa, inputs)


def test_the_effects_table_measures_the_pass():
    from hwsim.bridge.passes.effects import pass_effects

    inputs = [*_inputs(*SHAPES * 3), _causal_mask(40, 40)]
    rows = {r["pass"]: r for r in pass_effects(_graph(sdpa, inputs), inputs)}
    attention = rows["attention"]
    assert attention["with"]["total_ns"] < attention["without"]["total_ns"]
    assert attention["with"]["hbm_bytes"] < attention["without"]["hbm_bytes"]


def test_matched_with_every_other_pass_off():
    """Alone, the pass sees the raw decomposition: identity expands before the second bmm and
    the dead log-sum-exp chain hanging off the softmax (both removed with the group)."""
    inputs = [*_inputs(*SHAPES * 3), _causal_mask(40, 40)]
    gm, log = run_pipeline(_graph(sdpa, inputs), PassSelection.only("attention"))
    assert log.steps[0]["attention"] == 1
    gm.graph.lint()
    _run(sdpa, inputs, passes=["attention"])


def test_bf16_compute_of_an_fp32_graph():
    """auto_cast='all' in bf16: the matmul operands, p and the transposes in bf16, the
    scores, statistics and running output fp32; within the bf16 tolerance of eager fp32."""
    inputs = _inputs(*[(1, 2, 130, 64)] * 3)
    precision = Precision("all", "bf16")
    lowered = lower_graph(_graph(causal, inputs), inputs, precision=precision)
    assert any(n.get("attention") for n in lowered.pipeline["fusion"])
    ok = compare(lowered.run(inputs).outputs, causal(*inputs), precision.tolerance(FP32))
    assert ok.ok, ok


def test_keys_beyond_sbuf_lower_the_members_one_by_one():
    """kᵀ and v of one head with 30,000 keys do not fit the kernel's SBUF share: the group
    lowers member by member (the note says why), still right."""
    inputs = _inputs((1, 1, 2, 8), (1, 1, 30000, 8), (1, 1, 30000, 8))
    lowered, _ = _run(unmasked, inputs)
    notes = [n for n in lowered.pipeline["fusion"] if "bmm" in n["group"]]
    assert notes and notes[0]["fused"] is False and "SBUF" in notes[0]["why"]


def _rotated_attention(x, wq, wk, cos, sin):
    """Llama's attention: q and k projected, split into heads ([B, H, S, D]) and rotated
    (``q * cos + rotate_half(q) * sin``), v a head split of x."""
    b, s, hd = x.shape

    def heads(t):
        return t.view(b, s, 4, hd // 4).transpose(1, 2)

    def rotated(t):
        half = t.shape[-1] // 2
        return t * cos + torch.cat((-t[..., half:], t[..., :half]), -1) * sin

    q, k = rotated(heads(x @ wq)), rotated(heads(x @ wk))
    return F.scaled_dot_product_attention(q, k, heads(x))


class _Queues:
    """Records loads; ``held`` says which source patterns SBUF still holds."""

    def __init__(self, held) -> None:
        self.held, self.loads = held, []

    def serves_on_chip(self, dst, src) -> bool:
        return self.held(src)

    def load(self, dst, src) -> None:
        self.loads.append((dst.shape, src.free_sizes, src.offset_bytes))


def _head_loads(held) -> list:
    """The loads ``_load_rows`` emits for 128 rows of q [1, 4, 128, 64] (fp32, each head a
    block of its own, as a rotary embedding leaves q) when SBUF holds what ``held`` says."""
    from types import SimpleNamespace

    import numpy as np

    from hwsim.bridge.dtypes import HW_FP32
    from hwsim.bridge.lowerings.flash_attention import _load_rows, _Slots

    q = SimpleNamespace(
        dtype=HW_FP32,
        name="q",
        shape=(1, 4, 128, 64),
        strides=(32768, 8192, 64, 1),
        offset=0,
    )
    queues = _Queues(held)
    _load_rows(SimpleNamespace(queues=queues), np.zeros((128, 1, 4, 64)), q, _Slots(0, 1, 0, 4), 0)
    return queues.loads


def test_rotated_heads_are_loaded_a_head_at_a_time_only_where_sbuf_holds_them():
    """One load across the heads, unless SBUF holds each head's rows and not the heads
    together (a rotary embedding computed a head at a time): then a load per head, each an
    on-chip copy, instead of the values stored and moved back by a DMA of a descriptor per
    head and row."""
    whole = [((128, 1, 4, 64), (1, 4, 64), 0)]
    assert _head_loads(lambda src: False) == whole
    assert _head_loads(lambda src: len(src.free_sizes) > 1) == whole
    per_head = [((128, 64), (64,), h * 8192 * 4) for h in range(4)]
    assert _head_loads(lambda src: len(src.free_sizes) == 1) == per_head
    assert _head_loads(lambda src: src.offset_bytes == 0 and len(src.free_sizes) == 1) == whole


def test_rotated_attention_computes_what_eager_does():
    inputs = _inputs((1, 128, 256), (256, 256), (256, 256), (128, 64), (128, 64))
    lowered = lower_graph(_graph(_rotated_attention, inputs), inputs, config="trn1")
    assert [s["attention"] for s in lowered.pipeline["steps"] if s["pass"] == "attention"] == [1]
    # the projections contract 256 fp32 products in TensorE's order: not eager's bits
    got = lowered.run(inputs).outputs
    torch.testing.assert_close(got, _rotated_attention(*inputs), rtol=1e-3, atol=2e-4)
