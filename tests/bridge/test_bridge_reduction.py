"""Reductions and softmax against torch: any dims, keepdim, long rows, odd shapes."""

from __future__ import annotations

import pytest
import torch

from hwsim.bridge.context import TilingOptions
from tests.bridge.helpers import check_op

REDUCTIONS = {
    "sum": torch.sum,
    "mean": torch.mean,
    "amax": torch.amax,
    "amin": torch.amin,
}
CASES = [
    ((7,), -1, False),
    ((3, 130), -1, False),
    ((130, 257), -1, True),
    ((257, 3), 0, False),
    ((2, 3, 7), (0, 2), True),
    ((5, 1, 257), (1,), False),
    ((3, 5000), -1, False),  # a row longer than one tile: accumulated across tiles
]


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduction(name, case):
    shape, dim, keepdim = case
    check_op(lambda x: REDUCTIONS[name](x, dim=dim, keepdim=keepdim), [shape])


@pytest.mark.parametrize("shape", [(1,), (130, 257)], ids=str)
def test_full_reductions(shape):
    check_op(lambda x: (x.sum(), x.mean()), [shape])


@pytest.mark.parametrize("case", [((7,), -1), ((3, 130), -1), ((257, 33), 0), ((2, 3, 257), 1)])
@pytest.mark.parametrize("log", [False, True])
def test_softmax(case, log):
    shape, dim = case
    fn = torch.log_softmax if log else torch.softmax
    check_op(lambda x: fn(x, dim), [shape])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_softmax_and_mean(dtype):
    check_op(lambda x: (torch.softmax(x, -1), x.mean(-1)), [(130, 257)], dtype)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_row_longer_than_row_elements_goes_by_chunks(log):
    """A row over ``row_elements`` is chunked, not refused (bridge/tiling/rows.py)."""
    fn = torch.log_softmax if log else torch.softmax
    check_op(lambda x: fn(x, -1), [(3, 300)], tiling=TilingOptions(row_elements=64))


@pytest.mark.filterwarnings(r"ignore:var\(\). degrees of freedom:UserWarning")  # var of one element
@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "any", "all", "var"])
@pytest.mark.parametrize("dim", [0, -1])
def test_reduction_of_a_0d_tensor_over_dim_0(name, dim):
    """torch takes dim 0 or -1 for a 0-d tensor and reduces nothing (found by OpInfo: the
    lowering indexed the empty shape)."""
    check_op(lambda x: getattr(torch, name)(x, dim=dim, keepdim=dim == 0), [()])
