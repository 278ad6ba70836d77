"""How an engine's loop sits on SimPy's public API, at one SimPy event per instruction or fewer.

An engine keeps its own clock. Between two of its SimPy events it goes from instruction to
instruction by arithmetic, and hands control back to SimPy only when another event is due at or
before the tick it is going to (``Environment.peek``): then it sleeps on one reused event
(``Wakeup``) scheduled for that tick. Skipping the sleep otherwise changes no tick and no order:
the sleep would be the next event processed, with nothing run in between.

So SimPy's clock (``Environment.now``, the tick of the last event processed) lags a running
engine's own. Whatever an engine schedules, it schedules for an absolute tick (the delay counted
from SimPy's clock), and whatever it hands a tick to (the DMA engines, the semaphores) takes the
tick as an argument instead of reading the clock.

SimPy as used here: ``Environment.schedule``, ``peek``, ``now``, ``event``; ``Timeout``;
``Event.callbacks`` and ``fail`` (``tests/sim/test_simpy_clock.py`` pins each behaviour relied
on). Nothing private.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy


class Wakeup(simpy.Timeout):
    """The one event an engine loop sleeps on, scheduled again each time it sleeps.

    Made as a ``Timeout`` of 0, which starts the loop at tick 0 (all engines' starts are
    scheduled before the run begins, so they run in engine order before anything they
    schedule). Then, per sleep, the loop reschedules it (``Environment.schedule``) with its
    callbacks list set again to ``resumes`` (``[loop.send]``: SimPy's loop resumes the
    generator directly, and sets the event's attribute to None without changing the list). A
    processed event is scheduled again only after it resumed the loop, so it is never queued
    twice; it stays triggered (a ``Timeout``) with the value None.

    It is also what a semaphore wait sleeps on (``wake``, in place of a new event per wait).
    """

    def __init__(self, env: simpy.Environment, loop: Generator[None, Any, None]) -> None:
        super().__init__(env, 0)
        #: The callbacks of every sleep: resume the loop.
        self.resumes: list[Callable[[Any], Any]] = [loop.send]
        self.callbacks = [self._start]
        #: The tick a semaphore this loop waited for reached its value (``wake``).
        self.reached = 0

    def _start(self, _event: simpy.Event) -> None:
        self.resumes[0](None)

    def wake(self, tick: int) -> None:
        """Resume the loop now: a semaphore it waits for reaches its value at ``tick``
        (``SemaphoreBank.wake``). Scheduled as ``Event.succeed`` schedules an event."""
        self.reached = tick
        self.callbacks = self.resumes
        self.env.schedule(self)

    def let_go(self) -> None:
        """The loop is done: drop the only reference to its generator but the ``send`` running
        now, so that once it returns to SimPy's loop the generator (at its last yield) and the
        run's per-pc state its frame holds are freed, not kept in a cycle until a collection."""
        self.resumes.clear()  # SimPy's loop is iterating it: it has called its one callback


class EngineLoop:
    """An engine's loop as the simulator drives it: ``steps`` runs the stream, ``chain_ready``
    holds one tick per instruction started, and ``start`` makes the ``Wakeup`` that runs it."""

    env: simpy.Environment
    chain_ready: Any  # array('q')
    wakeup: Wakeup

    @property
    def pc(self) -> int:
        """The instruction the engine is at: the first not yet started."""
        return len(self.chain_ready)

    def start(self) -> None:
        """Make the engine's loop and the ``Wakeup`` that starts it at tick 0 and resumes it."""
        self.wakeup = Wakeup(self.env, self.steps())

    def steps(self) -> Generator[None, Any, None]:
        raise NotImplementedError
