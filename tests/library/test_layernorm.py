"""layernorm: numerics against torch on trn2 / trn1 / tiny, features beyond bn_stats_fmax."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hwsim.lang import TensorSpec
from hwsim.library import UnsupportedShapeError
from hwsim.library.norm import layernorm
from tests.library.helpers import BF16, f64, normal, run_and_compare


@pytest.mark.parametrize(
    ("config", "shape", "dtype"),
    [
        ("trn2", (256, 1000), np.float32),  # two bn_stats chunks (512 + 488)
        ("trn2", (300, 768), BF16),
        ("trn1", (130, 256), np.float32),
        ("tiny", (70, 100), np.float32),
    ],
)
def test_matches_torch(config, shape, dtype):
    rng = np.random.default_rng(0)
    x = normal(rng, shape, dtype, 2.0)
    gamma, beta = normal(rng, shape[1:], dtype), normal(rng, shape[1:], dtype)
    expected = torch.nn.functional.layer_norm(
        torch.tensor(f64(x)), shape[1:], torch.tensor(f64(gamma)), torch.tensor(f64(beta)), 1e-5
    ).numpy()
    run_and_compare(layernorm, (x, gamma, beta), expected, config)


def test_bad_parameters_are_clear_errors():
    with pytest.raises(
        UnsupportedShapeError, match=r"gamma must be a float vector of shape \(64,\)"
    ):
        layernorm.build(
            TensorSpec((128, 64), "fp32"), TensorSpec((32,), "fp32"), TensorSpec((64,), "fp32")
        )
