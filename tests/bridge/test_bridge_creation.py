"""Tensor creation (full, zeros/ones, scalar_tensor, arange) and integer arithmetic vs torch."""

from __future__ import annotations

import pytest
import torch

from hwsim.bridge.errors import Reason, Unsupported
from tests.bridge.helpers import check_op


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_full_in_every_dtype(dtype):
    def fn(x):
        value = True if dtype == torch.bool else 3
        return torch.full((3, 130), value, dtype=dtype), x + torch.full((), 0.1, dtype=dtype)

    check_op(fn, [(3, 130)])


def test_fills_and_scalar_tensor():
    def fn(x):
        return (
            torch.zeros(2, 257) + x,
            torch.ones_like(x) * 2,
            x.new_full((5,), float("-inf")),
            torch.scalar_tensor(-3.4028234663852886e38) + x,
        )

    check_op(fn, [(2, 257)])


@pytest.mark.parametrize("args", [(7,), (1000,), (-5, 1995, 2), (10, 0, -1), (3, 260, 3)], ids=str)
def test_integer_arange(args):
    check_op(lambda x: torch.arange(*args) + x.long(), [(1,)])


@pytest.mark.parametrize("args", [(0.5, 5.0, 0.5), (0, 130, 1.0), (-1.0, 1.0, 0.125)], ids=str)
def test_float_arange(args):
    check_op(lambda x: x + torch.arange(*args), [(1,)])


def test_integer_arithmetic_is_exact():
    def fn(x):
        i = torch.arange(257) * 1000 - 77  # int64 on the host, int32 on the device
        j = (x * 1000).long()  # products stay within int32 (int64 is computed as int32)
        return i + j, i - j * 3, i * j, -i, torch.maximum(i, j), (i - j).clamp(-5, 5)

    check_op(fn, [(257,)])


def test_int64_scalar_outside_int32_is_unsupported():
    with pytest.raises(Unsupported) as info:
        check_op(lambda x: torch.arange(3) + 2**40 + x.long(), [(3,)])
    assert info.value.reason is Reason.DTYPE


NEW_FROM_EMPTY = {
    "new_zeros": (torch.ops.aten.new_zeros.default, ((3, 130),)),
    "new_ones": (torch.ops.aten.new_ones.default, ((7,),)),
    "new_full": (torch.ops.aten.new_full.default, ((2, 5), 2.5)),
}


@pytest.mark.parametrize("name", NEW_FROM_EMPTY)
def test_reads_inputs_false_admits_an_empty_input(name, monkeypatch):
    """A lowering registered with reads_inputs=False (it reads only the input's metadata) takes
    an empty input; one that reads its inputs is refused."""
    from dataclasses import replace

    from hwsim.bridge.registry import LOWERINGS, OpCall, check_support

    op, args = NEW_FROM_EMPTY[name]
    empty = torch.empty(0, 4)
    call = OpCall(op, (empty, *args), {}, op(empty, *args))
    assert not LOWERINGS[op].reads_inputs
    check_support(call)
    monkeypatch.setitem(LOWERINGS, op, replace(LOWERINGS[op], reads_inputs=True))
    with pytest.raises(Unsupported, match="input is empty"):
        check_support(call)


def test_new_zeros_from_an_empty_input_runs():
    check_op(lambda x: x.new_zeros((3, 130)), [torch.empty(0, 4)])


def test_empty_inputs_still_refused_for_ops_that_read_them():
    from hwsim.bridge.registry import OpCall, check_support

    empty = torch.empty(0, 4)
    with pytest.raises(Unsupported, match="input is empty"):
        check_support(OpCall(torch.ops.aten.add.Tensor, (empty, empty), {}, torch.empty(3)))
