"""The DMA engines and queues of the NeuronCores, and the HBM bandwidth their stack shares.

A triggered transfer (``hwsim.cost.dma``: one piece per DMA engine of its core) arrives
on its engines ``start_latency`` after the trigger [S11] and joins its queue ID on each of them.
Per engine, a queue's transfers run in order (FIFO [S12]); the heads of the non-empty queues are
served round-robin at descriptor granularity [S12], modelled in its fluid limit: k queues with a
transfer in service each advance at 1/k of the engine's rate (processor sharing). Work is kept in
integer work units (``WORK_UNITS_PER_TICK``: k parts of a tick are whole units for k <= 16), so
time stays exact integers; a piece ends on the first tick its remaining work is done.

A piece that touches HBM reserves its bytes on its stack's bandwidth when it enters service,
first come first served, and ends when both its engine work and its reservation are done: engines
(and cores) asking together for more than the stack gives are slowed down [S1]. The transfer
completes when the last of its pieces does, and completions of one queue are signalled in order.

Engines of a core that have received the same pieces are in the same state, so they are kept as
one *group* and updated once: a transfer that gives every engine the same piece (the usual
128-partition tile) costs one update for all 16 engines, not 16. A transfer whose pieces differ
splits the groups it touches (their state is copied); idle groups merge again. The trace still
has one record per engine and piece.

Events: one SimPy callback per arrival tick of a transfer and per tick at which some group has a
piece to finish, never per descriptor. They are scheduled at absolute ticks (an engine that submits
a transfer runs ahead of SimPy's clock, ``hwsim.machine.process``).
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from hwsim.cost.dma import WORK_UNITS_PER_TICK, Piece, TransferPlan
from hwsim.trace.columns import DmaRecordColumns, int_array


@dataclass(slots=True)
class DmaTransfer:
    """One triggered DMA instruction in flight."""

    core: int
    queue: int
    trigger_engine: str
    trigger_pc: int
    on_complete: Callable[[int], None]  # called with the completion tick
    remaining: int = 0  # engines whose piece has not finished
    last_end_tick: int = 0


class _Item:
    """A piece of a transfer on the engines of one group: queued, in service or draining
    (engine work done, waiting for its HBM reservation)."""

    __slots__ = ("arrival", "hbm_end", "piece", "remaining", "start", "transfer")

    def __init__(self, transfer: DmaTransfer, piece: Piece, arrival: int) -> None:
        self.transfer = transfer
        self.piece = piece
        self.arrival = arrival
        self.remaining = piece.work
        self.start = -1
        self.hbm_end = 0

    def copy(self) -> _Item:
        twin = _Item(self.transfer, self.piece, self.arrival)
        twin.remaining, twin.start, twin.hbm_end = self.remaining, self.start, self.hbm_end
        return twin


@dataclass(eq=False)
class _Group:
    """DMA engines of one core in the same state: the same queued, served and draining items."""

    core: int
    engines: list[int]
    queues: dict[int, deque[_Item]] = field(default_factory=dict)
    active: list[_Item] = field(default_factory=list)  # queue heads in service
    draining: list[_Item] = field(default_factory=list)
    last_tick: int = 0
    wake_tick: int = -1  # tick of the pending callback, or -1

    @property
    def idle(self) -> bool:
        return not self.queues and not self.draining

    def split_off(self, engines: list[int]) -> _Group:
        """A new group of ``engines`` (removed from this one) with a copy of this state."""
        keep = set(engines)
        self.engines = [e for e in self.engines if e not in keep]
        twin = _Group(self.core, engines, last_tick=self.last_tick)
        copies: dict[int, _Item] = {}
        for queue, items in self.queues.items():
            twin.queues[queue] = deque(copies.setdefault(id(i), i.copy()) for i in items)
        twin.active = [copies[id(i)] for i in self.active]
        twin.draining = [i.copy() for i in self.draining]
        return twin


class DmaSystem:
    """All DMA engines of all cores, with per-stack HBM bandwidth reservations."""

    def __init__(
        self,
        env: simpy.Environment,
        *,
        cores: int,
        engines: int,
        start_latency_ticks: int,
        hbm_denominator: int,
        cores_per_stack: int,
        stack_of_core: Sequence[int] | None = None,
        hbm_units_per_byte: int = 0,
    ) -> None:
        """``stack_of_core[k]``: the HBM stack core k's transfers use (default: cores
        ``k * cores_per_stack ..`` share stack k; a run placing its cores on chosen physical
        cores gives their stacks)."""
        self.env = env
        self.engines_per_core = engines
        self.start_latency_ticks = start_latency_ticks
        self.cores_per_stack = cores_per_stack
        if stack_of_core is None:
            stack_of_core = [core // cores_per_stack for core in range(cores)]
        self.stack_of_core = list(stack_of_core)
        self.log = _PieceLog()
        #: (plan, parts) per (plan id, group engines): the plan is kept so its id stays its own.
        self._parts_memo: dict[
            tuple[int, tuple[int, ...]], tuple[TransferPlan, list[list[int]]]
        ] = {}
        #: (plan, whether symmetric) per plan id: the plan is kept so its id stays its own.
        self._symmetric_memo: dict[int, tuple[TransferPlan, bool]] = {}
        #: When each stack's HBM bandwidth is next free, in 1/hbm_denominator ticks; one byte
        #: holds it ``hbm_units_per_byte`` of those (``reserve``).
        self.hbm_denominator = hbm_denominator
        self.hbm_units_per_byte = hbm_units_per_byte
        self.stack_free_units = [0] * (max(self.stack_of_core, default=0) + 1)
        self.queue_last_completion: dict[tuple[int, int], int] = {}
        self.groups: list[list[_Group]] = [[_Group(c, list(range(engines)))] for c in range(cores)]

    # ---- arrivals -----------------------------------------------------------------------------
    def submit(
        self, transfer: DmaTransfer, plan: TransferPlan, trigger_tick: int, now: int
    ) -> None:
        """Queue a transfer at ``now`` (the submitting engine's clock): it reaches its engines
        ``start_latency`` after ``trigger_tick``."""
        transfer.remaining = len(plan.pieces)
        arrival = trigger_tick + self.start_latency_ticks
        if arrival <= now:
            self._arrive(transfer, plan, now)
            return
        _TimedCall(self.env, arrival, self._arrive, (transfer, plan, arrival))

    def _arrive(self, transfer: DmaTransfer, plan: TransferPlan, now: int) -> None:
        groups = self.groups[transfer.core]
        pieces = plan.pieces
        for group in list(groups):
            parts = self._parts(plan, group.engines)
            self._advance(group, now)
            for engines in parts[1:]:  # the pieces differ: split the group
                twin = group.split_off(engines)
                groups.append(twin)
                self._enqueue(twin, transfer, pieces[engines[0]], now)
            self._enqueue(group, transfer, pieces[parts[0][0]], now)
        self._merge_idle(transfer.core)

    def _parts(self, plan: TransferPlan, engines: list[int]) -> list[list[int]]:
        """``engines`` split by the piece of ``plan`` they get (equal pieces together, in order
        of first engine): worked out once per plan and group (plans live as long as the run)."""
        if len(engines) == 1 or self._symmetric(plan):  # one part: every engine's piece alike
            return [engines]
        key = (id(plan), tuple(engines))
        parts = self._parts_memo.get(key)
        if parts is None:
            by_cost: dict[tuple[int, int, int, int], list[int]] = {}
            for engine in engines:
                p = plan.pieces[engine]
                cost = (p.nbytes, p.descriptors, p.work, p.hbm_units)
                by_cost.setdefault(cost, []).append(engine)
            parts = self._parts_memo[key] = (plan, list(by_cost.values()))
        return [list(part) for part in parts[1]]

    def _symmetric(self, plan: TransferPlan) -> bool:
        """``plan.symmetric``, worked out once per plan (plans live as long as the run)."""
        found = self._symmetric_memo.get(id(plan))
        if found is None:
            found = self._symmetric_memo[id(plan)] = (plan, plan.symmetric)
        return found[1]

    def _enqueue(self, group: _Group, transfer: DmaTransfer, piece: Piece, now: int) -> None:
        items = group.queues.get(transfer.queue)
        item = _Item(transfer, piece, now)
        if items is None:
            group.queues[transfer.queue] = deque([item])
            self._start(group, item, now)
        else:
            items.append(item)
        self._settle(group, now)

    def reserve(self, core: int, tick: int, nbytes: int) -> None:
        """Hold core ``core``'s HBM stack for ``nbytes`` from ``tick`` on (after what is already
        reserved), as a DMA piece does when it enters service: a collective's HBM reads and
        writes, so that the DMAs starting after it wait for the bandwidth it takes."""
        if nbytes <= 0:
            return
        stack = self.stack_of_core[core]
        begin = max(tick * self.hbm_denominator, self.stack_free_units[stack])
        self.stack_free_units[stack] = begin + nbytes * self.hbm_units_per_byte

    def reserve_at(self, core: int, tick: int, nbytes: int) -> None:
        """``reserve`` when the run reaches ``tick`` (now if it has)."""
        if not 0 <= core < len(self.stack_of_core) or tick < 0:
            raise ValueError(f"HBM held on core {core} at tick {tick}: no such core or tick")
        if tick <= self.env.now:
            self.reserve(core, int(self.env.now), nbytes)
        else:
            _TimedCall(self.env, tick, self.reserve, (core, tick, nbytes))

    # ---- service ------------------------------------------------------------------------------
    def _start(self, group: _Group, item: _Item, now: int) -> None:
        """``item`` becomes its queue's head: it enters service and reserves HBM."""
        item.start = now
        group.active.append(item)
        units = item.piece.hbm_units
        if units >= 0:
            stack = self.stack_of_core[group.core]
            begin = max(now * self.hbm_denominator, self.stack_free_units[stack])
            end = begin + units * len(group.engines)
            self.stack_free_units[stack] = end
            item.hbm_end = -(-end // self.hbm_denominator)

    def _advance(self, group: _Group, now: int) -> None:
        """Apply the work done since the group was last updated (processor sharing)."""
        elapsed = now - group.last_tick
        if elapsed > 0 and group.active:
            done = elapsed * (WORK_UNITS_PER_TICK // len(group.active))
            for item in group.active:
                item.remaining -= done
        group.last_tick = now

    def _settle(self, group: _Group, now: int) -> None:
        """Finish what is done at ``now``, start the next heads, and schedule the next wake-up."""
        active, draining = group.active, group.draining
        while True:
            finished = [i for i in active if i.remaining <= 0]
            ready = [i for i in draining if i.hbm_end <= now] if draining else []
            if not finished and not ready:
                break
            for item in finished:
                active.remove(item)
                if item.hbm_end > now:
                    draining.append(item)
                else:
                    ready.append(item)
            if len(ready) > 1:
                ready.sort(key=_queue_of)
            for item in ready:
                if item in draining:
                    draining.remove(item)
                self._finish(group, item, now)
        self._schedule(group, now)

    def _finish(self, group: _Group, item: _Item, now: int) -> None:
        transfer, piece = item.transfer, item.piece
        queue = transfer.queue
        items = group.queues[queue]
        items.popleft()
        if items:
            self._start(group, items[0], now)
        else:
            del group.queues[queue]
        self.log.add(group, transfer, piece, item.arrival, item.start, now)
        transfer.last_end_tick = max(transfer.last_end_tick, now)
        transfer.remaining -= len(group.engines)
        if transfer.remaining == 0:
            key = (transfer.core, queue)
            done = max(transfer.last_end_tick, self.queue_last_completion.get(key, 0))
            self.queue_last_completion[key] = done
            transfer.on_complete(done)

    def _schedule(self, group: _Group, now: int) -> None:
        wake = -1
        if group.active:
            share = len(group.active)
            least = min(item.remaining for item in group.active)
            wake = now + max(1, -(-least * share // WORK_UNITS_PER_TICK))
        for item in group.draining:
            if wake < 0 or item.hbm_end < wake:
                wake = item.hbm_end
        if wake < 0 or (0 <= group.wake_tick <= wake and group.wake_tick > now):
            return  # nothing to do, or an earlier callback is pending already
        group.wake_tick = wake
        _TimedCall(self.env, wake, self._wake, (group, wake))

    def _wake(self, group: _Group, tick: int) -> None:
        if group.wake_tick != tick or group not in self.groups[group.core]:
            return  # superseded by an earlier wake-up, or merged away
        group.wake_tick = -1
        self._advance(group, tick)
        self._settle(group, tick)
        self._merge_idle(group.core)

    def _merge_idle(self, core: int) -> None:
        groups = self.groups[core]
        if len(groups) < 2:
            return
        idle = [g for g in groups if g.idle]
        if len(idle) < 2:
            return
        keep = idle[0]
        for group in idle[1:]:
            keep.engines.extend(group.engines)
            groups.remove(group)
        keep.engines.sort()

    def records(self) -> DmaRecordColumns:
        """The trace's DMA records: one per engine and finished piece, in finishing order."""
        return self.log.columns()

    def busy_groups(self) -> list[tuple[int, list[int], list[Any]]]:
        """(core, engines, unfinished transfers) of groups with work left (for diagnostics)."""
        return [
            (g.core, g.engines, [i.transfer for q in g.queues.values() for i in q])
            for groups in self.groups
            for g in groups
            if not g.idle
        ]


class _TimedCall(simpy.Timeout):
    """``fn(*args)``, called when SimPy processes it at ``tick``: a ``Timeout`` scheduled for the
    absolute tick (SimPy's clock may lag the caller's), whose callbacks are the one shared list
    ``_CALL`` (SimPy's loop calls each with the event and sets the attribute to None, never
    changing the list), so no closure or list is built per call."""

    def __init__(
        self, env: simpy.Environment, tick: int, fn: Callable[..., None], args: tuple[Any, ...]
    ) -> None:
        super().__init__(env, tick - env.now)
        self.callbacks = _CALL
        self.fn, self.args = fn, args


def _call(call: _TimedCall) -> None:
    call.fn(*call.args)


_CALL: list[Callable[[Any], None]] = [_call]


def _queue_of(item: _Item) -> int:
    return item.transfer.queue


#: The integer fields of a ``DmaRecord`` a finished piece logs once for its group.
_LOGGED = (
    *("core", "queue", "trigger_pc", "transfer_bytes", "descriptors"),
    *("queued_tick", "start_tick", "end_tick"),
)


class _PieceLog:
    """Finished pieces, one row per group (its engines finished the same piece at once): the
    trace has a record per engine, expanded from these rows when the run ends."""

    def __init__(self) -> None:
        self.ints: dict[str, array[int]] = {name: array("q") for name in _LOGGED}
        self.trigger_engine: list[str] = []
        self.engines: list[tuple[int, ...]] = []

    def add(
        self, group: _Group, transfer: DmaTransfer, piece: Piece, queued: int, start: int, end: int
    ) -> None:
        ints = self.ints
        ints["core"].append(group.core)
        ints["queue"].append(transfer.queue)
        ints["trigger_pc"].append(transfer.trigger_pc)
        ints["transfer_bytes"].append(piece.nbytes)
        ints["descriptors"].append(piece.descriptors)
        ints["queued_tick"].append(queued)
        ints["start_tick"].append(start)
        ints["end_tick"].append(end)
        self.trigger_engine.append(transfer.trigger_engine)
        self.engines.append(tuple(group.engines))

    def columns(self) -> DmaRecordColumns:
        counts = np.fromiter(map(len, self.engines), np.int64, len(self.engines))
        ints = {name: np.repeat(int_array(values), counts) for name, values in self.ints.items()}
        engines = int_array([e for row in self.engines for e in row])
        ints["dma_engine"] = ints["piece"] = engines  # a piece's index is its engine's
        names = sorted(set(self.trigger_engine))
        code = {name: i for i, name in enumerate(names)}
        trigger = np.repeat(int_array([code[n] for n in self.trigger_engine]), counts)
        return DmaRecordColumns(ints, {"trigger_engine": (trigger, names)}, {})
