"""The watchdog on kernel tracing: a kernel function that never returns is stopped with one line.

Building a kernel runs its Python (``Kernel.build``, and so ``hwsim run FILE.py:KERNEL``,
``hwsim nki`` and the ``hwsim.nki`` API). A loop that never ends, a typo that makes 10^9
iterations of ``affine_range`` or 10^7 ISA calls would otherwise run until memory is gone. Two
bounds stop it, each with a ``TraceLimitError`` naming the kernel, the bound, the line reached and
how to raise the bound:

- instructions: the ISA calls (and ``lang.repeat`` copies) a trace may make, ``max_instructions``
  (the largest kernels hwsim ships make about a million; each costs some hundred bytes);
- wall time: ``max_seconds`` of tracing, checked as instructions are made and, when tracing runs
  in the main thread, by a ``SIGALRM`` timer too, so a loop that makes no instructions at all is
  stopped as well.

Both come from ``HWSIM_MAX_INSTRUCTIONS`` / ``HWSIM_TRACE_TIMEOUT_S`` when set, else the defaults
below: the instruction bound always, the wall-time bound in the commands (``hwsim run``,
``hwsim nki``) but not in a program calling ``Kernel.build`` (whose time depends on the machine's
load, and which its caller can interrupt). The commands' ``--max-instructions`` /
``--trace-timeout`` set them around the command (``limits_within``), and
``Kernel.build(trace_limits=...)`` for one build. ``TraceLimits.unbounded()`` switches both off
(the bridge's own lowering, not a user's loop).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType, TracebackType

from hwsim.errors import HwsimError

#: Defaults: above the largest kernels hwsim ships (about 1M instructions, traced in seconds).
DEFAULT_MAX_INSTRUCTIONS = 4_000_000
#: The commands' wall-time bound (a kernel program's calls have none unless asked).
DEFAULT_MAX_SECONDS = 60.0
ENV_MAX_INSTRUCTIONS = "HWSIM_MAX_INSTRUCTIONS"
ENV_MAX_SECONDS = "HWSIM_TRACE_TIMEOUT_S"
#: Instructions between two looks at the clock (a look costs more than counting one).
_CLOCK_EVERY = 256


class TraceLimitError(HwsimError):
    """Tracing a kernel reached a bound of its watchdog (instructions or wall time)."""


@dataclass(frozen=True)
class TraceLimits:
    """How far tracing one kernel may go (None: no bound)."""

    max_instructions: int | None = DEFAULT_MAX_INSTRUCTIONS
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.max_instructions is not None and self.max_instructions < 1:
            raise HwsimError(f"max_instructions must be at least 1, got {self.max_instructions}")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise HwsimError(f"max_seconds must be more than 0, got {self.max_seconds}")

    @classmethod
    def unbounded(cls) -> TraceLimits:
        return cls(None, None)

    @classmethod
    def from_env(cls, default_seconds: float | None = None) -> TraceLimits:
        """What ``HWSIM_MAX_INSTRUCTIONS`` / ``HWSIM_TRACE_TIMEOUT_S`` say, else the default
        instructions and ``default_seconds``."""
        instructions = _env_number(ENV_MAX_INSTRUCTIONS, int)
        seconds = _env_number(ENV_MAX_SECONDS, float)
        return cls(
            DEFAULT_MAX_INSTRUCTIONS if instructions is None else int(instructions),
            default_seconds if seconds is None else float(seconds),
        )


def _env_number(name: str, kind: type[int] | type[float]) -> int | float | None:
    """The number an environment variable gives, None when it is unset or empty."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        return kind(text)
    except ValueError:
        raise HwsimError(f"{name}={text[:40]!r}: expected a number") from None


#: What ``Kernel.build`` uses when not told (``limits_within``); None: ``TraceLimits.from_env()``.
_LIMITS: contextvars.ContextVar[TraceLimits | None] = contextvars.ContextVar(
    "hwsim_trace_limits", default=None
)


@contextlib.contextmanager
def limits_within(
    max_instructions: int | None = None, max_seconds: float | None = None
) -> Iterator[None]:
    """Inside the block, kernel builds that pass no limits of their own use these (a command's
    ``--max-instructions`` / ``--trace-timeout``); a bound not given is the environment's, or
    the default (wall time included: a command's kernel is bounded in both)."""
    given = TraceLimits.from_env(DEFAULT_MAX_SECONDS)
    token = _LIMITS.set(
        TraceLimits(max_instructions or given.max_instructions, max_seconds or given.max_seconds)
    )
    try:
        yield
    finally:
        _LIMITS.reset(token)


def current_limits() -> TraceLimits:
    return _LIMITS.get() or TraceLimits.from_env()


class Watchdog:
    """Counts one kernel's instructions and watches its wall time (use as a context manager
    around the trace). ``where`` gives the kernel's source line for the message."""

    def __init__(self, kernel: str, limits: TraceLimits, where: Callable[[], str]) -> None:
        self.kernel, self.limits, self._where = kernel, limits, where
        self.instructions = 0
        self._max = limits.max_instructions if limits.max_instructions is not None else -1
        self._next_look = _CLOCK_EVERY
        self._deadline = float("inf")
        self._armed = False
        self._previous: object = None

    def __enter__(self) -> Watchdog:
        seconds = self.limits.max_seconds
        if seconds is None:
            return self
        self._deadline = time.monotonic() + seconds
        if (
            hasattr(signal, "setitimer")
            and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
        ):  # a loop that makes no instructions is stopped by the timer
            self._previous = signal.signal(signal.SIGALRM, self._alarm)
            signal.setitimer(signal.ITIMER_REAL, seconds)
            self._armed = True
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous or signal.SIG_DFL)  # type: ignore[arg-type]
            self._armed = False

    def count(self, instructions: int = 1) -> None:
        """``instructions`` more were made; raise ``TraceLimitError`` past a bound."""
        self.instructions += instructions
        if self.instructions > self._max >= 0:
            raise self._error(
                f"{self._max:,} instructions",
                "--max-instructions N, or HWSIM_MAX_INSTRUCTIONS=N",
            )
        if self.instructions >= self._next_look:
            self._next_look = self.instructions + _CLOCK_EVERY
            if time.monotonic() > self._deadline:
                raise self._timed_out()

    def _alarm(self, signum: int, frame: FrameType | None) -> None:
        raise self._timed_out()

    def _timed_out(self) -> TraceLimitError:
        return self._error(
            f"{self.limits.max_seconds:g} s", "--trace-timeout S, or HWSIM_TRACE_TIMEOUT_S=S"
        )

    def _error(self, bound: str, how: str) -> TraceLimitError:
        return TraceLimitError(
            f"{self._where()}: tracing kernel {self.kernel} stopped at its limit of {bound} "
            f"({self.instructions:,} instructions made): a loop that does not end? If the "
            f"kernel is meant to be this large, raise the limit ({how})"
        )
