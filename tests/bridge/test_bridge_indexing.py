"""Gathers (embedding, index.Tensor, index_select) against torch, and their index checks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.graph_lowering import lower_graph
from hwsim.errors import MemoryAccessError
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


def _embedding_run(vocab: int, width: int = 64):
    weight = torch.randn(vocab, width, generator=torch.Generator().manual_seed(vocab))
    tokens = ids(vocab, 2, 16, seed=3)
    graph = make_fx(lambda w, i: F.embedding(i, w))(weight, tokens)
    lowered = lower_graph(graph, [weight, tokens], config="trn2")
    run = lowered.run([weight, tokens], race_check=True)
    torch.testing.assert_close(run.outputs, F.embedding(tokens, weight), rtol=0, atol=0)
    return run.result


def test_embedding_of_a_gpt2_vocabulary_is_a_dma_gather_independent_of_its_size():
    """50257 rows (GPT-2's vocabulary) cost what 5000 do: one DMA gather per 128 ids, no
    TensorE work (the one-hot matmul would read the whole table per block of ids)."""
    big, small = _embedding_run(50257), _embedding_run(5000)
    mix = [(r.engine, r.instruction.OPCODE) for r in big.trace.instructions]
    assert mix == [(r.engine, r.instruction.OPCODE) for r in small.trace.instructions]
    assert ("gpsimd", "dma_gather") in mix
    assert not any(engine == "tensor" for engine, _ in mix)
    assert big.summary.total_ticks == small.summary.total_ticks


def test_gather_of_strided_rows_keeps_the_one_hot_matmul():
    """Rows of a transposed table are strided: a DMA gather would need a descriptor per
    element, so the gather stays a one-hot matmul on TensorE."""
    weight, tokens = torch.randn(16, 40), ids(40, 5)
    graph = make_fx(lambda w, i: F.embedding(i, w.t()))(weight, tokens)
    lowered = lower_graph(graph, [weight, tokens], config="tiny")
    run = lowered.run([weight, tokens], race_check=True)
    torch.testing.assert_close(run.outputs, F.embedding(tokens, weight.t()), rtol=0, atol=0)
    opcodes = {r.instruction.OPCODE for r in run.result.trace.instructions}
    assert "nc_matmul" in opcodes and "dma_gather" not in opcodes
    # The one-hot operand takes the documented 0/1 fast path (fp32: 2x [S15][S16]); the run
    # with numerics checked every flagged operand really held only 0s and 1s.
    matmuls = [r.instruction for r in run.result.trace.instructions if r.engine == "tensor"]
    assert matmuls and all(m.is_stationary_onezero for m in matmuls)


def test_out_of_range_computed_index_is_a_run_time_error():
    """An index computed on the device cannot be checked before the run; the DMA gather stops
    with an error naming the partition and the value (torch raises too)."""
    x = torch.randn(6, 3)
    graph = make_fx(lambda x, i: x[i + 4])(x, torch.tensor([0, 1]))
    lowered = lower_graph(graph, [x, torch.tensor([0, 1])], config="tiny")
    with pytest.raises(MemoryAccessError, match=r"dma_gather .* index 6 at"):
        lowered.run([x, torch.tensor([0, 2])])
