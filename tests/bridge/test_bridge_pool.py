"""max_pool2d_with_indices (values and torch's exact int64 indices, ties included) and
_adaptive_avg_pool2d against torch on the tiny config (32 partitions: 40 planes take two
partition tiles)."""

from __future__ import annotations

import pytest
import torch

from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.registry import OpCall, check_support
from tests.bridge.helpers import check_op, make_input

aten = torch.ops.aten


def max_pool(**kwargs):
    return lambda x: aten.max_pool2d_with_indices(x, **kwargs)


def check_max_pool(x, dtype=torch.float32, **kwargs):
    """check_op, plus indices equal to torch's exactly (not within a tolerance)."""
    run = check_op(max_pool(**kwargs), [x], dtype)
    inputs = x if isinstance(x, torch.Tensor) else make_input(x, dtype, 0, False)  # check_op's
    _, want = aten.max_pool2d_with_indices(inputs, **kwargs)
    _, got = run.outputs
    assert got.dtype == torch.int64 and torch.equal(got, want)


@pytest.mark.parametrize(
    "shape, kwargs",
    [
        ((2, 3, 9, 9), dict(kernel_size=[3, 3], stride=[2, 2], padding=[1, 1])),  # ResNet stem
        ((1, 40, 7, 10), dict(kernel_size=[3, 2], stride=[1, 2], padding=[1, 1], dilation=[2, 1])),
        ((2, 5, 8, 8), dict(kernel_size=[2, 2])),  # stride defaults to the kernel
        ((3, 7, 7), dict(kernel_size=[3, 3], stride=[2, 2], ceil_mode=True)),  # unbatched
        ((1, 2, 10, 11), dict(kernel_size=[2, 3], stride=[3, 2], padding=[1, 1], ceil_mode=True)),
        ((1, 2, 5, 6), dict(kernel_size=[1, 1], stride=[2, 2])),
    ],
    ids=str,
)
def test_max_pool_values_and_indices(shape, kwargs):
    check_max_pool(shape, **kwargs)


def test_max_pool_ties_take_the_first_maximum():
    plateau = torch.zeros(1, 2, 6, 6)
    plateau[0, 0, 2:4, 2:4] = 1.0
    check_max_pool(plateau, kernel_size=[3, 3], stride=[1, 1], padding=[1, 1])
    few_values = torch.randint(0, 3, (2, 3, 7, 7), generator=torch.Generator().manual_seed(0))
    check_max_pool(few_values.float(), kernel_size=[3, 3], stride=[2, 2], padding=[1, 1])


def test_max_pool_negative_values_see_padding_as_minus_infinity():
    check_max_pool(-torch.rand(1, 3, 5, 5) - 1.0, kernel_size=[3, 3], padding=[1, 1])


def test_max_pool_bf16():
    check_max_pool((2, 3, 9, 9), torch.bfloat16, kernel_size=[3, 3], stride=[2, 2], padding=[1, 1])


@pytest.mark.parametrize(
    "shape, size",
    [
        ((2, 3, 8, 12), (2, 3)),  # windows tile the input: one reduce per block
        ((2, 3, 7, 10), (3, 4)),  # overlapping windows of varying size
        ((1, 40, 5, 5), (5, 2)),
        ((2, 3, 6, 6), (1, 1)),
        ((3, 9, 7), (2, 2)),  # unbatched
    ],
    ids=str,
)
def test_adaptive_avg_pool(shape, size):
    check_op(lambda x: aten._adaptive_avg_pool2d(x, list(size)), [shape])


def test_integer_max_pool_is_refused():
    x = torch.zeros(1, 1, 4, 4, dtype=torch.int64)
    call = OpCall(aten.max_pool2d_with_indices.default, (x, [2, 2]), {}, (x, x))
    with pytest.raises(Unsupported, match="floats only") as error:
        check_support(call)
    assert error.value.reason is Reason.DTYPE
