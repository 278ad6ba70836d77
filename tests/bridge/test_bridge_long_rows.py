"""Row ops over rows longer than one SBUF tile (config 'tiny': 16 KiB per partition), chunked
along the row: softmax family, layer norm, var, cumsum; and a model with a 50257-wide vocab."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hwsim import bridge
from hwsim.bridge.tiling.rows import chunk_count
from tests.bridge.helpers import check_op

aten = torch.ops.aten

#: tiny's softmax budget: 3/4 of 16 KiB over 32 bytes per fp32 element (3 load + 3 store
#: buffers of 4 bytes, one double-buffered fp32 temporary) = 384 elements per chunk.
TINY_SOFTMAX_CHUNK = 16384 * 3 // 4 // (2 * 3 * 4 + 2 * 4)


def engine_counts(run) -> dict[str, int]:
    return {k: v.instructions for k, v in run.result.summary.engines.items()}


def masked_rows(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random scores: row 0 all -inf, row 1 -inf except its last element (every chunk but the
    last is fully masked), other rows with scattered -inf entries."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(shape, generator=generator)
    x[0] = float("-inf")
    x[1, :-1] = float("-inf")
    x[2:][torch.rand(x[2:].shape, generator=generator) < 0.3] = float("-inf")
    return x.to(dtype)


def test_log_softmax_over_gpt2_vocabulary_and_its_instruction_count():
    """k chunks per row tile: pass 1 takes 3 + 5 (k - 1) instructions (VectorE 3k - 1, ScalarE
    2k - 1), log s one ScalarE instruction, pass 2 one VectorE tensor_scalar per chunk; the row
    is loaded twice and stored once."""
    run = check_op(lambda x: torch.log_softmax(x, -1), [(3, 50257)])
    k = chunk_count(50257, TINY_SOFTMAX_CHUNK)
    assert k == 131
    counts = engine_counts(run)
    assert (counts["vector"], counts["scalar"]) == (4 * k - 1, 2 * k)
    assert (counts["sync"], counts["gpsimd"]) == (2 * k, k)  # DMA triggers: loads, stores


def test_softmax_instruction_count():
    run = check_op(lambda x: torch.softmax(x, -1), [(3, 1001)])
    k = chunk_count(1001, TINY_SOFTMAX_CHUNK)
    assert k == 3
    counts = engine_counts(run)
    assert (counts["vector"], counts["scalar"]) == (3 * k, 3 * k)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_long_odd_rows_with_minus_infinity(log, dtype):
    """All -inf rows give NaN as in torch; a row masked but for its last chunk is exact."""
    fn = torch.log_softmax if log else torch.softmax
    check_op(lambda x: fn(x, -1), [masked_rows((5, 1001), dtype)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_safe_softmax_long_rows_fully_masked(dtype):
    check_op(lambda x: aten._safe_softmax(x, -1), [masked_rows((35, 777), dtype)])


def test_softmax_long_rows_along_a_leading_dim():
    """The row is strided (dim 0): chunks are strided windows, rows on partitions."""
    check_op(lambda x: (torch.softmax(x, 0), torch.log_softmax(x, 0)), [(999, 3, 40)])


@pytest.mark.parametrize(
    "shape, normalized, dtype",
    [
        ((3, 20000), 1, torch.float32),  # 79 chunks: the statistics tile folds 3 times
        ((4, 30, 70), 2, torch.float32),  # the row spans two dims
        ((33, 1001), 1, torch.bfloat16),  # two row tiles (tiny has 32 partitions)
    ],
    ids=str,
)
def test_layer_norm_long_rows(shape, normalized, dtype):
    dims = shape[-normalized:]

    def fn(x, w, b):
        return aten.native_layer_norm(x, dims, w, b, 1e-5)

    check_op(fn, [shape, dims, dims], dtype)


@pytest.mark.parametrize("affine", ["weight", "none"])
def test_layer_norm_long_rows_partial_affine(affine):
    def fn(x, w):
        return F.layer_norm(x + 3.0, (1001,), w if affine == "weight" else None, None)

    check_op(fn, [(5, 1001), (1001,)])


@pytest.mark.parametrize(
    "shape, dims, correction", [((3, 20000), -1, 1), ((50, 7, 90), (0, 2), 0)], ids=str
)
def test_var_and_var_mean_long_rows(shape, dims, correction):
    def fn(x):
        return torch.var(x, dims, correction=correction), torch.var_mean(x, dims)

    check_op(fn, [shape])


@pytest.mark.parametrize(
    "x, dim",
    [
        ((3, 20000), -1),
        ((5001, 3), 0),
        (torch.randint(-100, 100, (3, 7001), generator=torch.Generator().manual_seed(0)), -1),
        (torch.rand(3, 7001, generator=torch.Generator().manual_seed(0)) > 0.5, 1),
    ],
    ids=["float", "dim0", "int64", "bool"],
)
def test_cumsum_long_rows_carry_across_chunks(x, dim):
    check_op(lambda t: torch.cumsum(t, dim), [x])


def test_cumsum_instruction_count():
    """Chunks of c elements: 2 ceil(log2 c) scan steps, plus the carry add after the first."""
    run = check_op(lambda t: torch.cumsum(t, -1), [(3, 1000)])
    budget = 16384 // 2 // (2 * 3 * 4)  # free_budget(2 operands, fp32): 341
    k = chunk_count(1000, budget)
    chunk = -(-1000 // k)
    assert (k, chunk) == (3, 334)
    steps = 2 * math.ceil(math.log2(chunk))
    assert engine_counts(run)["vector"] == k * steps + (k - 1)


def test_model_ending_in_log_softmax_over_gpt2_vocabulary_runs_on_the_device():
    """A GPT-2-like head (lm_head has no bias) over the real vocabulary, on tiny's SBUF."""
    torch.manual_seed(0)
    head = nn.Linear(8, 50257, bias=False)
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), head, nn.LogSoftmax(-1))
    x = torch.randn(2, 8)
    options = {"config": "tiny", "fallback": "error", "auto_cast": "none"}  # exact rows
    with torch.no_grad():
        got = torch.compile(model, backend="hwsim", options=options)(x)
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
    report = bridge.dynamo.last_report()
    assert report.fallbacks() == []
    assert "aten._log_softmax.default" in {r.op for r in report.lowered()}
