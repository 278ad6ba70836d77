"""conv2d_3x3: against torch's conv2d (padding 1) on trn2 / trn1 / tiny, channel counts that
are not multiples of 128, with and without bias."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hwsim.lang import TensorSpec
from hwsim.library import UnsupportedShapeError
from hwsim.library.conv import conv2d_3x3
from hwsim.library.workloads import conv2d_3x3_reference
from tests.library.helpers import BF16, f64, normal, run_and_compare


@pytest.mark.parametrize(
    ("config", "n", "c_in", "h", "w", "c_out", "dtype", "bias"),
    [
        ("trn2", 2, 200, 12, 20, 150, BF16, True),  # 2 input and 2 output channel tiles
        ("trn2", 1, 64, 16, 16, 64, np.float32, False),
        ("trn1", 1, 128, 24, 24, 96, BF16, True),
        ("tiny", 1, 40, 9, 7, 20, np.float32, True),
    ],
)
def test_matches_torch(config, n, c_in, h, w, c_out, dtype, bias):
    rng = np.random.default_rng(0)
    x = normal(rng, (n, c_in, h, w), dtype)
    weight = normal(rng, (c_out, c_in, 3, 3), dtype, 1 / math.sqrt(9 * c_in))
    b = normal(rng, (c_out,), dtype) if bias else None
    expected = torch.nn.functional.conv2d(
        torch.tensor(f64(x)),
        torch.tensor(f64(weight)),
        None if b is None else torch.tensor(f64(b)),
        padding=1,
    ).numpy()
    args = (x, weight, b) if bias else (x, weight)
    result = run_and_compare(conv2d_3x3, args, expected, config)
    matmuls = len(result.program.cores[0].streams["tensor"])
    assert matmuls >= 9 * n  # nine shifted matmuls per output group (plus weight transposes)


def test_numpy_reference_matches_torch():
    rng = np.random.default_rng(1)
    x, w, b = (
        rng.standard_normal((2, 3, 5, 6)),
        rng.standard_normal((4, 3, 3, 3)),
        rng.standard_normal(4),
    )
    expected = torch.nn.functional.conv2d(
        torch.tensor(x), torch.tensor(w), torch.tensor(b), padding=1
    )
    np.testing.assert_allclose(
        conv2d_3x3_reference(x, w, b), expected.numpy(), rtol=1e-10, atol=1e-12
    )


def test_unsupported_shapes_are_clear_errors():
    with pytest.raises(UnsupportedShapeError, match=r"w must be \[C_out, C_in=8, 3, 3\]"):
        conv2d_3x3.build(TensorSpec((1, 8, 8, 8), "bf16"), TensorSpec((8, 8, 5, 5), "bf16"))
    with pytest.raises(UnsupportedShapeError, match="W=600"):
        conv2d_3x3.build(TensorSpec((1, 8, 8, 600), "bf16"), TensorSpec((8, 8, 3, 3), "bf16"))
