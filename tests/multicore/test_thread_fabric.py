"""Ranks in separate runs on threads (hwsim.machine.thread_fabric): the same values and ticks as
the ranks as cores of one run, and a failing or missing rank is an error, not a hang."""

from __future__ import annotations

import numpy as np
import pytest

from hwsim import lang
from hwsim.config import load_config
from hwsim.errors import HwsimError
from hwsim.lang import isa as nisa
from hwsim.machine.simulator import run
from hwsim.machine.thread_fabric import run_ranks
from tests.multicore.collective_workloads import RANKS, all_reduce_4

TINY = load_config("tiny")  # one core a chip: 4 ranks on the 4 chips of the instance


def _rank_programs(make=lambda rank: np.full((32, 16), rank + 1.0, np.float32), ranks=RANKS):
    @lang.kernel
    def rank_kernel(x, rank):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="y")
        tile = lang.load(x)
        for _ in range(rank):  # ranks arrive at different times
            nisa.activation(tile, nisa.ActivationFunction.copy, tile)
        lang.store(out, tile)
        nisa.collective("all_reduce", out, out, group=tuple(range(ranks)), rank=rank)
        return out

    return [rank_kernel.build(make(k), k, config=TINY).program for k in range(ranks)]


def test_ranks_on_threads_agree_with_ranks_as_cores_of_one_run():
    from hwsim.chip import merge_programs

    programs = _rank_programs()
    threaded = run_ranks(programs, TINY, core_ids=range(RANKS))
    together = run(merge_programs(_rank_programs()), TINY)
    expected = sum(np.full((32, 16), k + 1.0, np.float32) for k in range(RANKS))
    for k, result in enumerate(threaded):
        np.testing.assert_array_equal(result.outputs["y"], expected)
        (mine,) = result.trace.collectives
        theirs = next(r for r in together.trace.collectives if r.rank == k)
        assert (mine.arrival_tick, mine.start_tick, mine.end_tick) == (
            theirs.arrival_tick,
            theirs.start_tick,
            theirs.end_tick,
        )
    starts = {result.trace.collectives[0].start_tick for result in threaded}
    arrivals = [result.trace.collectives[0].arrival_tick for result in threaded]
    assert starts == {max(arrivals)} and len(set(arrivals)) > 1  # the slowest rank sets it


def test_a_rank_that_fails_stops_the_others_with_its_error():
    programs = _rank_programs()
    programs[2] = all_reduce_4(TINY)  # a 4-core program where one core is expected
    with pytest.raises(HwsimError, match="core_ids"):
        run_ranks(programs, TINY, core_ids=range(RANKS), timeout_s=30)


def test_a_rank_that_never_arrives_is_reported_after_the_timeout():
    programs = _rank_programs()[:3]  # rank 3 never runs
    # the timeout runs from each rank's own arrival: 5 s leaves ranks 1 and 2 time to arrive
    # even on a loaded machine (they simulate a tiny program first), so the message names all 3
    with pytest.raises(HwsimError, match=r"ranks \[0, 1, 2\] of 4 arrived; the others did not"):
        run_ranks(programs, TINY, core_ids=range(3), timeout_s=5)
