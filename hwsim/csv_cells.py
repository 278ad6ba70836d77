"""CSV cells that no spreadsheet evaluates: every CSV hwsim writes (sweep exports, trace tables)
passes its cells through ``csv_cell`` (CSV injection: a cell like ``=HYPERLINK(...)`` taken from
a user's tag, workload name or error text would run as a formula when the file is opened)."""

from __future__ import annotations

from typing import Any

#: What a spreadsheet reads a cell starting with as a formula (CSV injection): such a text cell is
#: written with a leading ``'``, which spreadsheets show as text (OWASP's advice).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A value as a CSV cell that no spreadsheet evaluates: text that starts like a formula gets a
    leading ``'`` (numbers, and text that reads as one, such as ``-1.5``, stay as they are)."""
    if not isinstance(value, str) or not value.startswith(_FORMULA_STARTS):
        return value
    try:
        float(value)
    except ValueError:
        return "'" + value
    return value
