"""constant_pad_nd against torch: any rank, asymmetric and negative (cropping) pads, fill values,
integer and bool tensors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hwsim.bridge.errors import Unsupported
from hwsim.bridge.registry import OpCall, check_support
from tests.bridge.helpers import check_op

CASES = [
    ((7,), (2, 3), 0.0),
    ((3, 130), (1, 1, 2, 0), 1.5),
    ((2, 3, 5, 7), (1, 1, 1, 1), 0.0),  # a padded conv's input
    ((2, 3, 5, 7), (-1, 2, 0, -2), -2.0),  # crops and pads at once
    ((4, 257), (-3, -4), 0.0),  # crop only: no fill
    ((2, 1, 3, 4, 5), (1, 0, 0, 2, 3, 1), float("-inf")),
    ((130, 3), (0, 0, 0, 0), 0.0),
    ((5,), (-5, 2), 3.0),  # everything cropped: all fill
]


@pytest.mark.parametrize("shape, pad, value", CASES, ids=str)
def test_constant_pad_nd(shape, pad, value):
    check_op(lambda x: torch.ops.aten.constant_pad_nd(x, pad, value), [shape])


def test_pad_bf16_and_functional_pad():
    check_op(lambda x: F.pad(x, (2, 1, 1, 3), value=0.25), [(3, 6, 9)], torch.bfloat16)


def test_pad_integers_and_bools():
    ints = torch.arange(-6, 6).reshape(3, 4)
    check_op(lambda x: torch.ops.aten.constant_pad_nd(x, [1, 2, -1, 0], 7), [ints])
    flags = ints > 0
    check_op(lambda x: torch.ops.aten.constant_pad_nd(x, [1, 1], 1), [flags])


def test_pad_refuses_an_int32_overflowing_fill():
    x = torch.zeros(3, dtype=torch.int64)
    out = torch.zeros(5, dtype=torch.int64)
    with pytest.raises(Unsupported, match="int32"):
        check_support(OpCall(torch.ops.aten.constant_pad_nd.default, (x, [1, 1], 2**40), {}, out))
