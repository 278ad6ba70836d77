"""stack (eager mode sees it whole) against torch: any dim, negative dims, promotion, 0-d."""

from __future__ import annotations

import pytest
import torch

from tests.bridge.helpers import check_op

aten = torch.ops.aten


@pytest.mark.parametrize(
    "shapes, dim",
    [
        ([(7,), (7,)], 0),
        ([(3, 130), (3, 130), (3, 130)], 1),
        ([(2, 3, 5), (2, 3, 5)], -1),
        ([(130, 257)], 2),
        ([(), (), ()], 0),
    ],
    ids=str,
)
def test_stack(shapes, dim):
    check_op(lambda *xs: aten.stack(list(xs), dim), shapes)


def test_stack_bf16_and_a_strided_input():
    check_op(lambda a, b: aten.stack([a.t(), b], 1), [(9, 4), (4, 9)], torch.bfloat16)


def test_stack_promotes_like_torch():
    ints = torch.arange(6).reshape(2, 3)
    check_op(lambda a, b: aten.stack([a, b]), [(2, 3), ints])
