"""Comparisons, logical and bitwise ops, where / masked_fill against torch, and masked softmax."""

from __future__ import annotations

import pytest
import torch

from tests.bridge.helpers import check_op

SHAPES = [((7,), (7,)), ((3, 130), (130,)), ((130, 1), (1, 257)), ((2, 3, 7), ())]
COMPARISONS = {
    "eq": torch.eq,
    "ne": torch.ne,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
}


def _coarse(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).long().to(x.dtype)  # many equal values, so eq/le/ge have both outcomes


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("name", COMPARISONS)
def test_float_comparisons_broadcast(name, shapes):
    op = COMPARISONS[name]
    check_op(lambda a, b: op(_coarse(a), _coarse(b)), list(shapes))


@pytest.mark.parametrize("name", COMPARISONS)
def test_comparisons_with_scalars_and_integers(name):
    op = COMPARISONS[name]

    def fn(x):
        ints = (x * 3).long()  # int64 (int32 on the device), compared on GpSimdE
        return op(x, 0.5), op(ints, 1), op(ints, ints[:1]), op(ints > 0, x > 0)

    check_op(fn, [(130, 9)])


def test_comparisons_with_infinities_and_nan():
    def fn(x):
        y = torch.where(x > 1, float("-inf"), x).masked_fill(x < -1, float("nan"))
        return y == float("-inf"), y != y, y < 0, y >= -1

    check_op(fn, [(5, 33)])


def test_logical_and_bitwise_ops():
    def fn(x, y):
        a, b = x > 0, y < 0.5
        return (
            a & b,
            a | ~b,
            a ^ b,
            torch.logical_and(x, b),  # float operand: nonzero is true
            torch.logical_or(a, y.long()),
            torch.logical_not(x * 0),
            a ^ True,  # bitwise_xor.Scalar
        )

    check_op(fn, [(3, 130), (130,)])


def test_integer_bitwise_ops():
    check_op(lambda x: (((x * 100).int() & 0x3C) | 1) ^ ~(x * 10).int(), [(7, 33)])


@pytest.mark.parametrize("shapes", [((3, 130), (130,), (3, 1)), ((2, 1, 7), (5, 1), ())], ids=str)
def test_where_broadcasts_every_operand(shapes):
    check_op(lambda c, a, b: torch.where(c > 0, a, b), list(shapes))


def test_where_with_scalars_and_mixed_dtypes():
    def fn(x, y):
        return (
            torch.where(x > 0, x, torch.tensor(-3.4028234663852886e38)),
            torch.where(x > 0, x.bfloat16(), y),  # promotes to fp32
            torch.where(y > 0, (y * 5).long(), 7),  # integers through select
        )

    check_op(fn, [(3, 130), (3, 130)])


def test_masked_fill():
    check_op(lambda x: x.masked_fill(x < 0, float("-inf")).masked_fill(x > 1, 2.5), [(5, 257)])


@pytest.mark.parametrize("fill", [float("-inf"), torch.finfo(torch.float32).min])
def test_masked_softmax_gives_exact_zeros(fill):
    """A causal mask of -inf or of the most negative finite fp32 (transformers' choice) must
    give exact zeros after exp, not tiny numbers."""

    def fn(scores):
        n = scores.shape[-1]
        causal = torch.arange(n)[None, :] <= torch.arange(n)[:, None]
        bias = torch.where(causal, 0.0, torch.tensor(fill))
        return torch.softmax(scores + bias, -1)

    run = check_op(fn, [(2, 3, 17, 17)])
    upper = torch.triu(torch.ones(17, 17, dtype=torch.bool), 1)
    assert bool((run.outputs[..., upper] == 0).all())
