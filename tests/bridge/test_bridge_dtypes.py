"""int64 and bool on the device (int32 and uint8 representations), casts, tensor constants."""

from __future__ import annotations

import pytest
import torch

from hwsim.bridge.dtypes import Int64RangeError
from tests.bridge.helpers import check_op

INT64_MIN = torch.iinfo(torch.int64).min
INF = float("inf")


def test_int64_and_bool_inputs_and_outputs_round_trip():
    ints = torch.tensor([[5, 2**31 - 1, -(2**31) + 1], [0, -7, INT64_MIN]])
    flags = torch.tensor([True, False, True])
    run = check_op(lambda i, f: (i, f, i[:, :1] + 1, ~f), [ints, flags])
    assert [t.dtype for t in run.outputs] == [torch.int64, torch.bool, torch.int64, torch.bool]


def test_int64_input_outside_int32_is_an_error_naming_it():
    with pytest.raises(Int64RangeError, match=r"int64 input \w+ holds 2147483648"):
        check_op(lambda i: i * 2, [torch.tensor([1, 2**31])])


def test_an_int64_input_of_minus_two_to_the_31_is_refused_it_stands_for_int64_min():
    with pytest.raises(Int64RangeError, match=r"holds -2147483648, .*INT64_MIN \(held as"):
        check_op(lambda i: i + 1, [torch.tensor([3, -(2**31)])])


def test_int64_min_passes_through_min_and_where_as_on_the_cpu():
    def bucket(i, keep):
        return torch.where(keep, i, torch.minimum(i, torch.full_like(i, 31)))

    ints = torch.tensor([INT64_MIN, 5, -7, 2**31 - 1, INT64_MIN])
    keep = torch.tensor([False, True, False, True, True])
    run = check_op(bucket, [ints, keep])
    assert torch.equal(run.outputs, bucket(ints, keep))


def test_a_fill_of_int64_min_is_held_and_a_fill_of_minus_two_to_the_31_refused():
    run = check_op(lambda i: i + torch.full((3,), INT64_MIN), [torch.zeros(3, dtype=torch.int32)])
    assert run.outputs.tolist() == [INT64_MIN] * 3
    with pytest.raises(Exception, match=r"fill value .* is -2147483648"):
        check_op(lambda i: i + torch.full((3,), -(2**31)), [torch.zeros(3, dtype=torch.int64)])


#: Floats whose integer conversion torch's CPU kernels define by x86's "integer indefinite"
#: (+-inf, NaN, past int32) beside ordinary ones, -2**31 and the largest fp32 below 2**31.
FLOATS_TO_CAST = [-INF, INF, float("nan"), -3e9, 3e9, 1e30, -2.7, -1.0, -0.5, -0.0, 0.3, 1.5]
FLOATS_TO_CAST += [99.9, 300.0, -200.7, 70000.5, 255.9, 256.0, -(2.0**31), 2147483520.0, -32769.0]


@pytest.mark.parametrize("source", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("target", [torch.int32, torch.int16, torch.int8, torch.uint8], ids=str)
def test_float_to_integer_casts_give_torchs_values_infinities_and_nan_included(source, target):
    x = torch.tensor(FLOATS_TO_CAST).to(source)
    run = check_op(lambda t: t.to(target), [x])
    assert torch.equal(run.outputs, x.to(target))  # -inf -> INT32_MIN; 300.0 -> int8 44


def test_float_to_int64_gives_int64_min_for_infinities_nan_and_huge_values():
    x = torch.tensor([-INF, INF, float("nan"), 1e30, -1e30, -2.7, 1.5, 2147483520.0])
    run = check_op(lambda t: t.to(torch.int64), [x])
    assert torch.equal(run.outputs, x.to(torch.int64))
    assert run.outputs[:5].tolist() == [INT64_MIN] * 5


def test_a_t5_style_bucket_of_log_zero_is_exact():
    """T5's relative-position buckets cast log(0) = -inf to int64 and mask the result."""

    def bucket(position):
        large = 8 + (torch.log(position.float() / 8) / 2.77 * 8).to(torch.long)
        large = torch.min(large, torch.full_like(large, 15))
        return torch.where(position < 8, position, large)

    positions = torch.arange(40).reshape(1, 40)
    run = check_op(bucket, [positions])
    assert torch.equal(run.outputs, bucket(positions))


INTS_TO_NARROW = [0, 1, -1, 127, 128, -128, -129, 255, 256, 300, -300, 65535, 65536, -32769]
INTS_TO_NARROW += [2**31 - 1, -(2**31) + 1, 70000]


@pytest.mark.parametrize(
    "source", [torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8], ids=str
)
@pytest.mark.parametrize("target", [torch.int32, torch.int16, torch.int8, torch.uint8], ids=str)
def test_integer_casts_wrap_as_torch_does(source, target):
    x = torch.tensor(INTS_TO_NARROW).to(source)  # torch wraps these to the source first
    run = check_op(lambda t: t.to(target), [x])
    assert torch.equal(run.outputs, x.to(target))  # int32 300 -> int8 44, not 127


@pytest.mark.parametrize(
    "target", [torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool], ids=str
)
def test_float_to_integer_truncates_and_to_bool_tests_nonzero(target):
    x = torch.tensor([-2.7, -1.0, -0.5, -0.0, 0.3, 0.999, 1.5, 99.9])
    check_op(lambda t: t.to(target), [x])  # to uint8, -2.7 wraps to 254 as in torch


@pytest.mark.parametrize("source", [torch.int64, torch.uint8, torch.bool], ids=str)
def test_integer_and_bool_casts(source):
    x = torch.tensor([0, 1, 2, 0, 5]).to(source)
    check_op(lambda t: (t.bool(), t.float(), t.to(torch.bfloat16), t.long()), [x])


def test_tensor_constants_are_inputs():
    def fn(x):
        return x * torch.tensor([1.0, -2.0, 3.0]) + torch.tensor(0.5)

    check_op(fn, [(4, 3)])
