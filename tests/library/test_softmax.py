"""softmax: numerics on trn2 / trn1 / tiny (ragged rows), the engines it uses, its errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hwsim.lang import TensorSpec
from hwsim.library import UnsupportedShapeError
from hwsim.library.softmax import softmax
from hwsim.library.workloads import softmax_reference
from tests.library.helpers import BF16, f64, normal, run_and_compare


@pytest.mark.parametrize(
    ("config", "shape", "dtype"),
    [
        ("trn2", (256, 1000), np.float32),
        ("trn2", (300, 512), BF16),
        ("trn1", (200, 640), np.float32),
        ("tiny", (70, 100), np.float32),
    ],
)
def test_matches_torch(config, shape, dtype):
    x = normal(np.random.default_rng(0), shape, dtype, 3.0)
    expected = torch.softmax(torch.tensor(f64(x)), dim=1).numpy()
    result = run_and_compare(softmax, (x,), expected, config)
    opcodes = {i.OPCODE for s in result.program.cores[0].streams.values() for i in s}
    assert {"tensor_reduce", "activation_reduce", "reciprocal", "tensor_scalar"} <= opcodes


def test_numpy_reference_matches_torch():
    x = np.random.default_rng(1).standard_normal((5, 7))
    np.testing.assert_allclose(softmax_reference(x), torch.softmax(torch.tensor(x), 1).numpy())


def test_too_wide_rows_are_a_clear_error():
    with pytest.raises(UnsupportedShapeError, match="at most 7168 elements per row on trn2"):
        softmax.build(TensorSpec((128, 8000), "fp32"))
    with pytest.raises(UnsupportedShapeError, match="64K"):
        softmax.build(TensorSpec((128, 70_000), "bf16"))
    with pytest.raises(UnsupportedShapeError, match="2-D"):
        softmax.build(TensorSpec((4, 128, 128), "fp32"))
