"""Errors of sweeps: a spec that does not validate, a sweep that cannot run (a spec's schema
errors are described by ``hwsim.config.validation_errors``, as a config's are)."""

from __future__ import annotations

from hwsim.errors import HwsimError


class SweepError(HwsimError):
    """A sweep cannot run (missing extra, unreachable cluster, unreadable database, ...)."""


class SpecError(SweepError):
    """A sweep spec is invalid; the message names the spec file and each dotted path."""
