"""The three matmul kernels: numerics on trn2 / trn1 / tiny incl. ragged shapes, their errors,
and that each optimisation level is faster than the one before."""

from __future__ import annotations

import numpy as np
import pytest

from hwsim.lang import TensorSpec
from hwsim.library import UnsupportedShapeError, matmul_basic, matmul_blocked, matmul_optimized
from tests.library.helpers import BF16, f64, normal, run_and_compare

KERNELS = [matmul_basic, matmul_blocked, matmul_optimized]


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
@pytest.mark.parametrize(
    ("config", "k", "m", "n", "dtype"),
    [
        ("trn2", 256, 256, 1024, np.float32),
        ("trn2", 300, 200, 700, BF16),  # no dimension a multiple of a tile
        ("tiny", 70, 100, 130, np.float32),
    ],
)
def test_matches_numpy(kernel, config, k, m, n, dtype):
    rng = np.random.default_rng(0)
    lhs_t, rhs = normal(rng, (k, m), dtype), normal(rng, (k, n), dtype)
    run_and_compare(kernel, (lhs_t, rhs), f64(lhs_t).T @ f64(rhs), config)


def test_optimized_folds_k_blocks_through_sbuf_on_trn1():
    rng = np.random.default_rng(1)
    lhs_t, rhs = normal(rng, (640, 256), BF16), normal(rng, (640, 1100), BF16)
    result = run_and_compare(
        matmul_optimized, (lhs_t, rhs), f64(lhs_t).T @ f64(rhs), "trn1", TILES_IN_BLOCK_K=2
    )
    adds = [i for i in result.program.cores[0].streams["vector"] if i.OPCODE == "tensor_tensor"]
    assert adds, "K blocks of 2 tiles over K=640 fold partial sums with tensor_tensor adds"


def test_optimized_tutorial_blocks_shrink_to_fit_a_small_sbuf():
    rng = np.random.default_rng(2)
    lhs_t, rhs = normal(rng, (96, 64), np.float32), normal(rng, (96, 600), np.float32)
    run_and_compare(matmul_optimized, (lhs_t, rhs), f64(lhs_t).T @ f64(rhs), "tiny")


def test_unsupported_shapes_and_blocks_are_clear_errors():
    with pytest.raises(UnsupportedShapeError, match="contraction mismatch"):
        matmul_basic.build(TensorSpec((128, 64), "bf16"), TensorSpec((256, 64), "bf16"))
    with pytest.raises(UnsupportedShapeError, match="share one float dtype"):
        matmul_blocked.build(TensorSpec((128, 64), "bf16"), TensorSpec((128, 64), "fp32"))
    with pytest.raises(UnsupportedShapeError, match="TILES_IN_BLOCK"):
        matmul_optimized.build(
            TensorSpec((4096, 4096), "fp32"),
            TensorSpec((4096, 4096), "fp32"),
            TILES_IN_BLOCK_M=32,
            TILES_IN_BLOCK_N=8,
            config="trn1",
        )


def test_each_level_is_faster_than_the_one_before():
    specs = (TensorSpec((1024, 512), "bf16"), TensorSpec((1024, 2048), "bf16"))
    times = [k(*specs, config="trn2", numerics=False).summary.total_ns for k in KERNELS]
    assert times[0] > 1.5 * times[1] and times[1] > 1.2 * times[2], times
