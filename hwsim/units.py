"""How hwsim prints a time or a size: one rule everywhere a person reads it (run summaries, the
bridge's report, advice, `hwsim nki`, the tuner), so the same value never reads two ways.

Times take the unit that puts the number between 1 and 1000 (ns, µs, ms, s) with 3
significant figures; sizes the binary unit (B, KiB, MiB, GiB) the same way. JSON and CSV keep the
raw numbers (``*_ns``, ``*_bytes``); only text goes through here.
"""

from __future__ import annotations

import math

#: Significant figures of a printed time or size.
SIGNIFICANT_FIGURES = 3

_TIME_UNITS = (("s", 1e9), ("ms", 1e6), ("µs", 1e3))
_SIZE_UNITS = (("GiB", float(1 << 30)), ("MiB", float(1 << 20)), ("KiB", float(1 << 10)))


def time_text(ns: float) -> str:
    """``7.17 ms``, ``334 µs``, ``1.42 µs``, ``796 ns``; ``inf``/``nan`` as themselves."""
    return _scaled(ns, _TIME_UNITS, "ns")


def size_text(size_bytes: float) -> str:
    """``24.0 MiB``, ``12.3 KiB``, ``512 B`` (a whole number of bytes below 1 KiB)."""
    if math.isfinite(size_bytes) and abs(size_bytes) < 1024:
        return f"{size_bytes:,.0f} B"
    return _scaled(size_bytes, _SIZE_UNITS, "B")


def significant(value: float) -> str:
    """``value`` to ``SIGNIFICANT_FIGURES`` figures, trailing zeros kept (``7.10``), never in
    exponent form (``12,345`` for a value past the figures)."""
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 10**SIGNIFICANT_FIGURES:
        return f"{value:,.0f}"
    text = f"{value:#.{SIGNIFICANT_FIGURES}g}"
    if "e" in text:  # below 1e-4: %g switches to exponent form
        return f"{value:.{SIGNIFICANT_FIGURES - 1}e}"
    return text.rstrip(".")


def _scaled(value: float, units: tuple[tuple[str, float], ...], base: str) -> str:
    if not math.isfinite(value):
        return f"{value} {base}"
    for unit, scale in units:
        if abs(value) >= scale * (1 - 0.5 * 10.0**-SIGNIFICANT_FIGURES):  # 999.9 µs -> 1.00 ms
            return f"{significant(value / scale)} {unit}"
    return f"{significant(value)} {base}"
