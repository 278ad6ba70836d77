"""How an engine's loop sits on SimPy, at one SimPy event per instruction or fewer.

A process that would sleep until a tick before which no other event is due moves the clock there
itself instead (``advance_to``): same ticks, same order, one SimPy event fewer. Otherwise it
sleeps on one reused event (``Wakeup``) queued as ``env.timeout`` would queue a new one, and
waits for a semaphore on it too; SimPy's loop resumes the process by calling its generator
directly (``EngineProcess``). These lean on SimPy internals (``Environment._now``, ``_queue``,
``_eid``, ``Initialize``); ``tests/sim/test_simpy_clock.py`` guards each, and SimPy is pinned to
its major version.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from heapq import heappush
from typing import Any

import simpy
from simpy.events import NORMAL, Initialize


class EngineProcess(simpy.Process):
    """An engine's SimPy process, resumed by SimPy's loop calling its generator's ``send``.

    ``simpy.Process`` resumes its generator from its ``_resume``, which SimPy's loop calls for
    each event the generator yields: a Python call per event, and a new bound method appended to
    the event's callbacks. Here every event the engine loop sleeps on is queued with the one
    callbacks list ``resumes`` (``[generator.send]``), so a resumption is SimPy's loop calling
    ``send`` (SimPy's loop reads that list and sets the event's own attribute to None; it never
    changes the list, so one list serves every sleep). ``_resume`` is called once, by the
    ``Initialize`` event that starts the process, as SimPy starts any.

    What ``Process._resume`` does when its generator ends or raises, the loop does itself
    (``finish``, ``fail``): it never returns or raises into SimPy's loop (a StopIteration or an
    exception from a callback would leave ``env.run`` as is), and the failed process is raised
    from ``env.run`` as SimPy raises any. Then it drops the generator (``_let_go``). It is not
    interruptible (nothing interrupts engines).
    """

    def __init__(
        self,
        env: simpy.Environment,
        steps: Callable[[EngineProcess], Generator[None, Wakeup | None, None]],
    ) -> None:
        # simpy.Process.__init__, inlined as SimPy inlines Event.__init__
        self.env = env
        self.callbacks: list[Callable[[simpy.Event], None]] = []
        self._name = steps.__qualname__
        self._loop: Generator[None, Wakeup | None, None] | None = steps(self)
        #: The callbacks of every event the loop sleeps on.
        self.resumes = [self._loop.send]
        self._target = Initialize(env, self)  # scheduled as ``env.process`` schedules its start

    @property
    def name(self) -> str:
        return self._name

    def _resume(self, event: simpy.Event) -> None:
        """Start the loop (the ``Initialize`` event's callback)."""
        assert self._loop is not None
        self._loop.send(None)

    def finish(self) -> None:
        """The loop is done: succeed, as ``Process._resume`` does at the generator's end."""
        self.succeed()
        self._let_go()

    def fail(self, exception: Exception) -> EngineProcess:
        """The loop raised ``exception``: fail, as ``Process._resume`` does (SimPy's loop raises
        it from ``env.run`` when it processes this process)."""
        super().fail(exception)
        self._let_go()
        return self

    def _let_go(self) -> None:
        """Drop every reference to the generator but the ``send`` running now: once it returns
        to SimPy's loop the generator is closed (at its last yield) and its frame freed with the
        run's per-pc state it holds, instead of living on in a cycle until a collection."""
        self.resumes.clear()  # SimPy's loop is iterating it: it has called its one callback
        self._loop = None


class Wakeup(simpy.Event):
    """The one event an engine process sleeps on, scheduled again each time it sleeps.

    In place of a new ``env.timeout(delay)`` per sleep: the process pushes this event on SimPy's
    heap with the entry ``Environment.schedule`` would make for that timeout (``(now + delay,
    NORMAL, next event id, event)``), so it is processed at the same tick in the same order, as
    the timeout would. It is also the event a wait for a semaphore sleeps on (``succeed``, in
    place of a new event per wait). It is reused only once it has been processed (the process
    sleeps on it again after it resumed the process), so one is never queued twice.

    ``resumes``: the callbacks list it is queued with (``EngineProcess.resumes``); None for a
    process of ``env.process``, which adds its own callback to a new list each time.
    """

    def __init__(
        self, env: simpy.Environment, resumes: list[Callable[[Any], Any]] | None = None
    ) -> None:
        super().__init__(env)
        self._ok, self._value = True, None  # triggered, with a timeout's value
        self.resumes = resumes
        # SimPy's event heap of (tick, priority, id, event), and its event ids (as
        # ``Environment.schedule`` uses them).
        self._queue, self._eid = env._queue, env._eid

    def sleeps_until(self, tick: int) -> bool:
        """Reach ``tick``: True when the process must yield this event (queued for ``tick``,
        since another event is due at or before it), False when the clock was moved there
        instead (``advance_to``: nothing else would run in between)."""
        queue = self._queue
        if queue and queue[0][0] <= tick:
            self.callbacks = self.resumes if self.resumes is not None else []
            heappush(queue, (tick, NORMAL, next(self._eid), self))
            return True
        self.env._now = tick  # advance_to, inlined
        return False

    def succeed(self, value: Any = None) -> Wakeup:
        """Resume the process now with ``value`` (a semaphore's reaching tick): queued as
        ``Event.succeed`` queues an event (``(now, NORMAL, next event id, event)``), without
        its check that the event was not triggered before (this one is, once per sleep)."""
        self._value = value
        self.callbacks = self.resumes if self.resumes is not None else []
        heappush(self._queue, (self.env._now, NORMAL, next(self._eid), self))
        return self


def advance_to(env: simpy.Environment, tick: int) -> None:
    """Move the clock to ``tick`` from inside a process, in place of ``yield env.timeout(...)``.

    Only when ``env.peek() > tick``: no other event is due before or at ``tick``, so the timeout
    would be the next event processed, resuming this process at ``tick`` with nothing run in
    between. Skipping it changes no tick and no order of anything (event ids only break ties
    between events due at the same tick, and all later ones shift alike). SimPy offers no public
    way to do this; ``_now`` is its clock (``Environment.now`` returns it).
    """
    env._now = tick
