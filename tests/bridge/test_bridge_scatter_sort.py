"""The wave-3 op lowerings eagerly on the simulator (HwsimMode, fallback='error'), against CPU
torch: gathers and scatters (duplicates: last write wins; accumulate sums), row searches (ties
lowest index first), histc edges, integer abs / floor division, empty_permuted's layout and the
grouped-mm experts decomposition."""

from __future__ import annotations

import pytest
import torch

from hwsim.bridge.model_decompositions import grouped_mm_dense
from hwsim.bridge.offload import HwsimMode


def on_simulator(fn, *args):
    with HwsimMode(fallback="error"):
        return fn(*args)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_gather_scatter_and_scatter_add_along_every_dim(dim):
    g = torch.Generator().manual_seed(dim)
    x, src = torch.randn(4, 6, 5, generator=g), torch.randn(3, 4, 5, generator=g)
    index = torch.randint(0, x.shape[dim], (3, 4, 5), generator=g)
    assert torch.equal(on_simulator(torch.gather, x, dim, index), torch.gather(x, dim, index))
    got = on_simulator(torch.scatter, x, dim, index, src)
    assert torch.equal(got, torch.scatter(x, dim, index, src))  # duplicates: last one wins
    got = on_simulator(torch.scatter_add, x, dim, index, src)
    torch.testing.assert_close(got, torch.scatter_add(x, dim, index, src))


def test_index_put_with_duplicates_and_accumulate():
    x, values = torch.randn(6, 5), torch.randn(4, 5)
    rows = torch.tensor([3, 1, 0, 1])  # row 1 twice
    got = on_simulator(torch.index_put, x, (rows,), values)
    assert torch.equal(got, torch.index_put(x, (rows,), values))
    got = on_simulator(
        lambda a, i, v: torch.index_put(a, i, v, accumulate=True), x, (rows,), values
    )
    torch.testing.assert_close(got, torch.index_put(x, (rows,), values, accumulate=True))


def test_topk_sort_argmax_with_ties():
    x = torch.tensor([[1.0, 3.0, 3.0, -1.0, float("-inf"), 2.0, 3.0, 0.5, 7.0, 7.0]])
    for k, largest in ((4, True), (3, False)):  # torch leaves topk's order of ties open
        values, picked = on_simulator(lambda t, k=k, big=largest: torch.topk(t, k, largest=big), x)
        assert torch.equal(values, torch.topk(x, k, largest=largest).values)
        assert torch.equal(x.gather(1, picked), values) and len(set(picked[0].tolist())) == k
    assert on_simulator(lambda t: torch.topk(t, 4), x).indices.tolist() == [[8, 9, 1, 2]]
    for fn in (
        lambda t: torch.sort(t, stable=True),
        lambda t: torch.sort(t, descending=True, stable=True),
        lambda t: torch.argmax(t, 1),
        lambda t: torch.argmin(t),
    ):
        got, expected = on_simulator(fn, x), fn(x)
        for a, b in zip(
            got if isinstance(got, tuple) else (got,),
            expected if isinstance(expected, tuple) else (expected,),
            strict=True,
        ):
            assert torch.equal(a, b), (a, b)


def test_sort_of_integer_ids_and_topk_along_dim0():
    ids = torch.randint(0, 4, (32,), generator=torch.Generator().manual_seed(0))
    values, order = on_simulator(lambda t: torch.sort(t, stable=True), ids)
    assert torch.equal(values, torch.sort(ids).values) and values.dtype == torch.int64
    assert torch.equal(order, torch.sort(ids, stable=True).indices)
    x = torch.randn(9, 3, generator=torch.Generator().manual_seed(1))
    got = on_simulator(lambda t: torch.topk(t, 2, dim=0), x)
    assert torch.equal(got.indices, torch.topk(x, 2, dim=0).indices)


def test_histc_counts_edges_and_out_of_range():
    x = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 3.0, -0.1, 3.1, float("nan")])
    got = on_simulator(lambda t: torch.histc(t, bins=4, min=0, max=3), x)
    assert torch.equal(got, torch.histc(x, bins=4, min=0, max=3))
    y = torch.randn(1000, generator=torch.Generator().manual_seed(2))
    got = on_simulator(lambda t: torch.histc(t, bins=7, min=-2, max=2), y)
    assert torch.equal(got, torch.histc(y, bins=7, min=-2, max=2))


def test_integer_abs_and_floor_division():
    a = torch.randint(-50, 50, (7, 5), generator=torch.Generator().manual_seed(3))
    b = torch.randint(1, 9, (7, 5), generator=torch.Generator().manual_seed(4))
    assert torch.equal(on_simulator(torch.abs, a), a.abs())
    for mode in ("floor", "trunc"):
        got = on_simulator(lambda p, q, m=mode: torch.div(p, q, rounding_mode=m), a, b)
        assert torch.equal(got, torch.div(a, b, rounding_mode=mode)) and got.dtype == torch.int64
    assert torch.equal(on_simulator(lambda p: p // 3, a), a // 3)


def test_grouped_mm_dense_matches_the_grouped_product():
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(10, 6, generator=g), torch.randn(3, 6, 4, generator=g)
    offs = torch.tensor([4, 4, 9], dtype=torch.int32)  # expert 1 empty, row 9 past the end
    expected = torch.zeros(10, 4)
    for e, (start, end) in enumerate(zip([0, 4, 4], offs.tolist(), strict=True)):
        expected[start:end] = x[start:end] @ w[e]
    torch.testing.assert_close(grouped_mm_dense(x, w, offs), expected)


def test_a_sort_that_falls_back_to_the_cpu_gives_the_simulators_order_of_ties():
    # 8000 bf16 values (many equal) exceed what the sort lowering takes: it runs on the CPU,
    # whose unstable introsort would order ties its own way; the fallback gives equal values
    # lowest index first, as the lowering does, so results do not depend on where ops ran.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8000, generator=g).to(torch.bfloat16)
    with HwsimMode(fallback="cpu", check=False) as mode:
        values, order = torch.sort(x)
    assert [r.status for r in mode.report.ops] == ["cpu"]
    stable = torch.sort(x, stable=True)
    assert torch.equal(values, stable.values) and torch.equal(order, stable.indices)
    unstable = torch.sort(x).indices
    assert not torch.equal(unstable, stable.indices)  # the order the fallback no longer gives
