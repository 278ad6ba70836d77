"""Selecting and labelling sweep results for plots: filters, derived columns, units, directions.

Rows are the dicts of ``hwsim.sweep.store.read_rows``. A column is a parameter (dotted config
path), a metric, or a product of columns (``tensor_engine.rows*tensor_engine.cols``: the PE
count). Times in ns and byte counts are shown in a readable unit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from hwsim.config.yaml_compose import describe_value
from hwsim.config.yaml_safe import load_yaml
from hwsim.sweep.errors import SweepError
from hwsim.sweep.paths import is_bytes_path

#: Metrics where higher is better (utilisation); everything else (time, bytes) is minimised.
_HIGHER_IS_BETTER_SUFFIXES = ("_pct", "_percent", "flops_per_s", "numerics_ok")
_TIME_UNITS = (("s", 1e9), ("ms", 1e6), ("µs", 1e3), ("ns", 1.0))
_BYTE_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1))


@dataclass(frozen=True)
class Results:
    """The rows of a results database with which columns are parameters and which metrics."""

    rows: list[dict[str, Any]]
    parameters: list[str]
    metrics: list[str]

    def columns(self) -> list[str]:
        return [*self.parameters, *self.metrics]

    def value(self, row: dict[str, Any], column: str) -> Any:
        """A column's value, products of columns (``a*b``) included; None if any part is."""
        parts = column.split("*")
        if len(parts) == 1:
            return row.get(column)
        product = 1.0
        for part in parts:
            value = row.get(part.strip())
            if not isinstance(value, (int, float)):
                return None
            product *= value
        return product

    def with_numbers(
        self, rows: Sequence[dict[str, Any]], column: str, what: str
    ) -> list[dict[str, Any]]:
        """The finished ``rows`` where ``column`` has a value, refusing text where a number is
        drawn (an edited database, or a text metric such as ``bottleneck``)."""
        kept = [r for r in rows if r["status"] == "ok" and self.value(r, column) is not None]
        text = [self.value(r, column) for r in kept if not _is_number(self.value(r, column))]
        if text:
            raise SweepError(
                f"{what} {column}: {len(text)} finished run(s) hold text ({describe_value(text[0])}"
                "), not a number; plots draw numbers (pick a numeric column)"
            )
        return kept

    def check_column(self, column: str, what: str) -> None:
        known = self.columns()
        for part in column.split("*"):
            if part.strip() not in known:
                import difflib

                close = difflib.get_close_matches(part.strip(), known, n=1, cutoff=0.5)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise SweepError(
                    f"{what} '{part.strip()}' is not a column of these results{hint}; "
                    f"parameters: {', '.join(self.parameters) or 'none'}; "
                    f"metrics: {', '.join(self.metrics)}"
                )

    def varying(self, rows: Sequence[dict[str, Any]], given: Sequence[str] = ()) -> list[str]:
        """Parameters that vary among ``rows`` beyond what ``given`` columns (and earlier ones of
        the result) determine: with zipped rows/cols, cols is not listed once rows is."""
        kept: list[str] = []
        for p in self.parameters:
            if p in given:
                continue
            if not _determined(rows, [*given, *kept], p):
                kept.append(p)
        return kept


def _determined(rows: Sequence[dict[str, Any]], by: Sequence[str], column: str) -> bool:
    """Whether each combination of ``by`` values comes with a single value of ``column``."""
    seen: dict[tuple[Any, ...], Any] = {}
    for row in rows:
        key = tuple(_hashable(row.get(b)) for b in by)
        value = _hashable(row.get(column))
        if seen.setdefault(key, value) != value:
            return False
    return True


def select(
    results: Results, workloads: Sequence[str] = (), where: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Rows of the named workloads (all if none) matching every ``PATH=VALUE`` of ``where``."""
    rows = results.rows
    if workloads:
        known = sorted({r["workload"] for r in rows})
        missing = [w for w in workloads if w not in known]
        if missing:
            raise SweepError(f"no results for workload {missing[0]!r}; have: {', '.join(known)}")
        rows = [r for r in rows if r["workload"] in workloads]
    for condition in where:
        column, sep, raw = condition.partition("=")
        column = column.strip()
        if not sep:
            raise SweepError(f"--where {condition!r}: expected PATH=VALUE")
        results.check_column(column, "--where")
        source = f"--where {describe_value(condition)}"
        wanted = load_yaml(raw, source, SweepError, path=(column,), show_lines=False)
        kept = [r for r in rows if _equal(r.get(column), wanted)]
        if not kept:
            values = sorted({_hashable(r.get(column)) for r in rows}, key=str)
            raise SweepError(
                f"--where {condition}: no rows; {column} takes {', '.join(map(str, values))}"
            )
        rows = kept
    if not rows:
        raise SweepError("no results to plot")
    return rows


def _equal(value: Any, wanted: Any) -> bool:
    if isinstance(value, (int, float)) and isinstance(wanted, (int, float)):
        return math.isclose(value, wanted, rel_tol=1e-9)
    return str(value) == str(wanted)


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, type(None))) else str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def sort_key(value: Any) -> tuple[int, Any]:
    """Numbers in numeric order, then everything else as text."""
    return (0, value) if isinstance(value, (int, float)) else (1, str(value))


def higher_is_better(column: str) -> bool:
    return column.endswith(_HIGHER_IS_BETTER_SUFFIXES)


def parse_objective(text: str) -> tuple[str, bool]:
    """``'total_ns'`` or ``'mfu_pct:max'`` -> (column, maximise?)."""
    column, sep, goal = text.rpartition(":")
    if not sep or goal not in ("min", "max"):
        return text, higher_is_better(text)
    return column, goal == "max"


@dataclass(frozen=True)
class Unit:
    """How a column's numbers are shown: divided by ``scale``, with ``suffix``."""

    label: str
    scale: float = 1.0
    suffix: str = ""

    def __call__(self, value: Any) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "–"
        if not isinstance(value, (int, float)):
            return str(value)
        shown = value / self.scale
        if float(shown).is_integer():
            text = f"{int(shown)}" if abs(shown) < 1e6 else f"{int(shown):,}"
        else:
            text = f"{shown:.3g}" if abs(shown) < 1e4 else f"{shown:,.0f}"
        return f"{text} {self.suffix}".strip()


def unit_for(column: str, values: Iterable[Any]) -> Unit:
    """A readable unit for a column from its largest value (ns -> µs/ms, bytes -> KiB/MiB)."""
    numbers = [abs(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    top = max(numbers, default=0.0)
    leaf = column.rsplit(".", 1)[-1]
    if "*" in column:
        return Unit(column.replace("*", " × "))
    if leaf.endswith("_ns"):
        name, scale = next(((n, s) for n, s in _TIME_UNITS if top >= s), ("ns", 1.0))
        what = "total time" if column == "total_ns" else column.removesuffix("_ns")
        return Unit(f"{what} ({name})", scale, "")
    if is_bytes_path(column):
        name, scale = next(((n, s) for n, s in _BYTE_UNITS if top >= s), ("B", 1))
        return Unit(column, scale, name)  # the unit is in every tick label
    if "bytes_per_ns" in leaf:
        return Unit(f"{column} (GB/s)")
    if leaf.endswith("_pct"):
        return Unit(f"{column} (%)", 1.0, "%")
    return Unit(column)


def short_name(column: str, among: Sequence[str]) -> str:
    """The last path component if no other of ``among`` shares it, else the whole path."""
    leaf = column.rsplit(".", 1)[-1]
    clashes = [c for c in among if c.rsplit(".", 1)[-1] == leaf]
    return leaf if len(clashes) <= 1 else column


def point_label(row: dict[str, Any], columns: Sequence[str], results: Results) -> str:
    """'rows=64, cols=128, bytes_per_partition=96 KiB' for a row's values of ``columns``."""
    parts = []
    for column in columns:
        value = row.get(column)
        shown = unit_for(column, [value])(value) if is_bytes_path(column) else _plain(value)
        parts.append(f"{short_name(column, columns)}={shown}")
    return ", ".join(parts)


def _plain(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
