"""Guard for the simulator's private clock shortcut (``simulator._advance_to`` sets SimPy's
``Environment._now``) and its reused wake-up event (``simulator._Wakeup``, queued by hand as
``Environment.schedule`` queues a timeout): if a SimPy release renames or caches the clock or
changes its queue entries, these fail before any timing does. SimPy is pinned to its major
version in pyproject.toml for the same reason."""

from __future__ import annotations

from heapq import heappush
from importlib.metadata import version

import simpy
from simpy.events import NORMAL

from hwsim.machine.simulator import _advance_to, _Wakeup


def test_simpy_is_the_pinned_major_version():
    assert version("simpy").split(".")[0] == "4"


def test_advance_to_moves_environment_now():
    env = simpy.Environment()
    seen = []

    def proc():
        yield env.timeout(3)
        _advance_to(env, 10)
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
        _advance_to(env, 20)  # nothing else is due before 20: the shortcut's precondition
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
        _advance_to(env, 100)
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
    # the same sleeps, one process on new timeouts and one on its reused _Wakeup, tied at every
    # tick: each resumes in the order it went to sleep, and with a timeout's value (None)
    def sleeps(env, log, name, reuse):
        wakeup = _Wakeup(env)
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
