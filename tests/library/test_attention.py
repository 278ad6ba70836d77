"""attention: causal and full, against torch's scaled_dot_product_attention, on trn2 / trn1 /
tiny with sequence lengths that are not multiples of 128 (and longer than one key block)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hwsim.lang import TensorSpec
from hwsim.library import UnsupportedShapeError
from hwsim.library.attention import attention
from hwsim.library.workloads import attention_reference
from tests.library.helpers import BF16, f64, normal, run_and_compare


def sdpa(q, k, v, causal):
    tq, tk, tv = (torch.tensor(f64(a))[None] for a in (q, k, v))
    return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)[0].numpy()


@pytest.mark.parametrize(
    ("config", "s", "d", "dtype", "causal"),
    [
        ("trn2", 700, 64, BF16, True),  # two key blocks, a partial last query tile
        ("trn2", 300, 128, np.float32, False),
        ("trn1", 600, 128, BF16, True),
        ("tiny", 70, 16, np.float32, True),
    ],
)
def test_matches_torch(config, s, d, dtype, causal):
    rng = np.random.default_rng(0)
    q, k, v = (normal(rng, (s, d), dtype) for _ in range(3))
    result = run_and_compare(attention, (q, k, v), sdpa(q, k, v, causal), config, causal=causal)
    opcodes = {i.OPCODE for st in result.program.cores[0].streams.values() for i in st}
    assert ("affine_select" in opcodes) == causal


def test_numpy_reference_matches_torch():
    q, k, v = (np.random.default_rng(i).standard_normal((9, 4)) for i in range(3))
    for causal in (True, False):
        np.testing.assert_allclose(attention_reference(q, k, v, causal), sdpa(q, k, v, causal))


def test_head_dim_and_shape_errors():
    with pytest.raises(UnsupportedShapeError, match="head dim d=256"):
        attention.build(*(TensorSpec((128, 256), "bf16") for _ in range(3)))
    with pytest.raises(UnsupportedShapeError, match="must all be"):
        attention.build(
            TensorSpec((128, 64), "bf16"),
            TensorSpec((64, 64), "bf16"),
            TensorSpec((128, 64), "bf16"),
        )
