"""Errors a user can cause. Each message says what was wrong, where, and what would be right."""

from __future__ import annotations


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
