"""Guard for the simulator's private clock shortcut (``process.advance_to`` sets SimPy's
``Environment._now``), its reused wake-up event (``process.Wakeup``, queued by hand as
``Environment.schedule`` queues a timeout), its engine process (``process.EngineProcess``:
resumed through one shared callbacks list, started by ``Initialize`` calling ``_resume``) and
the DMA's calls (``dma._Call``, an object with only ``callbacks`` and ``_ok`` on SimPy's heap):
if a SimPy release renames or caches the clock or changes its queue entries or its loop, these
fail before any timing does. SimPy is pinned to its major version in pyproject.toml for the
same reason."""

from __future__ import annotations

from heapq import heappush
from importlib.metadata import version

import pytest
import simpy
from simpy.events import NORMAL, Initialize

from hwsim.machine.dma import _Call
from hwsim.machine.process import EngineProcess, Wakeup, advance_to


def test_simpy_is_the_pinned_major_version():
    assert version("simpy").split(".")[0] == "4"


def test_advance_to_moves_environment_now():
    env = simpy.Environment()
    seen = []

    def proc():
        yield env.timeout(3)
        advance_to(env, 10)
        seen.append(env.now)
        yield env.timeout(0)
        seen.append(env.now)

    env.process(proc())
    env.run()
    assert seen == [10, 10]
    assert env.now == 10


def test_events_scheduled_after_advance_fire_at_the_advanced_time():
    env = simpy.Environment()
    fired: list[tuple[str, int]] = []

    def advancing():
        yield env.timeout(2)
        advance_to(env, 20)  # nothing else is due before 20: the shortcut's precondition
        yield env.timeout(5)  # due at 25, not 7
        fired.append(("advancing", env.now))
        done = env.timeout(4)  # due at 29
        done.callbacks.append(lambda _: fired.append(("callback", env.now)))
        yield done

    def later():
        yield env.timeout(27)  # scheduled at 0, due at 27: between the two above
        fired.append(("later", env.now))

    env.process(advancing())
    env.process(later())
    env.run()
    assert fired == [("advancing", 25), ("later", 27), ("callback", 29)]
    assert env.now == 29


def test_run_until_respects_the_advanced_clock():
    env = simpy.Environment()
    fired = []

    def proc():
        yield env.timeout(1)
        advance_to(env, 100)
        yield env.timeout(50)
        fired.append(env.now)

    env.process(proc())
    env.run(until=120)
    assert fired == []
    assert env.now == 120
    env.run(until=200)
    assert fired == [150]


def test_the_event_queue_the_engine_loop_peeks_at():
    # the engine loop reads ``env._queue[0][0]`` in place of ``env.peek()`` (one call fewer per
    # instruction): the queue must stay a heap of (tick, ...) entries, empty when peek is inf
    env = simpy.Environment()
    assert env._queue == [] and env.peek() == float("inf")
    env.timeout(7)
    env.timeout(3)
    assert env._queue[0][0] == env.peek() == 3


def test_the_queue_entry_a_timeout_makes():
    # the engine loop pushes its wake-up as (now + delay, NORMAL, next(env._eid), event)
    env = simpy.Environment()
    timeout = env.timeout(4)
    tick, priority, eid, event = env._queue[0]
    assert (tick, priority, event) == (4, NORMAL, timeout)
    assert next(env._eid) == eid + 1


def test_a_reused_wakeup_fires_where_new_timeouts_would():
    # the same sleeps, one process on new timeouts and one on its reused Wakeup, tied at every
    # tick: each resumes in the order it went to sleep, and with a timeout's value (None)
    def sleeps(env, log, name, reuse):
        wakeup = Wakeup(env)
        for delay in (2, 0, 3, 3):
            if reuse:
                wakeup.callbacks = []
                heappush(env._queue, (env.now + delay, NORMAL, next(env._eid), wakeup))
                value = yield wakeup
            else:
                value = yield env.timeout(delay)
            log.append((name, env.now, value))

    def order(first_reuses):
        env, log = simpy.Environment(), []
        env.process(sleeps(env, log, "first", first_reuses))
        env.process(sleeps(env, log, "second", not first_reuses))
        env.run()
        return log

    expected = [(name, t, None) for t in (2, 2, 5, 8) for name in ("first", "second")]
    assert order(True) == order(False) == expected


# ---- the engine process (process.EngineProcess) and the DMA's calls (dma._Call) -------------


def test_the_loop_reads_callbacks_and_leaves_the_list_alone():
    # EngineProcess queues every sleep with one shared callbacks list, dma._Call too: SimPy's
    # loop must call each callback with the event and set the event's attribute to None, and
    # never change the list itself
    env = simpy.Environment()
    seen: list[tuple[int, object]] = []
    shared = [lambda event: seen.append((env.now, event))]
    first, second = simpy.Event(env), simpy.Event(env)
    for event, tick in ((first, 2), (second, 5)):
        event._ok, event._value, event.callbacks = True, None, shared
        heappush(env._queue, (tick, NORMAL, next(env._eid), event))
    env.run()
    assert seen == [(2, first), (5, second)]
    assert first.callbacks is None and second.callbacks is None
    assert len(shared) == 1


def test_initialize_starts_a_process_through_its_resume():
    # EngineProcess is started by the Initialize event calling its ``_resume`` once
    env = simpy.Environment()
    started = []

    class Started(simpy.Process):
        def __init__(self, env):
            self.env, self.callbacks = env, []
            self._target = Initialize(env, self)

        def _resume(self, event):
            started.append((env.now, type(event).__name__))

    Started(env)
    env.run()
    assert started == [(0, "Initialize")]


def _sleeps_and_waits(env, log, name):
    """A loop on the engine process's terms: a sleep on its Wakeup, a wait it is woken from by
    ``succeed`` (by ``waker``), a last sleep, then ``finish``."""

    def steps(process):
        wakeup = Wakeup(env, process.resumes)
        assert wakeup.sleeps_until(3)  # the other process's timeout is due at 3: queue it
        yield
        log.append((name, env.now))
        waiting.append(wakeup)
        yield
        log.append((name, env.now, wakeup.value))
        assert wakeup.sleeps_until(env.now + 2)
        yield
        log.append((name, env.now))
        process.finish()
        yield

    waiting: list[Wakeup] = []
    return steps, waiting


def test_an_engine_process_sleeps_and_wakes_where_a_simpy_process_would():
    def run(engine_process):
        env, log = simpy.Environment(), []
        steps, waiting = _sleeps_and_waits(env, log, "engine")
        woken = env.event()

        def other():
            yield env.timeout(3)
            log.append(("other", env.now))
            yield env.timeout(1)
            (waiting[0] if engine_process else woken).succeed(42)
            yield env.timeout(2)
            log.append(("other", env.now))

        def plain():  # the same loop as a plain SimPy process, on new events
            yield env.timeout(3)
            log.append(("engine", env.now))
            value = yield woken
            log.append(("engine", env.now, value))
            yield env.timeout(2)
            log.append(("engine", env.now))

        process = EngineProcess(env, steps) if engine_process else env.process(plain())
        env.process(other())
        assert process.is_alive
        env.run()
        assert not process.is_alive and process.ok
        return log

    expected = [("engine", 3), ("other", 3), ("engine", 4, 42), ("other", 6), ("engine", 6)]
    assert run(True) == run(False) == expected


def test_a_failed_engine_process_is_raised_by_run():
    env = simpy.Environment()

    def steps(process):
        process.fail(KeyError("lost"))
        yield

    EngineProcess(env, steps)
    with pytest.raises(KeyError, match="lost"):
        env.run()


def test_a_call_runs_where_a_timeout_with_its_callback_would():
    # dma._Call is scheduled as env.timeout(delay) with one callback: the same tick, same order
    env = simpy.Environment()
    fired: list[tuple[str, int]] = []
    env.timeout(4).callbacks.append(lambda _: fired.append(("timeout", env.now)))
    env.schedule(_Call(lambda name: fired.append((name, env.now)), ("call",)), NORMAL, 4)
    env.timeout(4).callbacks.append(lambda _: fired.append(("later timeout", env.now)))
    env.schedule(_Call(lambda name: fired.append((name, env.now)), ("early call",)), NORMAL, 1)
    env.run()
    assert fired == [("early call", 1), ("timeout", 4), ("call", 4), ("later timeout", 4)]
