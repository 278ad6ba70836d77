"""Matmul lowerings against torch: odd sizes, transposed operands, bias, alpha/beta, batches."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hwsim.bridge.context import TilingOptions
from tests.bridge.helpers import check_op

# (M, K, N) on the tiny config (32 PE rows/cols): K=257 is 9 K tiles with a partial one, M=130
# five stationary tiles, N=513 two PSUM banks' worth of columns.
MKN = [(1, 1, 1), (3, 7, 130), (130, 257, 7), (33, 65, 513), (1, 130, 257)]


@pytest.mark.parametrize("mkn", MKN, ids=str)
def test_mm(mkn):
    m, k, n = mkn
    check_op(torch.mm, [(m, k), (k, n)])


@pytest.mark.parametrize("mkn", MKN, ids=str)
def test_linear_is_t_plus_addmm(mkn):
    m, k, n = mkn
    check_op(F.linear, [(m, k), (n, k), (n,)])


def test_mm_with_transposed_operands():
    # a^T with M contiguous and b^T with N contiguous: direct (non-transposing) loads.
    check_op(lambda a, b: a.t() @ b.t(), [(65, 33), (130, 65)])


def test_addmm_alpha_beta_and_2d_bias():
    check_op(
        lambda bias, a, b: torch.addmm(bias, a, b, beta=0.5, alpha=-2.0),
        [(33, 130), (33, 65), (65, 130)],
    )


def test_addmm_beta_zero_ignores_bias():
    check_op(lambda bias, a, b: torch.addmm(bias, a, b, beta=0), [(130,), (3, 7), (7, 130)])


def test_bmm_and_batched_matmul():
    check_op(torch.bmm, [(3, 33, 65), (3, 65, 7)])
    check_op(torch.matmul, [(2, 3, 7, 65), (65, 130)])


def test_k_blocks_accumulate_in_psum():
    # A tiny SBUF share forces several K blocks (one K tile each) into the same PSUM bank.
    check_op(torch.mm, [(33, 257), (257, 65)], tiling=TilingOptions(matmul_sbuf_share=0.01))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_linear(dtype):
    check_op(F.linear, [(3, 130), (257, 130), (257,)], dtype)


def test_trn2_full_tiles():
    check_op(F.linear, [(257, 300), (513, 300), (513,)], config="trn2")


def test_wide_linear_with_bias_fits_a_small_sbuf():
    """On tiny (16 KiB per partition) the result and bias rings of 512-wide tiles alone take
    10 KiB: the tiler narrows the output tiles instead of running out of SBUF."""
    run = check_op(
        lambda x, w, b: torch.nn.functional.linear(x, w, b), [(4, 8), (5000, 8), (5000,)]
    )
    matmuls = [r for r in run.result.trace.instructions if r.instruction.OPCODE == "nc_matmul"]
    assert len(matmuls) == 5000 // 256 + 1  # 256-wide output tiles, not the bank's 512
