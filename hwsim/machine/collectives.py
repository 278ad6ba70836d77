"""The collective engine of each core, and how the ranks of a collective meet.

A core's collective engine (its CC cores) runs its ``collective`` instructions in order. Each
waits for its semaphores like any instruction, then *arrives*: it hands its rank's source values
to the collective's ``Fabric`` and sleeps. When every rank of the group has arrived, the fabric
releases them all: the collective starts at the latest arrival and ends after the longest of the
ranks' modelled durations (``hwsim.cost.collectives``, one per rank: a permute's transfers
differ); each rank's destination gets its values (``Collective.combine``) and its semaphores
update at the end. Its engine is busy from start to end; the time from its own arrival to the
start is waiting for its peers. At its start it holds its core's HBM stack for the bytes it reads
and writes there (``CollectiveCost.hbm_bytes``), as a DMA piece does: the core's DMAs that start
after it wait for that bandwidth.

Two fabrics: ``LocalFabric`` joins the cores of one run (a chip or several, one SimPy clock);
a ``Fabric`` of the caller's joins ranks simulated elsewhere (``torch.distributed`` ranks, each
its own run), exchanging arrival ticks and values as the collective's rendezvous.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import simpy
from simpy.events import NORMAL

from hwsim.cost import CostModel, InstructionCost
from hwsim.errors import HwsimError
from hwsim.isa.multicore_ops import Collective
from hwsim.machine.dma import DmaSystem
from hwsim.machine.initcheck import InitChecker
from hwsim.machine.prepare import Durations, PreparedCore, StaticSteps
from hwsim.machine.process import EngineLoop, Wakeup
from hwsim.machine.semaphores import SemaphoreBank
from hwsim.machine.state import CoreState
from hwsim.trace.records import CollectiveRecord


@dataclass(frozen=True)
class Release:
    """What a fabric tells each rank once every rank has arrived (ticks of that rank's run):
    when the collective starts and ends, every rank's arrival, and every rank's source values
    in rank order (None in timing-only runs)."""

    start: int
    end: int
    arrivals: tuple[int, ...]
    sources: list[np.ndarray] | None


@dataclass(frozen=True)
class Arrival:
    """One rank arriving at a collective. ``key`` names the collective (the group and the
    collective's number among this core's collectives on it); ``what`` describes it (kind,
    bytes): every rank must give the same; ``tick`` is when it arrives and ``duration`` the
    collective's modelled ticks on this rank (ticks of this rank's run); ``values`` its source
    values (None in timing-only runs). ``release`` is called with the ``Release`` once all
    ``size`` ranks have joined (at once, or later from another rank's ``join``)."""

    key: tuple[Any, ...]
    what: str
    rank: int
    size: int
    tick: int
    duration: int
    values: np.ndarray | None
    release: Callable[[Release], None]

    def timing(self) -> tuple[int, int, np.ndarray | None]:
        """(tick, duration, values): what ``release_of`` reads of each rank."""
        return self.tick, self.duration, self.values


class Fabric(Protocol):
    """Where the ranks of a collective meet (``Arrival``)."""

    def join(self, arrival: Arrival) -> None: ...


class LocalFabric:
    """Ranks that are cores of one run: the last to arrive releases them all."""

    def __init__(self) -> None:
        self._pending: dict[tuple[Any, ...], dict[int, Arrival]] = {}
        self._what: dict[tuple[Any, ...], tuple[int, str]] = {}

    def join(self, arrival: Arrival) -> None:
        key = arrival.key
        members = self._pending.setdefault(key, {})
        check_member(self._what, members, arrival)
        members[arrival.rank] = arrival
        if len(members) < arrival.size:
            return
        del self._pending[key], self._what[key]
        order = [members[r] for r in range(arrival.size)]
        done = release_of([member.timing() for member in order])
        for member in order:
            member.release(done)

    def waiting(self) -> list[str]:
        """The collectives some ranks wait at, for a deadlock message."""
        return [f"{key}: ranks {sorted(members)} arrived" for key, members in self._pending.items()]


def check_member(
    whats: dict[tuple[Any, ...], tuple[int, str]], members: dict[int, Any], arrival: Arrival
) -> None:
    """Refuse a rank joining a collective with another one than the first rank's, or twice."""
    key, what, rank = arrival.key, arrival.what, arrival.rank
    first = whats.setdefault(key, (rank, what))
    if first[1] != what:
        raise HwsimError(
            f"collective {key[1]} on cores {key[0]}: rank {first[0]} runs {first[1]} but "
            f"rank {rank} runs {what}; every rank must run the same collective in the same order"
        )
    if rank in members:
        raise HwsimError(f"collective {key}: rank {rank} arrived twice")


def release_of(order: list[tuple[int, int, np.ndarray | None]]) -> Release:
    """The release of a collective whose ranks (in rank order) joined with (arrival tick,
    duration, values): it starts at the latest arrival and lasts the longest duration."""
    arrivals = tuple(m[0] for m in order)
    start = max(arrivals)
    sources = [m[2] for m in order if m[2] is not None]  # every rank's, or none (timing only)
    if sources and len(sources) != len(order):
        raise HwsimError(
            f"collective: {len(sources)} of {len(order)} ranks gave values; run every rank with "
            "numerics or none"
        )
    end = start + max(m[1] for m in order)
    return Release(start, end, arrivals, sources if sources else None)


class CollectiveRunner(EngineLoop):
    """One core's collective engine as a SimPy process (the simulator's engine-runner shape:
    ``stream``, ``chain_ready``, ``durations``, ``finished``, ``end_tick``)."""

    def __init__(
        self,
        env: simpy.Environment,
        core: int,
        core_id: int,
        engine: str,
        stream: list[Collective],
        static: StaticSteps,
        costs: list[InstructionCost],
        sems: SemaphoreBank,
        state: CoreState,
        numerics: bool,
        fabric: Fabric,
        model: CostModel,
        init: InitChecker | None = None,
        dma: DmaSystem | None = None,
    ) -> None:
        self.env, self.core, self.core_id, self.engine = env, core, core_id, engine
        self.stream, self.static, self.costs = stream, static, costs
        self.sems, self.state, self.numerics = sems, state, numerics
        self.fabric, self.model, self.init, self.dma = fabric, model, init, dma
        self.chain_ready = array("q")  # per pc: the collective's start
        self._ends: list[int] = []
        self.records: list[CollectiveRecord] = []
        self.blocked_on: tuple[int, int] | None = None
        self.blocked_reason = ""
        self.durations: Durations
        self.prepared: PreparedCore
        self.wakeup: Wakeup
        self.finished = False
        self.end_tick = 0
        self._release: Release | None = None
        self._waiting = False
        self._seq: dict[tuple[int, ...], int] = {}

    def steps(self) -> Generator[None, Any, None]:
        try:
            now = 0
            for pc, waits, signals, cost in zip(
                range(len(self.stream)), self.static.waits, self.static.signals, self.costs,
                strict=True,
            ):  # fmt: skip
                for sem, value in waits:
                    reach = self.sems.time_reaching(sem, value)
                    if reach is None:
                        self.blocked_on = (sem, value)
                        self.sems.wait_for(sem, value, self.wakeup)
                        yield
                        self.blocked_on = None
                        reach = self.wakeup.reached
                    now = max(now, reach)
                yield from self._sleep_until(now)
                instruction = self.stream[pc]
                release = yield from self._arrive(pc, instruction, now, cost.issue_ticks)
                yield from self._sleep_until(release.start)
                self._finish(pc, instruction, now, release, signals)
                now = release.end
                yield from self._sleep_until(now)
        except Exception as error:
            self.env.event().fail(error)
        else:
            self.finished = True
            self.end_tick = now
        self.durations = _durations(self.chain_ready, self._ends)
        self.wakeup.let_go()
        yield

    def _sleep_until(self, tick: int) -> Generator[None, Any, None]:
        if tick > self.env.now:
            self.wakeup.callbacks = self.wakeup.resumes
            self.env.schedule(self.wakeup, NORMAL, tick - self.env.now)
            yield

    def _arrive(
        self, pc: int, instruction: Collective, now: int, duration: int
    ) -> Generator[None, Any, Release]:
        """Join the collective at ``now`` and sleep until every rank has."""
        if instruction.group[instruction.rank] != self.core_id:
            raise HwsimError(
                f"core {self.core} collective[{pc}] {instruction.label()}: rank "
                f"{instruction.rank} of group {instruction.group} is core "
                f"{instruction.group[instruction.rank]}, but this is core {self.core_id}"
            )
        seq = self._seq.get(instruction.group, 0)
        self._seq[instruction.group] = seq + 1
        if self.init is not None:  # its source read, its destination written
            self.init.execute(self.state, pc, instruction)
        values = self.state.read(instruction.src).reshape(-1) if self.numerics else None
        self._release = None
        self.blocked_reason = (
            f"waits for the other ranks of collective {seq} on {instruction.group}"
        )
        what = f"{instruction.kind} of {instruction.nbytes} B"
        self.fabric.join(
            Arrival(
                (instruction.group, seq), what, instruction.rank, len(instruction.group), now,
                duration, values, self._released,
            )
        )  # fmt: skip
        if self._release is None:
            self._waiting = True
            yield  # woken by ``_released``
            self._waiting = False
        self.blocked_reason = ""
        assert self._release is not None
        return self._release

    def _released(self, release: Release) -> None:
        self._release = release
        if self._waiting:  # else it joined last and carries on without sleeping
            self.wakeup.wake(release.start)

    def _finish(
        self,
        pc: int,
        instruction: Collective,
        arrival: int,
        release: Release,
        signals: tuple[tuple[int, int], ...],
    ) -> None:
        if release.sources is not None:
            values = instruction.combine(release.sources)
            self.state.write(instruction.dst, values.reshape(instruction.dst.shape))
        source = self.sems.source_code(self.engine)
        for sem, amount in signals:
            self.sems.schedule(sem, release.end, amount, source, pc, None)
        self.chain_ready.append(release.start)
        self._ends.append(release.end)
        cost = self.model.collectives.of(
            instruction.kind.value, instruction.nbytes, instruction.group,
            instruction.cores_per_rank, instruction.algorithm or None,
            (instruction.rank, instruction.send_to),
        )  # fmt: skip
        if self.dma is not None:
            self.dma.reserve(self.core, release.start, cost.hbm_bytes)
        self.records.append(
            CollectiveRecord(
                self.core, pc, str(instruction.kind), cost.algorithm, instruction.nbytes,
                instruction.group, instruction.rank, self._seq[instruction.group] - 1,
                arrival, release.start, release.end, dict(cost.link_bytes),
            )
        )  # fmt: skip


def _durations(starts: array[int], ends: list[int]) -> Durations:
    start = np.frombuffer(starts, np.int64) if len(starts) else np.zeros(0, np.int64)
    issue = np.asarray(ends, np.int64) - start
    return Durations(issue, issue.copy(), np.zeros(len(ends), np.int64))
