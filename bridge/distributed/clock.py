"""Each rank's simulated time: its compiled graphs' runs, its collectives, and the report.

A rank has two resources, as a NeuronCore does: its compute engines (the graphs the bridge runs,
one after another) and its collective engine (the collectives, in issue order). ``now`` is when
its compute is free, ``comm_free`` when its collective engine is. A collective *arrives* at
``max(now, comm_free)``; the ranks exchange arrivals and it runs from the slowest arrival for its
modelled duration (``hwsim.machine.collectives.release_of``). Compute goes on meanwhile; a
rank's compute waits for a collective when the program waits for it:

- ``Work.wait()`` (a synchronous collective, FSDP2's and DTensor's waits, ``wait_tensor``);
- a graph that is not a backward graph (a forward or optimizer step) waits for every collective
  still running: DDP waits for its gradient all-reduces when backward ends, through futures the
  backend cannot see, and nothing after the backward may read a gradient before its reduction.

A collective takes its bytes of the rank's HBM stack: a graph that starts while some of the
rank's collectives still run has their remaining HBM bytes reserved on its stack
(``RankClock.hbm_held``), so its DMAs wait for that bandwidth as they would beside the
collective on the hardware. The collective itself keeps its modelled duration.

Steps: a forward graph that runs after a backward or optimizer graph starts a new step.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hwsim.config import HardwareConfig
from hwsim.cost import CostModel
from hwsim.trace.array_ops import union_ticks


@dataclass(frozen=True)
class ComputeRun:
    """One compiled graph's run on the rank's core (ticks of the rank's clock)."""

    graph: str
    phase: str
    step: int
    start_tick: int
    end_tick: int
    #: The compute engines' busy intervals, for a graph whose collectives ran inside it (its
    #: span then holds communication too); None: the whole span is compute.
    busy: tuple[tuple[int, int], ...] | None = None
    #: What the rank's collectives running beside it took of its HBM stack: (tick from the
    #: graph's start, bytes) each (``RankClock.hbm_held``).
    hbm_held: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class CollectiveRun:
    """One collective as this rank saw it (ticks of the rank's clock)."""

    kind: str
    algorithm: str
    nbytes: int
    group: tuple[int, ...]  # the first physical core of each rank
    rank: int  # this rank's index in ``group``
    seq: int
    step: int
    arrival_tick: int
    start_tick: int
    end_tick: int
    link_bytes: dict[str, int]
    #: Bytes this rank's part reads and writes in HBM (``CollectiveCost.hbm_bytes``): what it
    #: takes of its core's HBM stack while a graph runs beside it (``RankClock.hbm_held``).
    hbm_bytes: int = 0


@dataclass
class RankClock:
    """One rank's simulated timeline (see the module docstring)."""

    rank: int
    world_size: int
    config: HardwareConfig
    cores_per_rank: int
    now: int = 0
    comm_free: int = 0
    step: int = 0
    computes: list[ComputeRun] = field(default_factory=list)
    collectives: list[CollectiveRun] = field(default_factory=list)
    _pending_ends: list[int] = field(default_factory=list)
    _last_phase: str = ""

    def __post_init__(self) -> None:
        self.model = CostModel.for_config(self.config)
        self.lock = threading.Lock()

    @property
    def core_id(self) -> int:
        """The rank's first physical core."""
        return self.rank * self.cores_per_rank

    def ns_to_ticks(self, ns: float) -> int:
        return self.model.timebase.ns_to_ticks(ns)

    def ticks_to_ns(self, ticks: int) -> float:
        return self.model.timebase.ticks_to_ns(ticks)

    def graph_ran(self, graph: str, phase: str, total_ns: float) -> None:
        """A compiled graph ran for ``total_ns`` of simulated time on this rank's core."""
        start = self.begin_graph(phase)
        self.end_graph(graph, phase, start, self.ns_to_ticks(total_ns))

    def begin_graph(self, phase: str) -> int:
        """A compiled graph starts: the tick it starts at (see the module docstring)."""
        with self.lock:
            if phase == "forward" and self._last_phase in ("backward", "optimizer"):
                self.step += 1
            self._last_phase = phase or self._last_phase
            if phase != "backward":
                self._await_all()
            return self.now

    def hbm_held(self, start_tick: int) -> list[tuple[int, int]]:
        """What the rank's collectives still running at ``start_tick`` take of its HBM stack,
        for a graph starting then: (tick from the graph's start, bytes) per collective, each
        reserved on the stack at that tick (``hwsim.machine.dma.DmaSystem.reserve``) as it
        would be at the collective's start. One that started before the graph holds the share
        of its bytes its remaining time carries, from the graph's start."""
        held = []
        for run in self.collectives:
            if run.end_tick <= start_tick or run.hbm_bytes <= 0:
                continue
            if run.start_tick >= start_tick:
                held.append((run.start_tick - start_tick, run.hbm_bytes))
            else:
                left = run.end_tick - start_tick
                held.append((0, run.hbm_bytes * left // (run.end_tick - run.start_tick)))
        return held

    def end_graph(
        self,
        graph: str,
        phase: str,
        start: int,
        duration_ticks: int,
        busy: list[tuple[int, int]] | None = None,
        collectives: list[CollectiveRun] = (),  # type: ignore[assignment]
        hbm_held: list[tuple[int, int]] = (),  # type: ignore[assignment]
    ) -> None:
        """The graph begun at ``start`` took ``duration_ticks``; ``busy`` and ``collectives``
        (ticks of this clock) are those of a graph whose collectives ran inside it; ``hbm_held``
        what the rank's collectives beside it took of its HBM stack."""
        with self.lock:
            self.now = start + duration_ticks
            kept = tuple(busy) if busy is not None else None
            held = tuple(hbm_held)
            self.computes.append(ComputeRun(graph, phase, self.step, start, self.now, kept, held))
            for run in collectives:
                self.collectives.append(run)
                self.comm_free = max(self.comm_free, run.end_tick)

    def arrival(self) -> int:
        """When a collective issued now reaches the rank's collective engine."""
        return max(self.now, self.comm_free)

    def collective_ran(self, run: CollectiveRun) -> None:
        with self.lock:
            self.collectives.append(run)
            self.comm_free = run.end_tick
            self._pending_ends.append(run.end_tick)

    def wait_until(self, end_tick: int) -> None:
        """The rank's compute waits for a collective ending at ``end_tick``."""
        with self.lock:
            self.now = max(self.now, end_tick)
            self._pending_ends = [t for t in self._pending_ends if t > self.now]

    def _await_all(self) -> None:
        if self._pending_ends:
            self.now = max(self.now, *self._pending_ends)
            self._pending_ends = []

    def summary(self) -> dict[str, Any]:
        """Per step and in total: compute, communication, overlapped and exposed communication,
        the time from the first graph or collective to the last one's end, waiting (ns) and
        bytes per link class."""
        steps = sorted({c.step for c in self.computes} | {c.step for c in self.collectives})
        per_step = {step: self._split(step) for step in steps}
        return {
            "rank": self.rank,
            "core": self.core_id,
            "end_ns": self.ticks_to_ns(max(self.now, self.comm_free)),
            "steps": per_step,
            "total": self._split(None),
        }

    def _split(self, step: int | None) -> dict[str, Any]:
        computes = [
            piece
            for c in self.computes
            if step in (None, c.step)
            for piece in (c.busy if c.busy is not None else [(c.start_tick, c.end_tick)])
        ]
        colls = [c for c in self.collectives if step in (None, c.step)]
        comms = [(c.start_tick, c.end_tick) for c in colls]
        compute, comm = _union(computes), _union(comms)
        busy = _union(computes + comms)
        overlapped = compute + comm - busy
        link_bytes: dict[str, int] = {}
        for c in colls:
            for link, nbytes in c.link_bytes.items():
                link_bytes[link] = link_bytes.get(link, 0) + nbytes
        ns = self.ticks_to_ns
        return {
            "graphs": sum(step in (None, c.step) for c in self.computes),
            "collectives": len(colls),
            "compute_ns": ns(compute),
            "communication_ns": ns(comm),
            "overlapped_ns": ns(overlapped),
            "exposed_ns": ns(comm - overlapped),
            "time_ns": ns(_span(computes + comms)),
            "waiting_ns": ns(sum(c.start_tick - c.arrival_tick for c in colls)),
            "link_bytes": link_bytes,
        }


def _span(intervals: list[tuple[int, int]]) -> int:
    """First start to last end: the step's time, the longer of its compute path and its
    collective path (each collective ends after its issue, each graph after the one before)."""
    if not intervals:
        return 0
    return max(end for _, end in intervals) - min(start for start, _ in intervals)


def _union(intervals: list[tuple[int, int]]) -> int:
    if not intervals:
        return 0
    pairs = np.asarray(intervals, np.int64)
    return union_ticks(pairs[:, 0], pairs[:, 1])


_THREAD = threading.local()


@contextmanager
def reference_runs() -> Iterator[None]:
    """Within the block, the calling rank's collectives are the CPU reference runs' of the
    bridge's checks: their values are exchanged as usual but they take no time on its clock."""
    _THREAD.reference = getattr(_THREAD, "reference", 0) + 1
    try:
        yield
    finally:
        _THREAD.reference -= 1


def in_reference_run() -> bool:
    return getattr(_THREAD, "reference", 0) > 0


_PROCESS: list[RankClock] = []  # every clock made in this process, newest last


def set_current(clock: RankClock) -> None:
    """``clock`` is the calling thread's rank (the thread that created its default group)."""
    _THREAD.clock = clock
    _PROCESS.append(clock)
    del _PROCESS[:-64]  # keep the newest worlds' clocks only


def current_clock() -> RankClock | None:
    """The calling thread's rank clock; in a process with one rank, that rank's from any
    thread; None outside a ``"hwsim"`` process group."""
    clock = getattr(_THREAD, "clock", None)
    if clock is None and _PROCESS and len({c.rank for c in _PROCESS}) == 1:
        return _PROCESS[-1]  # a rank process: its one rank, whichever thread asks
    return clock
