"""rmsnorm: numerics against torch on trn2 / trn1 / tiny."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hwsim.lang import TensorSpec
from hwsim.library import UnsupportedShapeError
from hwsim.library.norm import rmsnorm
from tests.library.helpers import BF16, f64, normal, run_and_compare


@pytest.mark.parametrize(
    ("config", "shape", "dtype"),
    [
        ("trn2", (256, 1000), np.float32),
        ("trn2", (300, 768), BF16),
        ("trn1", (130, 256), np.float32),
        ("tiny", (70, 100), np.float32),
    ],
)
def test_matches_torch(config, shape, dtype):
    rng = np.random.default_rng(0)
    x, gamma = normal(rng, shape, dtype, 2.0), normal(rng, shape[1:], dtype)
    expected = torch.nn.functional.rms_norm(
        torch.tensor(f64(x)), shape[1:], torch.tensor(f64(gamma)), 1e-6
    ).numpy()
    result = run_and_compare(rmsnorm, (x, gamma), expected, config)
    row_tiles = -(-shape[0] // (32 if config == "tiny" else 128))
    vector = [i.OPCODE for i in result.program.cores[0].streams["vector"]]
    assert vector.count("scalar_tensor_tensor") == row_tiles  # one VectorE pass per row tile


def test_too_many_features_is_a_clear_error():
    with pytest.raises(UnsupportedShapeError, match="do not fit SBUF"):
        rmsnorm.build(TensorSpec((128, 60_000), "fp32"), TensorSpec((60_000,), "fp32"))
