"""Hardware-style counting semaphores with scheduled increments.

An instruction increments its semaphores when it completes, which is a known future tick at the
moment it starts. So increments are *scheduled* (tick, amount) instead of being applied by an extra
SimPy event each: a waiter asks when the count reaches its value and sleeps exactly until then.
This keeps the simulator at one SimPy event per instruction.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from typing import Protocol

import numpy as np
import simpy

from hwsim.trace.columns import SemaphoreColumns

#: A vector clock (race checker), or None when race checking is off.
Clock = dict[str, int] | None


class Waiter(Protocol):
    """What waits for a semaphore: resumed with the tick the semaphore reaches its value at
    (an engine loop's ``process.Wakeup``)."""

    def wake(self, tick: int) -> None: ...


#: What the bank logs per update, in order.
_LOG_FIELDS = ("tick", "semaphore", "value", "source_pc", "source_engine")
#: One update as the log's bytes (native int64s): ``log.frombytes(LOG_ENTRY.pack(...))`` costs a
#: third of ``log.extend((...))``, the engine loop's one log write per instruction. A value past
#: int64 raises ``struct.error`` where ``extend`` raises OverflowError.
LOG_ENTRY = struct.Struct(f"{len(_LOG_FIELDS)}q")


class _Semaphore:
    """Scheduled increments sorted by tick: parallel lists of tick, running total, signaller clock;
    and the (needed value, event) of processes waiting for an increment not yet scheduled.

    The lists start with an entry for the value the semaphore has before any increment (0 from
    tick 0, no signaller), so a lookup never meets an empty list: the last total is the scheduled
    value, and the tick reaching a value <= 0 is 0.
    """

    __slots__ = ("clocks", "name", "ticks", "totals", "waiters")

    def __init__(self, name: str) -> None:
        self.name = name
        self.ticks: list[int] = [0]
        self.totals: list[int] = [0]
        self.clocks: list[Clock] = [None]
        self.waiters: list[tuple[int, Waiter]] = []

    @property
    def scheduled_total(self) -> int:
        return self.totals[-1]

    def value_at(self, tick: int) -> int:
        """The value at ``tick`` (>= 0)."""
        return self.totals[bisect_left(self.ticks, tick + 1) - 1]


class _Index(dict[str, int]):
    """A dict of semaphore indices that adds a semaphore for a name it does not know yet."""

    def __init__(self, add: Callable[[str], int]) -> None:
        super().__init__()
        self._add = add

    def __missing__(self, name: str) -> int:
        index = self[name] = self._add(name)
        return index


class SemaphoreBank:
    """The semaphores of one NeuronCore, addressed by index (names resolved once per program).

    Every scheduled update is logged (as columns) in the order it was scheduled; ``records()``
    lists them by tick, ties in that order. Signaller clocks are kept only if ``clocks`` (the race
    checker reads them).
    """

    def __init__(
        self,
        env: simpy.Environment,
        names: Iterable[str] = (),
        core: int = 0,
        *,
        clocks: bool = True,
    ) -> None:
        self.env = env
        self.core = core
        self.keep_clocks = clocks
        self.names: list[str] = []
        self._sems: list[_Semaphore] = []
        #: Per semaphore, the least value a process waits for (0: none waits); waiters are
        #: scanned only once the scheduled total reaches it.
        self.lowest_waiting: list[int] = []
        #: name -> index; looking up a new name adds its semaphore (at value 0).
        self.index = _Index(self._add)
        for name in names:
            if name not in self.index:
                self.index[name] = self._add(name)
        #: The update log, in scheduling order, five integers an update (``_LOG_FIELDS``).
        self.log = array("q")
        self._source_codes: dict[str, int] = {}
        #: Index -> (bank, index) of a semaphore of another core this bank's instructions signal
        #: (a remote semaphore update, ``hwsim.isa.multicore_ops.remote_semaphore``): updates of
        #: it are scheduled on that core's bank. Empty on most runs (the engine loop then
        #: updates semaphores inline).
        self.remote: dict[int, tuple[SemaphoreBank, int]] = {}

    def _add(self, name: str) -> int:
        self.names.append(name)
        self._sems.append(_Semaphore(name))
        self.lowest_waiting.append(0)
        return len(self.names) - 1

    def time_reaching(self, sem: int, value: int) -> int | None:
        """The tick at which the semaphore reaches ``value``, or None if not yet scheduled."""
        totals = self._sems[sem].totals
        if totals[-1] < value:
            return None
        return self._sems[sem].ticks[bisect_left(totals, value)]

    def tick_lists(self) -> list[list[int]]:
        """Per semaphore index, its increment ticks (the live lists, for ``time_reaching``
        inlined in a hot loop; they start with the entry of value 0, see ``_Semaphore``)."""
        return [state.ticks for state in self._sems]

    def total_lists(self) -> list[list[int]]:
        """Per semaphore index, its running totals after each increment (live lists)."""
        return [state.totals for state in self._sems]

    def clock_reaching(self, sem: int, value: int) -> list[Clock]:
        """Signaller clocks of the increments that bring the semaphore to ``value``: none for a
        value <= 0, which the semaphore has from the start (a wait for it orders nothing)."""
        state = self._sems[sem]
        return state.clocks[1 : bisect_left(state.totals, value) + 1]  # past the 0 entry

    def wait_for(self, sem: int, value: int, waiter: Waiter) -> None:
        """Wake ``waiter`` (with the reaching tick) once increments reaching ``value`` are
        scheduled."""
        state = self._sems[sem]
        if not state.waiters or value < self.lowest_waiting[sem]:
            self.lowest_waiting[sem] = value
        state.waiters.append((value, waiter))

    def link_remote(self, sem: int, bank: SemaphoreBank, index: int) -> None:
        """Make updates of ``sem`` land on semaphore ``index`` of ``bank`` (another core's)."""
        self.remote[sem] = (bank, index)

    def source_code(self, source: str) -> int:
        """The code ``schedule`` takes for a signalling engine (or ``"dma"``)."""
        return self._source_codes.setdefault(source, len(self._source_codes))

    def schedule(
        self, sem: int, tick: int, amount: int, source: int, pc: int, clock: Clock = None
    ) -> None:
        """Schedule ``semaphore += amount`` at ``tick`` (at or after now), signalled by the
        instruction ``pc`` of the engine coded ``source`` (``source_code``; ``"dma"``: the
        completion of its transfer). A remote semaphore's update is scheduled on its core's
        bank, its source named ``core<k>.<engine>``."""
        if self.remote and sem in self.remote:
            bank, index = self.remote[sem]
            name = f"core{self.core}.{self._source_name(source)}"
            bank.schedule(index, tick, amount, bank.source_code(name), pc, clock)
            return
        state = self._sems[sem]
        ticks, totals = state.ticks, state.totals
        if tick >= ticks[-1]:  # the common case: increments arrive in tick order
            value = totals[-1] + amount
            ticks.append(tick)
            totals.append(value)
            if self.keep_clocks:
                state.clocks.append(clock)
        else:
            value = self._insert(state, tick, amount, clock)
        self.log.extend((tick, sem, value, pc, source))
        if state.waiters and totals[-1] >= self.lowest_waiting[sem]:
            self.wake(sem)

    def _source_name(self, code: int) -> str:
        return next(name for name, c in self._source_codes.items() if c == code)

    def _insert(self, state: _Semaphore, tick: int, amount: int, clock: Clock) -> int:
        """An out-of-order increment: insert it and recompute the running totals after it."""
        ticks, totals = state.ticks, state.totals
        position = bisect_left(ticks, tick + 1)
        insort(ticks, tick)
        if self.keep_clocks:
            state.clocks.insert(position, clock)
        totals.insert(position, totals[position - 1] + amount)  # position >= 1: after the 0 entry
        for i in range(position + 1, len(totals)):
            totals[i] += amount
        return state.value_at(tick)

    def wake(self, sem: int) -> None:
        """Fire the waiters whose value the scheduled total reaches now."""
        state = self._sems[sem]
        ticks, totals = state.ticks, state.totals
        total = totals[-1]
        still = []
        for needed, waiter in state.waiters:
            if needed <= total:  # time_reaching, inlined
                waiter.wake(ticks[bisect_left(totals, needed)])
            else:
                still.append((needed, waiter))
        state.waiters = still
        self.lowest_waiting[sem] = min((needed for needed, _ in still), default=0)

    def records(self) -> SemaphoreColumns:
        """The trace's updates of this bank: by tick, ties in the order they were scheduled."""
        log = np.frombuffer(self.log, np.int64).reshape(-1, len(_LOG_FIELDS))  # no copy
        order = np.argsort(log[:, 0], kind="stable")
        # each a contiguous copy, sorted by tick
        field = {name: log[:, i][order] for i, name in enumerate(_LOG_FIELDS)}
        del log
        self.log = array("q")  # read: freed before the next bank's log is sorted
        ints = {
            "core": np.full(len(order), self.core, np.int64),
            "tick": field["tick"],
            "value": field["value"],
            "source_pc": field["source_pc"],
        }
        strings = {
            "semaphore": (field["semaphore"], list(self.names)),
            "source_engine": (field["source_engine"], list(self._source_codes)),
        }
        return SemaphoreColumns(ints, strings, {})

    def scheduled_total(self, sem: int) -> int:
        """The value once every increment scheduled so far has happened."""
        return self._sems[sem].scheduled_total
