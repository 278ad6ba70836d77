"""The ranks' timelines as one Perfetto (Chrome JSON) trace: a process per rank's core, as a
multi-core run's trace has (``hwsim.trace.chrome``), with a track of the compiled graphs the rank
ran and its CollectiveE track, and each collective drawn as flows from rank r to rank r + 1."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hwsim.bridge.distributed.clock import RankClock
from hwsim.engines import COLLECTIVE_ENGINE
from hwsim.trace.chrome import core_pid, engine_tid

GRAPHS_TID = 0  # before the engine tracks (1..)
_FLOW_IDS = 1 << 40


def trace_events(clocks: Sequence[RankClock]) -> list[dict[str, Any]]:
    """Chrome trace events of ``clocks`` (every rank of one world, in any order)."""
    events: list[dict[str, Any]] = []
    collective_tid = engine_tid(COLLECTIVE_ENGINE)
    for clock in clocks:
        pid, us = core_pid(clock.core_id), _us(clock)
        events += [
            {"ph": "M", "name": "process_name", "pid": pid,
             "args": {"name": f"NeuronCore {clock.core_id} (rank {clock.rank})"}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": GRAPHS_TID,
             "args": {"name": "compiled graphs"}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": collective_tid,
             "args": {"name": COLLECTIVE_ENGINE}},
        ]  # fmt: skip
        for run in clock.computes:
            events.append(
                {"ph": "X", "pid": pid, "tid": GRAPHS_TID, "ts": us(run.start_tick),
                 "dur": us(run.end_tick - run.start_tick), "name": run.graph, "cat": run.phase,
                 "args": {"step": run.step, "phase": run.phase}}
            )  # fmt: skip
        for c in clock.collectives:
            events.append(
                {"ph": "X", "pid": pid, "tid": collective_tid, "ts": us(c.start_tick),
                 "dur": us(c.end_tick - c.start_tick), "name": c.kind, "cat": "collective",
                 "args": {"bytes": c.nbytes, "algorithm": c.algorithm, "group": list(c.group),
                          "seq": c.seq, "step": c.step, "arrival_tick": c.arrival_tick,
                          "wait_ns": clock.ticks_to_ns(c.start_tick - c.arrival_tick),
                          "link_bytes": c.link_bytes}}
            )  # fmt: skip
    events += _flows(clocks, collective_tid)
    return events


def _us(clock: RankClock) -> Any:
    return lambda ticks: clock.ticks_to_ns(ticks) / 1000


def _flows(clocks: Sequence[RankClock], tid: int) -> list[dict[str, Any]]:
    """Each collective's rank r slice to rank r + 1's (the ranks present in ``clocks``)."""
    by_collective: dict[tuple[Any, ...], dict[int, tuple[RankClock, Any]]] = {}
    for clock in clocks:
        for c in clock.collectives:
            by_collective.setdefault((c.group, c.seq), {})[c.rank] = (clock, c)
    events, flow_id = [], _FLOW_IDS
    for (group, seq), ranks in by_collective.items():
        order = [ranks[r] for r in sorted(ranks)]
        for (a_clock, a), (b_clock, b) in itertools.pairwise(order):
            flow_id += 1
            name = f"{a.kind} {seq} on {list(group)}"
            events.append(
                {"ph": "s", "id": flow_id, "pid": core_pid(a_clock.core_id), "tid": tid,
                 "ts": _us(a_clock)((a.start_tick + a.end_tick) // 2), "name": name,
                 "cat": "collective"}
            )  # fmt: skip
            events.append(
                {"ph": "f", "bp": "e", "id": flow_id, "pid": core_pid(b_clock.core_id),
                 "tid": tid, "ts": _us(b_clock)((b.start_tick + b.end_tick) // 2), "name": name,
                 "cat": "collective"}
            )  # fmt: skip
    return events


def write_trace(clocks: Sequence[RankClock], path: str | Path) -> Path:
    """Write the ranks' trace at ``path`` (open it in ui.perfetto.dev); returns the path."""
    from hwsim.outputs_guard import output_file

    body = {"displayTimeUnit": "ns", "traceEvents": trace_events(clocks)}
    with output_file(path, "w") as out:
        json.dump(body, out)
    return Path(path)
