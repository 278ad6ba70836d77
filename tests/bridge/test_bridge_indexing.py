"""Gathers (embedding, index.Tensor, index_select) against torch, and their index checks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from bridge.errors import Reason, Unsupported
from bridge.graph_lowering import lower_graph
from tests.bridge.helpers import check_op


def ids(high: int, *shape: int, low: int = 0, seed: int = 0) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    "table, index",
    [((50, 33), (2, 7)), ((300, 600), (2, 100)), ((7, 1), (130,)), ((129, 5), ())],
    ids=str,
)
def test_embedding(table, index):
    """Vocabularies over 128 rows (K accumulated in PSUM), over 128 ids (several output blocks),
    rows wider than one PSUM bank (512), one-column tables and a 0-d index."""
    check_op(lambda w, i: F.embedding(i, w), [table, ids(table[0], *index)])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_embedding_low_precision_is_exact(dtype):
    run = check_op(lambda w, i: F.embedding(i, w), [(300, 70), ids(300, 3, 5)], dtype)
    assert run.outputs.dtype == dtype


def test_index_with_computed_indices():
    """The shape transformers' mask functions produce: aranges broadcast against each other."""

    def fn(x):
        batch = torch.arange(3)[:, None, None]
        rows = torch.arange(5)[None, :, None]
        cols = torch.arange(9)[None, None, :]
        return x[batch, rows, cols] * 2, x[:, rows[0, :, 0]], x[1:, torch.arange(4)]

    check_op(fn, [(4, 6, 9)])


def test_index_of_integer_and_bool_tables():
    def fn(x):
        positions = torch.arange(300).view(3, 100) * 7
        flags = x > 0
        picks = torch.tensor([[2, 0], [1, 1]])
        return positions[picks], flags[:, picks[0]], positions[:, -1]

    check_op(fn, [(3, 100)])


def test_index_wraps_negative_indices_and_broadcasts():
    """40 x 9 = 360 table rows (several K tiles), 150 gathered rows (several output blocks)."""
    check_op(lambda x, i, j: x[i, j], [(40, 9, 3), ids(40, 50, 1, low=-40), ids(9, 1, 3, seed=1)])


def test_index_select():
    check_op(lambda x, i: x.index_select(1, i), [(4, 6, 3), torch.tensor([5, 0, 2, 2])])


def test_index_select_of_a_0d_tensor():
    """torch indexes a 0-d x as [1] and returns 0-d (found by OpInfo: the lowering failed)."""
    check_op(lambda x, i: x.index_select(0, i), [(), torch.tensor([0])])
    check_op(lambda x, i: x.index_select(-1, i), [(), torch.tensor(0)])


def test_bool_mask_index_is_data_dependent():
    with pytest.raises(Unsupported) as info:
        check_op(lambda x: x[x > 0], [(3, 4)])
    assert info.value.reason is Reason.DATA_DEPENDENCE


def test_out_of_range_input_ids_raise_like_torch():
    weight, good = torch.randn(10, 4), torch.tensor([[3, 9]])
    graph = make_fx(lambda w, i: F.embedding(i, w))(weight, good)
    lowered = lower_graph(graph, [weight, good], config="tiny")
    torch.testing.assert_close(lowered.run([weight, good]).outputs, F.embedding(good, weight))
    with pytest.raises(IndexError, match=r"embedding .* index 10 in input .* \[0, 10\)"):
        lowered.run([weight, torch.tensor([[3, 10]])])
