"""cat, split (views) and cumsum against torch."""

from __future__ import annotations

import pytest
import torch

from tests.bridge.helpers import check_op


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(dim):
    check_op(lambda x, y: torch.cat([x, y * 2, x], dim), [(3, 5, 130), (3, 5, 130)])


def test_cat_promotes_and_takes_views():
    def fn(x, y):
        return torch.cat([x.t(), y.long()], 0), torch.cat([x[:2] > 0, y[:, :3].t() < 0], 0)

    check_op(fn, [(7, 3), (3, 7)])


def test_split_and_chunk_are_views():
    def fn(x):
        a, b, c = x.split([1, 3, 3], -1)
        first, second = x.chunk(2, 0)
        return a * 2, b + c, first - second

    check_op(fn, [(4, 5, 7)])


def test_rotate_half_pattern():
    """Llama's rotary embedding: slices, neg, cat."""

    def fn(x, cos, sin):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
        return x * cos + rotated * sin

    check_op(fn, [(2, 4, 9, 32), (2, 1, 9, 32), (2, 1, 9, 32)])


@pytest.mark.parametrize(
    "shape, dim", [((5, 37), -1), ((130, 3), 0), ((2, 3, 257), 1), ((7,), 0)], ids=str
)
def test_cumsum(shape, dim):
    check_op(lambda x: torch.cumsum(x, dim), [shape])


def test_cumsum_of_bool_and_int_is_exact():
    check_op(lambda x: (torch.cumsum(x > 0, -1), torch.cumsum((x * 9).int(), 0)), [(5, 37)])
