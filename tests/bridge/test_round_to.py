"""auto_cast.round_to's bf16 rounding (ml_dtypes) against torch's own cast: the same values and
the same layout, on every class of fp32 value."""

from __future__ import annotations

import numpy as np
import torch

from hwsim.bridge.auto_cast import round_to
from hwsim.bridge.precision import Precision


def test_bf16_rounding_is_torchs_on_every_exponent_and_tie():
    high = np.arange(65536, dtype=np.uint32) << 16  # every sign and exponent, NaN and inf
    low = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x4000, 0xC000], np.uint32)
    bits = (high[:, None] | low[None, :]).reshape(-1)
    x = torch.from_numpy(bits.view(np.float32).copy())
    got = round_to(x, Precision.of("matmult", "bf16"))
    want = x.to(torch.bfloat16).float()
    same = (got.view(torch.int32) == want.view(torch.int32)) | (got.isnan() & want.isnan())
    assert bool(same.all())


def test_a_transposed_operand_keeps_its_layout():
    x = torch.randn(64, 48).t()
    got = round_to(x, Precision.of("matmult", "bf16"))
    assert got.stride() == x.stride()
    assert torch.equal(got, x.to(torch.bfloat16).float())
