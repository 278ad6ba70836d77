"""A compiled graph with collectives, run on a rank: its collective instructions meet the other
ranks' through the process groups' fabrics, on the rank's clock.

The graph's run is a simulation of its own, from tick 0; on the rank's clock it starts at
``base`` (``RankClock.begin_graph``: when the rank's compute is free). Each collective the
run's collective engine reaches joins its group's fabric (``fabric.fabric_for``: threads or
the c10d store) as the eager collectives do, under the group's next sequence number, arriving
at ``base`` + its tick in the run (and not before the rank's collective engine finished the
collectives issued before the graph); the release's ticks go back to the run's. So every rank
agrees on the collective's start (the slowest arrival) and end (plus the cost model's
duration, which the instruction takes), and the rank's other engines go on meanwhile as the
program's dependencies allow. The run's collectives and its compute engines' busy time are
then recorded on the clock (``RankClock.end_graph``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hwsim.bridge.distributed.clock import CollectiveRun, RankClock
from hwsim.bridge.lowerings.collectives import hwsim_group
from hwsim.errors import HwsimError
from hwsim.machine.collectives import Arrival, Release
from hwsim.trace.communication import busy_intervals


class GraphFabric:
    """The ``Fabric`` of one graph's run on a rank (module docstring)."""

    def __init__(self, clock: RankClock, group_names: list[str], base: int) -> None:
        self.clock, self.base = clock, base
        self.comm_free = clock.comm_free  # the collectives issued before the graph
        self._groups = [hwsim_group(name) for name in group_names]
        self._next = 0
        self.seqs: list[int] = []  # each collective's number on its group, in run order

    def join(self, arrival: Arrival) -> None:
        key, rank = arrival.key, arrival.rank
        if self._next >= len(self._groups):
            raise HwsimError(f"collective {key}: the graph lowered {len(self._groups)} only")
        group = self._groups[self._next]
        self._next += 1
        if tuple(key[0]) != group.cores or rank != group._rank:
            raise HwsimError(
                f"collective on cores {list(key[0])} as rank {rank}: the lowered graph's group "
                f"{group.group_name} is cores {list(group.cores)} with this rank {group._rank}"
            )
        seq = next(group._seq)
        self.seqs.append(seq)
        at = max(self.base + arrival.tick, self.comm_free)
        got: list[Release] = []
        group.fabric.join(replace(arrival, key=(group.cores, seq), tick=at, release=got.append))
        [done] = got
        b = self.base
        arrival.release(Release(done.start - b, done.end - b, tuple(a - b for a in done.arrivals),
                        done.sources))  # fmt: skip


def run_on_rank(
    lowered: Any, args: list[Any], clock: RankClock | None, graph: str, phase: str, options: Any
) -> Any:
    """Run ``lowered`` (a graph with collectives) as the calling rank's core; its ``GraphRun``."""
    if clock is None:
        raise HwsimError(
            f"{graph}: the graph has collectives but this thread is not a rank of a 'hwsim' "
            "process group (dist.init_process_group('hwsim'))"
        )
    if lowered.config != clock.config:
        raise HwsimError(
            f"{graph}: compiled for config '{lowered.config.chip.name}' but the ranks' collectives "
            f"are timed on '{clock.config.chip.name}': pass the same config to torch.compile's "
            "options and hwsim.bridge.distributed.configure"
        )
    base = clock.begin_graph(phase)
    fabric = GraphFabric(clock, lowered.collective_groups, base)
    held = clock.hbm_held(base)
    run = lowered.run(
        args, initcheck=options.initcheck, fabric=fabric, core_id=clock.core_id, hbm_held=held
    )
    trace = run.result.trace
    compute, _ = busy_intervals(trace)
    compute = [(base + start, base + end) for start, end in compute]
    runs = [
        CollectiveRun(
            r.kind, r.algorithm, r.nbytes, tuple(r.group), r.rank, seq, clock.step,
            base + r.arrival_tick, base + r.start_tick, base + r.end_tick, dict(r.link_bytes),
        )
        for r, seq in zip(sorted(trace.collectives, key=lambda r: r.pc), fabric.seqs, strict=True)
    ]  # fmt: skip
    end = clock.ns_to_ticks(float(run.result.summary.total_ns))
    clock.end_graph(graph, phase, base, end, compute, runs, held)
    return run
