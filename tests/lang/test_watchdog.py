"""The watchdog on kernel tracing: instruction and wall-time bounds, each one line naming the
kernel, the line reached and how to raise the bound; off for what asks for no bound."""

from __future__ import annotations

import time

import pytest

from hwsim import lang
from hwsim.errors import HwsimError
from hwsim.lang import TensorSpec, TraceLimitError, TraceLimits, watchdog

X = TensorSpec((32, 16), "fp32")


@lang.kernel
def copies(x, n):
    out = lang.ndarray((32, 16), lang.float32, buffer=lang.hbm, name="out")
    tile = lang.load(x)
    for _ in range(n):
        lang.isa.tensor_copy(tile, tile)
    lang.store(out, tile)
    return out


@lang.kernel
def spins(x):
    while True:
        pass


def test_past_the_instruction_bound_tracing_stops_with_one_line() -> None:
    with pytest.raises(TraceLimitError) as info:
        copies.build(X, 10_000, config="tiny", trace_limits=TraceLimits(500, None))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("test_watchdog.py:")  # the kernel's line it reached
    assert "tracing kernel copies stopped at its limit of 500 instructions (501 instructions" in (
        message
    )
    assert "--max-instructions N, or HWSIM_MAX_INSTRUCTIONS=N" in message


def test_the_bound_is_exact() -> None:
    built = copies.build(X, 100, config="tiny", trace_limits=TraceLimits(102, None))
    assert built.program.instruction_count == 102  # load, 100 copies, store: at the bound
    with pytest.raises(TraceLimitError, match="limit of 101 instructions"):
        copies.build(X, 100, config="tiny", trace_limits=TraceLimits(101, None))


def test_a_loop_making_no_instructions_is_stopped_by_the_clock() -> None:
    start = time.perf_counter()
    with pytest.raises(TraceLimitError, match=r"limit of 0\.3 s \(0 instructions made\)"):
        spins.build(X, config="tiny", trace_limits=TraceLimits(None, 0.3))
    assert time.perf_counter() - start < 30


def test_lang_repeat_copies_count(monkeypatch: pytest.MonkeyPatch) -> None:
    @lang.kernel
    def repeated(x):
        out = lang.ndarray((32, 16), lang.float32, buffer=lang.hbm, name="out")
        tile = lang.load(x)
        for _ in range(1000):
            lang.repeat(lambda: lang.isa.tensor_copy(tile, tile), [tile])
        lang.store(out, tile)
        return out

    with pytest.raises(TraceLimitError, match="limit of 300 instructions"):
        repeated.build(X, config="tiny", trace_limits=TraceLimits(300, None))


def test_limits_come_from_the_environment_and_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(watchdog.ENV_MAX_INSTRUCTIONS, "50")
    monkeypatch.setenv(watchdog.ENV_MAX_SECONDS, "2.5")
    assert TraceLimits.from_env() == TraceLimits(50, 2.5)
    with pytest.raises(TraceLimitError, match="limit of 50 instructions"):
        copies.build(X, 100, config="tiny")
    with watchdog.limits_within(1000):  # a command's --max-instructions wins over the variable
        copies.build(X, 100, config="tiny")
        assert watchdog.current_limits() == TraceLimits(1000, 2.5)
    monkeypatch.delenv(watchdog.ENV_MAX_SECONDS)
    assert watchdog.current_limits().max_seconds is None  # a program's builds: no clock
    with watchdog.limits_within():  # a command's: the default clock
        assert watchdog.current_limits().max_seconds == watchdog.DEFAULT_MAX_SECONDS
    with pytest.raises(TraceLimitError, match="limit of 50 instructions"):
        copies.build(X, 100, config="tiny")  # the block's limits end with it
    monkeypatch.setenv(watchdog.ENV_MAX_INSTRUCTIONS, "many")
    with pytest.raises(HwsimError, match="HWSIM_MAX_INSTRUCTIONS='many'"):
        TraceLimits.from_env()


def test_unbounded_and_bad_limits() -> None:
    copies.build(X, 10, config="tiny", trace_limits=TraceLimits.unbounded())
    for bad in ((0, None), (None, 0.0), (None, -1.0)):
        with pytest.raises(HwsimError, match="must be"):
            TraceLimits(*bad)
