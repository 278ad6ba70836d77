"""mlp: GELU / SiLU against torch on trn2 / trn1 / tiny with ragged sizes; argument errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hwsim.lang import TensorSpec
from hwsim.library import UnsupportedShapeError
from hwsim.library.mlp import mlp
from hwsim.library.workloads import mlp_reference
from tests.library.helpers import BF16, f64, normal, run_and_compare

ACT = {"gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}


@pytest.mark.parametrize(
    ("config", "t", "d", "f", "e", "dtype", "activation"),
    [
        ("trn2", 256, 256, 512, 256, np.float32, "gelu"),
        ("trn2", 300, 200, 700, 100, BF16, "silu"),
        ("trn1", 130, 128, 384, 192, BF16, "gelu"),
        ("tiny", 70, 40, 100, 50, np.float32, "silu"),
    ],
)
def test_matches_torch(config, t, d, f, e, dtype, activation):
    rng = np.random.default_rng(0)
    x = normal(rng, (t, d), dtype)
    w1, w2 = (
        normal(rng, (d, f), dtype, 1 / math.sqrt(d)),
        normal(rng, (f, e), dtype, 1 / math.sqrt(f)),
    )
    tx, t1, t2 = (torch.tensor(f64(a)) for a in (x, w1, w2))
    expected = (ACT[activation](tx @ t1) @ t2).numpy()
    run_and_compare(mlp, (x, w1, w2), expected, config, activation=activation)


@pytest.mark.parametrize("activation", ["gelu", "silu", "relu", "gelu_tanh"])
def test_numpy_reference_matches_torch(activation):
    rng = np.random.default_rng(1)
    x, w1, w2 = (
        rng.standard_normal((4, 3)),
        rng.standard_normal((3, 5)),
        rng.standard_normal((5, 2)),
    )
    functions = {
        "gelu": torch.nn.functional.gelu,
        "silu": torch.nn.functional.silu,
        "relu": torch.relu,
        "gelu_tanh": lambda h: torch.nn.functional.gelu(h, approximate="tanh"),
    }
    tx, t1, t2 = (torch.tensor(a) for a in (x, w1, w2))
    expected = (functions[activation](tx @ t1) @ t2).numpy()
    np.testing.assert_allclose(mlp_reference(x, w1, w2, activation), expected, rtol=1e-12)


def test_argument_errors():
    x, w1, w2 = (
        TensorSpec((64, 32), "bf16"),
        TensorSpec((32, 48), "bf16"),
        TensorSpec((48, 16), "bf16"),
    )
    with pytest.raises(UnsupportedShapeError, match="activation='tanh'"):
        mlp.build(x, w1, w2, "tanh")
    with pytest.raises(UnsupportedShapeError, match="do not chain"):
        mlp.build(x, w2, w1)
    with pytest.raises(UnsupportedShapeError, match="stay resident"):
        mlp.build(
            TensorSpec((64, 4096), "fp32"),
            TensorSpec((4096, 8192), "fp32"),
            TensorSpec((8192, 64), "fp32"),
        )
