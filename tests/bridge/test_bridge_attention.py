"""The fused CPU SDPA kernel (what eager offload sees) against torch: masks, causal, GQA."""

from __future__ import annotations

import pytest
import torch

from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.registry import OpCall, check_support
from tests.bridge.helpers import check_op

flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default


@pytest.mark.parametrize(
    "shapes, causal",
    [
        (((2, 4, 5, 8), (2, 4, 7, 8)), False),  # more keys than queries
        (((2, 4, 9, 8), (2, 4, 9, 8)), True),
        (((1, 2, 130, 16), (1, 2, 130, 16)), True),  # queries over 128 partitions
    ],
    ids=str,
)
def test_flash_attention_for_cpu(shapes, causal):
    q, kv = shapes
    check_op(lambda q, k, v: flash(q, k, v, 0.0, causal, scale=0.3), [q, kv, kv])


def test_additive_mask_and_grouped_query_heads():
    def fn(q, k, v, mask):
        return flash(q, k, v, attn_mask=mask), flash(q, k[:, :2], v[:, :2], 0.0, True)

    check_op(fn, [(2, 4, 9, 8), (2, 4, 9, 8), (2, 4, 9, 8), (2, 1, 9, 9)])


def test_dropout_is_not_lowered():
    q = torch.randn(1, 1, 3, 4)
    with pytest.raises(Unsupported) as info:
        check_support(OpCall(flash, (q, q, q, 0.5), {}, (q, q[..., 0])))
    assert info.value.reason is Reason.SHAPE
