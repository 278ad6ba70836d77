"""Strict JSON, for every JSON document hwsim writes or reads.

Python's ``json`` writes ``NaN``, ``Infinity`` and ``-Infinity``, which are not JSON (RFC 8259):
other tools reject the file, or read it differently. It also reads them, and reads ``1e309`` as
infinity. Here a non-finite float is written as the string ``"NaN"``, ``"Infinity"`` or
``"-Infinity"`` (as the saved-program format says, docs/export.md), and reading refuses the bare
literals and numbers too large for a float, with a ``ValueError`` that says so; readers that
know a field is a float turn those strings back (``as_float``).
"""

from __future__ import annotations

import json
import math
from typing import Any

#: The strings non-finite floats are written as, and what they read back as.
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps`` of ``value`` with every non-finite float (also numpy's, and inside dicts,
    lists and tuples) written as its string; ``options`` go to ``json.dumps`` (``indent``,
    ``default``, ...). Never writes a ``NaN`` or ``Infinity`` literal."""
    return json.dumps(finite(value), allow_nan=False, **options)


def finite(value: Any) -> Any:
    """``value`` with its non-finite floats replaced by their strings (containers copied)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else _spelled(value)
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    floating = getattr(value, "dtype", None) is not None and getattr(value, "ndim", 1) == 0
    if floating and getattr(value.dtype, "kind", "") == "f":  # a numpy float scalar
        return finite(float(value))
    return value


def _spelled(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def loads(text: str | bytes) -> Any:
    """``json.loads`` that refuses ``NaN``/``Infinity`` literals and numbers too large for a
    float (``ValueError`` saying which)."""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)


def _refuse_constant(name: str) -> None:
    raise ValueError(f'{name} is not JSON (non-finite numbers are written as strings, "{name}")')


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(
            f"the number {text[:40]} is too large for a float (non-finite numbers are written as "
            "strings)"
        )
    return value


def as_float(value: Any) -> Any:
    """A float field's value as read back: its non-finite strings as floats, the rest as is."""
    if isinstance(value, str) and value in NON_FINITE:
        return NON_FINITE[value]
    return value
