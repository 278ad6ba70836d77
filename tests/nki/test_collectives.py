"""``nki.collectives`` on a multi-rank run: every rank's values, the collective's ticks from the
topology's cost model, replica groups, and the errors (on ``tiny``: one core a chip, four chips an
instance, so four ranks make a ring of chips)."""

from __future__ import annotations

import numpy as np
import pytest

import hwsim.nki as nki
import hwsim.nki.collectives as ncc
import hwsim.nki.language as nl
from hwsim.config import load_config
from hwsim.cost import CostModel
from hwsim.errors import HwsimError, IllegalInstructionError

TINY = load_config("tiny")
RANKS = 4
SHAPE = (32, 16)


def _inputs(ranks: int = RANKS, rows: int = SHAPE[0]) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.standard_normal((rows, SHAPE[1])).astype(np.float32) for _ in range(ranks)]


def _collective_kernel(kind: str, out_rows: int, group: ncc.ReplicaGroup | None = None):
    group = group or ncc.ReplicaGroup([list(range(RANKS))])

    @nki.jit
    def kernel(x):
        out = nl.ndarray((out_rows, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
        if kind == "all_reduce":
            ncc.all_reduce([x], [out], group, nl.add)
        elif kind == "all_gather":
            ncc.all_gather([x], [out], group, collective_dim=0)
        elif kind == "reduce_scatter":
            ncc.reduce_scatter([x], [out], group, 0, nl.maximum)
        else:
            ncc.all_to_all([x], [out], group, 0)
        return out

    return kernel


def _run(kernel, xs, **options):
    return nki.run(kernel, nki.per_rank(xs), config=TINY, ranks=len(xs), **options)


def test_an_all_reduce_gives_every_rank_the_sum_in_the_cost_models_time():
    xs = _inputs()
    run = _run(_collective_kernel("all_reduce", SHAPE[0]), xs)
    total = xs[0].copy()
    for x in xs[1:]:
        total += x  # fp32, in rank order, as the collective engines reduce
    outputs = run.result()
    assert len(outputs) == RANKS
    for got in outputs:
        np.testing.assert_array_equal(got, total)
    records = run.trace.collectives
    assert sorted(r.rank for r in records) == list(range(RANKS))
    cost = CostModel.for_config(TINY).collectives.of("all_reduce", 32 * 16 * 4, (0, 1, 2, 3))
    ticks = CostModel.for_config(TINY).timebase.ns_to_ticks(float(cost.duration_ns))
    assert {(r.start_tick, r.end_tick - r.start_tick) for r in records} == {(0, ticks)}


@pytest.mark.parametrize(
    ("kind", "out_rows", "expected"),
    [
        ("all_gather", RANKS * SHAPE[0], lambda xs, r: np.concatenate(xs)),
        (
            "reduce_scatter",
            SHAPE[0] // RANKS,
            lambda xs, r: np.split(np.maximum.reduce(xs), RANKS)[r],
        ),
        ("all_to_all", SHAPE[0], lambda xs, r: np.concatenate([np.split(x, RANKS)[r] for x in xs])),
    ],
)
def test_each_collective_gives_each_rank_its_part(kind, out_rows, expected):
    xs = _inputs()
    outputs = _run(_collective_kernel(kind, out_rows), xs).result()
    for rank, got in enumerate(outputs):
        np.testing.assert_array_equal(got, expected(xs, rank))


def test_rank_lists_of_a_replica_group_reduce_apart():
    group = ncc.ReplicaGroup.from_partition_op(RANKS, ncc.rg_partition_op.mod, 2)
    assert group.rank_lists == [[0, 2], [1, 3]]
    xs = _inputs()
    outputs = _run(_collective_kernel("all_reduce", SHAPE[0], group), xs).result()
    for rank, got in enumerate(outputs):
        partner = (rank + 2) % RANKS
        np.testing.assert_array_equal(got, xs[min(rank, partner)] + xs[max(rank, partner)])


def test_a_permute_moves_each_source_to_its_target_and_ranks_know_who_they_are():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        ring = [(r, (r + 1) % RANKS) for r in range(RANKS)]
        ncc.collective_permute([x], [out], ring)
        tagged = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(tagged, nl.load(out) * float(ncc.rank_id() + 1))
        return tagged

    xs = _inputs()
    outputs = _run(kernel, xs).result()
    for rank, got in enumerate(outputs):
        np.testing.assert_array_equal(got, xs[(rank - 1) % RANKS] * np.float32(rank + 1))


def test_the_index_in_a_rank_list_and_the_groups_from_partition_ops():
    assert ncc.ReplicaGroup.from_partition_op(8, ncc.rg_partition_op.div, 4).rank_lists == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
    ]
    assert ncc.ReplicaGroup.from_partition_op(8, ncc.rg_partition_op.bitwise_and, 0).rank_lists == [
        list(range(8))
    ]
    seen = []

    @nki.jit
    def kernel(x):
        seen.append(ncc.self_index_in_replica_group(ncc.ReplicaGroup([[3, 1], [0, 2]])))
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))
        return out

    _run(kernel, _inputs())
    assert seen == [0, 1, 1, 0]  # ranks 0..3: 0 in [0, 2], 1 in [3, 1], ...


def test_bad_collective_calls_are_refused_saying_what_would_be_right():
    with pytest.raises(IllegalInstructionError, match="rank 1 is in more than one place"):
        ncc.ReplicaGroup([[0, 1], [1, 2]])
    group = ncc.ReplicaGroup([[0, 1, 2, 3]])

    def refuses(body, match):
        @nki.jit
        def kernel(x):
            out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
            body(x, out)
            return out

        with pytest.raises(HwsimError, match=match):
            _run(kernel, _inputs())

    refuses(lambda x, o: ncc.all_gather([x], [o], group, 1), "collective_dim=1: hwsim")
    refuses(lambda x, o: ncc.all_reduce([x], [], group, nl.add), "1 srcs and 0 dsts")
    refuses(lambda x, o: ncc.all_reduce([x], [o], [[0, 1]], nl.add), "give an nki.collectives")
    refuses(lambda x, o: ncc.all_reduce([x], [o], ncc.ReplicaGroup([[0, 1]]), nl.add), "rank 2")
    refuses(lambda x, o: ncc.all_reduce([x], [o], group, nl.multiply), "not an ALU|add, max")
    refuses(
        lambda x, o: ncc.collective_permute([x], [o], [(0, 1), (1, 2)]), "send once and receive"
    )
    refuses(lambda x, o: ncc.all_to_all_v([x], [o], group), "not supported by hwsim.nki")


def test_a_multi_rank_run_checks_its_ranks_and_per_rank_arguments():
    kernel = _collective_kernel("all_reduce", SHAPE[0])
    with pytest.raises(HwsimError, match="per_rank holds 3 values for 4 ranks"):
        nki.run(kernel, nki.per_rank(_inputs(3)), config=TINY, ranks=4)
    with pytest.raises(HwsimError, match="ranks=0"):
        nki.run(kernel, _inputs(1)[0], config=TINY, ranks=0)
    with pytest.raises(HwsimError, match="one physical core"):
        nki.run(kernel[nl.nc(2)], nki.per_rank(_inputs(2)), config=TINY, ranks=2)


def test_installed_nki_collectives_resolve_here():
    nki.install()
    try:
        import nki.collectives as imported  # type: ignore[import-not-found]

        assert imported is ncc
    finally:
        nki.uninstall()
