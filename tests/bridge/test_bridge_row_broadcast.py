"""Rows every partition reads (a bias, a norm's gamma) broadcast on chip (residency.broadcast):
moved and replicated once per loop, not once per row block; the pool the rows of graph inputs
stay in is as large as those rows need, so the tilers keep the rest of SBUF."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from hwsim.bridge.graph_lowering import lower_graph
from hwsim.bridge.residency.broadcast import (
    ROW_POOL_SHARE,
    input_rows,
    row_pool_bytes,
)
from hwsim.isa.tensor_ops import NcMatmul

TRN1_SBUF = 196_608  # bytes per partition


def _layer_norm(x, weight, bias):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias)


def _lower_norm(rows: int, width: int, passes="all"):
    g = torch.Generator().manual_seed(4)
    inputs = [torch.randn(rows, width, generator=g) for _ in range(1)]
    inputs += [torch.randn(width, generator=g), torch.randn(width, generator=g)]
    graph = make_fx(_layer_norm)(*inputs)
    return lower_graph(graph, inputs, config="trn1", passes=passes), inputs


def _ones_matmuls(lowered) -> int:
    return sum(
        1
        for _, _, ins in lowered.program.cores[0].instructions()
        if isinstance(ins, NcMatmul) and ins.is_stationary_onezero
    )


def test_a_norm_broadcasts_gamma_and_beta_once_for_all_its_row_blocks():
    """ViT's 197 tokens are two row blocks (128 and 69 rows). The second reads the same gamma
    and beta on fewer partitions: the first block's tiles, not a second broadcast. 768 fp32
    columns are two PSUM banks' worth (512 + 256), so each row takes two ones-matmuls."""
    lowered, inputs = _lower_norm(197, 768)
    step = next(s for s in lowered.pipeline["steps"] if s["pass"] == "row_broadcast")
    assert step["rows_broadcast"] == 2
    assert _ones_matmuls(lowered) == 2 * 2
    off, _ = _lower_norm(197, 768, passes={"row_broadcast": False})
    assert _ones_matmuls(off) == 0
    # 1 x v in fp32: the replicated rows are the rows, so the norm is the same bits
    assert torch.equal(lowered.run(inputs).outputs, off.run(inputs).outputs)
    torch.testing.assert_close(lowered.run(inputs).outputs, _layer_norm(*inputs))


def test_a_bias_is_broadcast_once_for_all_the_row_blocks_of_an_elementwise_op():
    def scaled_plus_bias(x, b):
        return x * 2.0 + b

    g = torch.Generator().manual_seed(5)
    inputs = [torch.randn(197, 768, generator=g), torch.randn(768, generator=g)]
    graph = make_fx(scaled_plus_bias)(*inputs)
    lowered = lower_graph(graph, inputs, config="trn1")
    step = next(s for s in lowered.pipeline["steps"] if s["pass"] == "row_broadcast")
    assert (step["rows_broadcast"], _ones_matmuls(lowered)) == (1, 2)
    off = lower_graph(graph, inputs, config="trn1", passes={"row_broadcast": False})
    assert torch.equal(lowered.run(inputs).outputs, off.run(inputs).outputs)
    torch.testing.assert_close(lowered.run(inputs).outputs, scaled_plus_bias(*inputs))


def test_input_rows_are_the_inputs_of_one_row():
    shapes = [(768,), (1, 3072), (197, 768), (1, 1, 768), (3072, 768), ()]
    assert input_rows(shapes) == [768, 3072, 768]


def test_no_wide_row_reserves_no_pool():
    """Rows of fewer than 2 KiB stay partition-broadcast DMAs: nothing to pool."""
    assert row_pool_bytes([], 128, TRN1_SBUF) == 0
    assert row_pool_bytes([128, 511], 128, TRN1_SBUF) == 0


def test_the_pool_is_the_widest_row_when_every_row_fits_beside_it():
    """ViT-base: per layer nine 768-wide rows and one 3072-wide bias, 12 layers: 479 KiB of
    fp32 rows, which 128 partitions of 12 KiB (the widest row) hold in any order; beside them,
    the ones tile."""
    vit = [768] * 9 * 12 + [3072] * 12
    ones = 128 * 4  # the [P, P] fp32 ones tile the broadcasts read
    assert row_pool_bytes(vit, 128, TRN1_SBUF) == 3072 * 4 + ones
    assert row_pool_bytes(vit, 128, TRN1_SBUF) < TRN1_SBUF * ROW_POOL_SHARE


def test_the_pool_grows_past_the_widest_row_so_every_row_fits():
    """200 rows of 4 KiB (800 KiB): first fit leaves at most one partition half full, so a
    pool of C bytes on 128 partitions holds them when 2 x 800 KiB / C + 1 <= 128."""
    rows = [1024] * 200
    total = 200 * 4096
    assert -(-2 * total // 127) == 12_901  # and the ones tile's 512, in 128-byte lines: 13,440
    assert row_pool_bytes(rows, 128, TRN1_SBUF) == 13_440


def test_the_pool_takes_no_more_than_its_share_of_sbuf():
    """BERT-large: 24 layers of nine 1024-wide rows and a 4096-wide bias, 1.2 MiB of fp32 rows,
    would want 20 KiB a partition; the pool stops at 1/12 of SBUF (rows past it get tiles of
    their own when they are needed)."""
    rows = ([1024] * 9 + [4096]) * 24
    assert row_pool_bytes(rows, 128, TRN1_SBUF) == TRN1_SBUF // 12 == 16_384
