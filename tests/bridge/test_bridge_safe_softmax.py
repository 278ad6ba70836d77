"""_safe_softmax (sdpa with a mask): softmax, except rows that are entirely -inf give zeros."""

from __future__ import annotations

import pytest
import torch

from hwsim.bridge.errors import Unsupported
from hwsim.bridge.registry import OpCall, check_support
from tests.bridge.helpers import check_op

aten = torch.ops.aten


def masked(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random scores with row 0 fully masked and a causal-like -inf pattern elsewhere."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    x[..., 0, :] = float("-inf")
    if shape[-1] > 2:
        x[..., 1:, 2:] = float("-inf")
    return x


@pytest.mark.parametrize("shape", [(3, 7), (2, 130, 9), (130, 257)], ids=str)
def test_safe_softmax_zeroes_fully_masked_rows(shape):
    check_op(lambda x: aten._safe_softmax(x, -1), [masked(shape)])


def test_safe_softmax_over_a_leading_dim_and_bf16():
    x = masked((5, 6, 4)).transpose(0, 2).contiguous()  # fully masked columns along dim 2
    check_op(lambda t: aten._safe_softmax(t, 2), [x])
    check_op(lambda t: aten._safe_softmax(t, -1), [masked((4, 33), torch.bfloat16)])


def test_safe_softmax_without_masks_is_softmax():
    check_op(lambda x: aten._safe_softmax(x, 1), [(3, 130, 5)])


def test_safe_softmax_refuses_an_upcast():
    x = torch.randn(2, 3, dtype=torch.bfloat16)
    call = OpCall(aten._safe_softmax.default, (x, -1, torch.float32), {}, x.float())
    with pytest.raises(Unsupported, match="upcast"):
        check_support(call)
