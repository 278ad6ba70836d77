"""Errors a user can cause. Each message says what was wrong, where, and what would be right.

A message echoes what the user gave in short: ``shorten`` cuts a long value where it is quoted,
and ``cut_long_values`` is the last guard of the one-line contract (the CLI applies it to every
message), so a 400 KB value never becomes a 400 KB error line.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from typing import TypeVar

#: Characters of one unbroken value kept in a message (its start and end), and of a message.
MAX_VALUE_CHARS = 80
MAX_MESSAGE_CHARS = 2000
_LONG_VALUE = re.compile(rf"\S{{{MAX_VALUE_CHARS * 2 + 1},}}")

T = TypeVar("T")


def shorten(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """``text`` cut to ``limit`` characters for an error line (a 5000-digit dimension)."""
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def cut_long_values(message: str) -> str:
    """``message`` with every unbroken run of over ``2 * MAX_VALUE_CHARS`` characters cut to its
    start and end (with the count of what was cut), then cut to ``MAX_MESSAGE_CHARS`` likewise:
    the message's own words (what was wrong, what would be right) stay readable."""

    def cut(match: re.Match[str]) -> str:
        value = match.group()
        return f"{value[:MAX_VALUE_CHARS]}...({len(value)} characters)...{value[-20:]}"

    message = _LONG_VALUE.sub(cut, message)
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    head, tail = MAX_MESSAGE_CHARS * 3 // 4, MAX_MESSAGE_CHARS // 4
    return f"{message[:head]} ...({len(message) - head - tail} characters cut)... {message[-tail:]}"


class HwsimError(Exception):
    """Base class: the CLI prints these as one line and exits non-zero."""


class ConfigError(HwsimError):
    """A hardware config (file, key, value or override) is invalid."""


class IllegalInstructionError(HwsimError):
    """An instruction breaks a hardware rule (operand bounds, engine access, tile limits)."""


class MemoryAccessError(IllegalInstructionError):
    """An access pattern falls outside its memory or allocation."""


class DeadlockError(HwsimError):
    """The run ended with instructions still waiting on semaphores."""


class RaceError(HwsimError):
    """Two instructions on different engines touch the same bytes with no ordering between them."""


class InitCheckError(HwsimError):
    """Instructions read memory that nothing wrote (``initcheck=True``); ``findings`` lists them."""

    def __init__(self, message: str, findings: list[object] | None = None) -> None:
        super().__init__(message)
        self.findings = findings or []


class WorkloadError(HwsimError):
    """A workload specification cannot be parsed or built."""


class IncompatibleProgramError(WorkloadError):
    """A saved program cannot run on a config: a field its lowering depended on differs."""


class SavedProgramError(WorkloadError):
    """A saved program file is unreadable, corrupted, from a newer hwsim, malformed, or an old
    pickle (which is never loaded)."""


def set_inside(var: ContextVar[T | None], outside: str) -> T:
    """The value of ``var``, which a kernel sets while it is built or run; a call from outside
    that scope (none set) is a ``HwsimError`` saying ``outside``: where such calls must run."""
    value = var.get()
    if value is None:
        raise HwsimError(outside)
    return value
