"""Hardware-style counting semaphores with scheduled increments.

An instruction increments its semaphores when it completes, which is a known future tick at the
moment it starts. So increments are *scheduled* (tick, amount) instead of being applied by an extra
SimPy event each: a waiter asks when the count reaches its value and sleeps exactly until then.
This keeps the simulator at one SimPy event per instruction.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable
from dataclasses import dataclass, field

import simpy

#: A vector clock (race checker), or None when race checking is off.
Clock = dict[str, int] | None


@dataclass
class _Semaphore:
    name: str
    #: Scheduled increments sorted by tick: parallel lists of tick, running total, signaller clock.
    ticks: list[int] = field(default_factory=list)
    totals: list[int] = field(default_factory=list)
    clocks: list[Clock] = field(default_factory=list)
    #: (needed value, event) of processes waiting for an increment not yet scheduled.
    waiters: list[tuple[int, simpy.Event]] = field(default_factory=list)

    @property
    def scheduled_total(self) -> int:
        return self.totals[-1] if self.totals else 0

    def value_at(self, tick: int) -> int:
        index = bisect_left(self.ticks, tick + 1)
        return self.totals[index - 1] if index else 0


class SemaphoreBank:
    """The semaphores of one NeuronCore, addressed by index (names resolved once per program)."""

    def __init__(self, env: simpy.Environment, names: list[str]) -> None:
        self.env = env
        self.names = names
        self.index = {name: i for i, name in enumerate(names)}
        self._sems = [_Semaphore(name) for name in names]
        #: Called for every scheduled update: (tick, semaphore index, value after, source).
        self.on_update: Callable[[int, int, int, tuple[str, int]], None] | None = None

    def time_reaching(self, sem: int, value: int) -> int | None:
        """The tick at which the semaphore reaches ``value``, or None if not yet scheduled."""
        if value <= 0:
            return 0
        state = self._sems[sem]
        if not state.totals or state.totals[-1] < value:
            return None
        return state.ticks[bisect_left(state.totals, value)]

    def clock_reaching(self, sem: int, value: int) -> list[Clock]:
        """Signaller clocks of the increments that bring the semaphore to ``value``."""
        state = self._sems[sem]
        last = bisect_left(state.totals, value)
        return state.clocks[: last + 1]

    def wait_for(self, sem: int, value: int) -> simpy.Event:
        """An event that fires (with the reaching tick) once increments reaching ``value`` exist."""
        event = self.env.event()
        self._sems[sem].waiters.append((value, event))
        return event

    def schedule(
        self, sem: int, tick: int, amount: int, source: tuple[str, int], clock: Clock = None
    ) -> None:
        """Schedule ``semaphore += amount`` at ``tick`` (at or after now)."""
        state = self._sems[sem]
        if not state.ticks or tick >= state.ticks[-1]:
            state.ticks.append(tick)
            state.totals.append(state.scheduled_total + amount)
            state.clocks.append(clock)
        else:  # an out-of-order increment: insert and recompute the running totals after it
            position = bisect_left(state.ticks, tick + 1)
            insort(state.ticks, tick)
            state.clocks.insert(position, clock)
            previous = state.totals[position - 1] if position else 0
            state.totals.insert(position, previous + amount)
            for i in range(position + 1, len(state.totals)):
                state.totals[i] += amount
        if self.on_update is not None:
            self.on_update(tick, sem, state.value_at(tick), source)
        if state.waiters:
            total = state.scheduled_total
            still = []
            for needed, event in state.waiters:
                if needed <= total:
                    event.succeed(self.time_reaching(sem, needed))
                else:
                    still.append((needed, event))
            state.waiters = still

    def value_now(self, sem: int) -> int:
        return self._sems[sem].value_at(int(self.env.now))

    def scheduled_total(self, sem: int) -> int:
        """The value once every increment scheduled so far has happened."""
        return self._sems[sem].scheduled_total
