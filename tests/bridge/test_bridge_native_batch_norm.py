"""native_batch_norm (what eager F.batch_norm dispatches): eval, training without running
statistics, and the refusal of training that updates running statistics in place."""

from __future__ import annotations

import pytest
import torch

from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.registry import OpCall, check_support
from tests.bridge.helpers import check_op

aten = torch.ops.aten


def _var(c: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.rand(c, generator=torch.Generator().manual_seed(3)) + 0.1).to(dtype)


@pytest.mark.parametrize(
    "shape, affine", [((2, 130, 3, 5), True), ((3, 5, 4), False), ((4, 6), True)], ids=str
)
def test_eval_matches_torch_with_empty_statistics(shape, affine):
    c = shape[1]

    def fn(x, w, b, mean, var):
        weight, bias = (w, b) if affine else (None, None)
        return aten.native_batch_norm(x, weight, bias, mean, var, False, 0.1, 1e-3)

    check_op(fn, [shape, (c,), (c,), (c,), _var(c)])


def test_eval_bf16():
    def fn(x, w, b, mean, var):
        return aten.native_batch_norm(x, w, b, mean, var, False, 0.1, 1e-5)[0]

    check_op(fn, [(2, 6, 5, 5), (6,), (6,), (6,), _var(6, torch.bfloat16)], torch.bfloat16)


@pytest.mark.parametrize("shape", [(2, 40, 5, 7), (7, 3)], ids=str)
def test_training_without_running_statistics(shape):
    def fn(x, w, b):
        return aten.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)

    check_op(fn, [shape, (shape[1],), (shape[1],)])


def test_training_with_running_statistics_is_refused_as_a_mutation():
    x, stat = torch.randn(2, 3, 4), torch.ones(3)
    out = aten.native_batch_norm(x, None, None, stat.clone(), stat.clone(), True, 0.1, 1e-5)
    call = OpCall(aten.native_batch_norm.default, (x, None, None, stat, stat, True, 0.1, 1e-5))
    with pytest.raises(Unsupported, match="in place") as error:
        check_support(OpCall(call.op, call.args, {}, out))
    assert error.value.reason == Reason.MUTATION
