"""The SimPy behaviour the engine loops rely on (``hwsim.machine.process``), all public API: an
engine keeps its own clock ahead of SimPy's and schedules for absolute ticks, sleeps on one
reused ``Wakeup`` (a ``Timeout`` rescheduled with ``Environment.schedule``), and the DMA's
``_TimedCall`` is a ``Timeout`` with one shared callback. If a SimPy release changes any of this,
these fail before any timing does. And nothing in the simulator touches SimPy's private state."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import simpy
from simpy.events import NORMAL

from hwsim.machine.dma import _TimedCall
from hwsim.machine.process import Wakeup

MACHINE = Path(__file__).resolve().parents[2] / "hwsim" / "machine"


def test_the_simulator_uses_no_private_simpy_state():
    private = re.compile(r"\benv\._|\._(now|queue|eid|ok|value|resume|target|defused)\b|Initialize")
    found = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted(MACHINE.glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert found == []


def test_peek_is_the_next_due_tick():
    env = simpy.Environment()
    assert env.peek() == float("inf")
    env.timeout(7)
    env.timeout(3)
    assert env.peek() == 3


def test_delays_count_from_simpys_clock():
    # an engine ahead of SimPy's clock schedules for tick T with the delay T - env.now
    env = simpy.Environment()
    fired = []

    def proc():
        yield env.timeout(5)
        ahead = 40  # the engine's own clock; nothing else is due before it
        env.timeout(ahead + 3 - env.now).callbacks.append(lambda _: fired.append(env.now))

    env.process(proc())
    env.run()
    assert fired == [43]


def test_the_loop_reads_callbacks_and_leaves_the_list_alone():
    # a Wakeup sleeps with one shared callbacks list, _TimedCall too: SimPy's loop must call
    # each callback with the event and set the event's attribute to None, and never change the
    # list itself
    env = simpy.Environment()
    seen: list[tuple[int, object]] = []
    shared = [lambda event: seen.append((env.now, event))]
    first, second = env.timeout(2), env.timeout(5)
    first.callbacks = second.callbacks = shared
    env.run()
    assert seen == [(2, first), (5, second)]
    assert first.callbacks is None and second.callbacks is None
    assert len(shared) == 1


def test_a_rescheduled_timeout_fires_where_new_timeouts_would():
    # the same sleeps, one process on new timeouts and one on one rescheduled timeout, tied at
    # every tick: each resumes in the order it went to sleep, with a timeout's value (None)
    def sleeps(env, log, name, reuse):
        reused = env.timeout(0)
        yield reused
        for delay in (2, 0, 3, 3):
            if reuse:
                reused.callbacks = []
                env.schedule(reused, NORMAL, delay)
                value = yield reused
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


def _loop(env, log, name, waiting):
    """An engine loop on its Wakeup: started at 0, a sleep until 3, a semaphore-style wait it
    is woken from (``wake``), a last sleep, then done."""
    wakeup: Wakeup

    def steps():
        log.append((name, env.now))
        wakeup.callbacks = wakeup.resumes
        env.schedule(wakeup, NORMAL, 3 - env.now)
        yield
        log.append((name, env.now))
        waiting.append(wakeup)
        yield
        log.append((name, env.now, wakeup.reached))
        wakeup.callbacks = wakeup.resumes
        env.schedule(wakeup, NORMAL, 2)
        yield
        log.append((name, env.now))
        wakeup.let_go()
        yield

    wakeup = Wakeup(env, steps())
    return wakeup


def test_an_engine_loop_sleeps_and_wakes_where_a_simpy_process_would():
    def run(engine_loop):
        env, log, waiting = simpy.Environment(), [], []
        woken = env.event()

        def other():
            yield env.timeout(3)
            log.append(("other", env.now))
            yield env.timeout(1)
            if engine_loop:
                waiting[0].wake(42)
            else:
                woken.succeed(42)
            yield env.timeout(2)
            log.append(("other", env.now))

        def plain():  # the same loop as a plain SimPy process, on new events
            log.append(("engine", env.now))
            yield env.timeout(3)
            log.append(("engine", env.now))
            value = yield woken
            log.append(("engine", env.now, value))
            yield env.timeout(2)
            log.append(("engine", env.now))

        if engine_loop:
            _loop(env, log, "engine", waiting)
        else:
            env.process(plain())
        env.timeout(0).callbacks.append(lambda _: env.process(other()))  # after the engine
        env.run()
        return log

    expected = [
        ("engine", 0),
        ("engine", 3),
        ("other", 3),
        ("engine", 4, 42),
        ("other", 6),
        ("engine", 6),
    ]
    assert run(True) == run(False) == expected


def test_wakeups_made_before_the_run_start_in_order_before_what_they_schedule():
    env, log = simpy.Environment(), []

    def steps(name):
        log.append((name, env.now))
        env.timeout(0).callbacks.append(lambda _: log.append((f"{name} scheduled", env.now)))
        yield

    for name in ("a", "b"):
        Wakeup(env, steps(name))
    env.run()
    assert log == [("a", 0), ("b", 0), ("a scheduled", 0), ("b scheduled", 0)]


def test_a_failed_event_is_raised_by_run():
    env = simpy.Environment()
    env.event().fail(KeyError("lost"))
    with pytest.raises(KeyError, match="lost"):
        env.run()


def test_a_timed_call_runs_where_a_timeout_with_its_callback_would():
    env = simpy.Environment()
    fired: list[tuple[str, int]] = []
    env.timeout(4).callbacks.append(lambda _: fired.append(("timeout", env.now)))
    _TimedCall(env, 4, lambda name: fired.append((name, env.now)), ("call",))
    env.timeout(4).callbacks.append(lambda _: fired.append(("later timeout", env.now)))
    _TimedCall(env, 1, lambda name: fired.append((name, env.now)), ("early call",))
    env.run()
    assert fired == [("early call", 1), ("timeout", 4), ("call", 4), ("later timeout", 4)]
