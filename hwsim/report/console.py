"""Where report tables are printed: one width rule for every command and the bridge's report."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console

#: Columns of report tables when the output is not a terminal (a log, CI, a pipe): wide enough
#: for the widest table (the bridge's per-op table) to keep one line per row. A terminal gets its
#: own width.
PIPED_WIDTH = 160


def report_console(**options: Any) -> Console:
    """A rich console for report tables: the terminal's width, or ``PIPED_WIDTH`` when stdout is
    not a terminal (rich's own fallback, 80 columns, wraps most tables)."""
    if sys.stdout.isatty() or "width" in options:
        return Console(**options)
    return Console(width=PIPED_WIDTH, **options)
