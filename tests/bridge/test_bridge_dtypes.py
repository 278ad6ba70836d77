"""int64 and bool on the device (int32 and uint8 representations), casts, tensor constants."""

from __future__ import annotations

import pytest
import torch

from hwsim.bridge.dtypes import Int64RangeError
from tests.bridge.helpers import check_op


def test_int64_and_bool_inputs_and_outputs_round_trip():
    ints = torch.tensor([[-(2**31), 5, 2**31 - 1], [0, -7, 3]])
    flags = torch.tensor([True, False, True])
    run = check_op(lambda i, f: (i, f, i[:, :2] + 1, ~f), [ints, flags])
    assert [t.dtype for t in run.outputs] == [torch.int64, torch.bool, torch.int64, torch.bool]


def test_int64_input_outside_int32_is_an_error_naming_it():
    with pytest.raises(Int64RangeError, match=r"int64 input \w+ holds 2147483648"):
        check_op(lambda i: i * 2, [torch.tensor([1, 2**31])])


@pytest.mark.parametrize(
    "target", [torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool], ids=str
)
def test_float_to_integer_truncates_and_to_bool_tests_nonzero(target):
    x = torch.tensor([-2.7, -1.0, -0.5, -0.0, 0.3, 0.999, 1.5, 99.9])
    if target == torch.uint8:  # a negative float to uint8 wraps in torch, saturates here
        x = x.abs()
    check_op(lambda t: t.to(target), [x])


@pytest.mark.parametrize("source", [torch.int64, torch.uint8, torch.bool], ids=str)
def test_integer_and_bool_casts(source):
    x = torch.tensor([0, 1, 2, 0, 5]).to(source)
    check_op(lambda t: (t.bool(), t.float(), t.to(torch.bfloat16), t.long()), [x])


def test_tensor_constants_are_inputs():
    def fn(x):
        return x * torch.tensor([1.0, -2.0, 3.0]) + torch.tensor(0.5)

    check_op(fn, [(4, 3)])
