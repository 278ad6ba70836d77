"""Figures of sweep results: a metric against a parameter (a line per workload), a heatmap over
two parameters, and (``hwsim.sweep.pareto``) the Pareto front of two columns.

Like ``hwsim.plots``, matplotlib is imported inside the functions, through its object API only.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from hwsim.sweep.errors import SweepError
from hwsim.sweep.table import (
    Results,
    Unit,
    parse_objective,
    select,
    short_name,
    sort_key,
    unit_for,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PLOT_KINDS = ("line", "heatmap", "pareto")
DPI = 150
#: Lines in one line plot before asking for --where.
MAX_LINES = 12
#: x values spanning at least this ratio get a log2 axis.
LOG_X_RATIO = 8
#: y values spanning at least this ratio get a log axis.
LOG_Y_RATIO = 50
_FAILED = "#d9d9d9"
#: One line style per workload in a line plot (colours tell the other parameters apart).
_LINE_STYLES: tuple[dict[str, Any], ...] = (
    {"linestyle": "-", "marker": "o"},
    {"linestyle": "--", "marker": "s"},
    {"linestyle": ":", "marker": "^"},
    {"linestyle": "-.", "marker": "D"},
)


def plot_sweep(db: str | Path, kind: str, output: str | Path | IO[bytes], **options: Any) -> Path:
    """Draw a ``kind`` figure (line, heatmap, pareto) of the results in ``db`` to ``output`` (a
    path, or a binary stream)."""
    from hwsim.sweep.store import read_rows

    if kind not in PLOT_KINDS:
        raise SweepError(f"unknown plot kind '{kind}'; valid: {', '.join(PLOT_KINDS)}")
    rows, parameters, metrics = read_rows(db)
    if not rows:
        raise SweepError(f"{db}: no results yet")
    results = Results(rows, parameters, metrics)
    from hwsim.sweep.pareto import plot_pareto

    drawers: dict[str, Callable[..., Path]] = {
        "line": plot_line,
        "heatmap": plot_heatmap,
        "pareto": plot_pareto,
    }
    drawer = drawers[kind]
    return drawer(results, output, **options)


# ---- shared --------------------------------------------------------------------------------------


def new_figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def save_figure(fig: Figure, path: str | Path | IO[bytes]) -> Path:
    """Write ``fig`` as PNG to a path the user named or to an open stream (a default path the
    CLI opened through the output guard)."""
    from hwsim.png_mark import save_png

    return save_png(fig, path, DPI)


def titles(fig: Figure, title: str, note: str) -> None:
    fig.suptitle(title, fontsize=12, x=0.01, ha="left")
    if note:  # as the figure's x label, so the layout keeps room for it
        fig.supxlabel(note, fontsize=7, color="0.35", x=0.01, ha="left")


def _sweep_names(rows: Sequence[dict[str, Any]]) -> str:
    names = sorted({str(r.get("sweep")) for r in rows if r.get("sweep")})
    return ", ".join(names)


def fixed_note(
    rows: Sequence[dict[str, Any]], where: Sequence[str], failed_drawn: bool = False
) -> str:
    parts = [f"sweep {_sweep_names(rows)}"] if _sweep_names(rows) else []
    if where:
        parts.append("where " + ", ".join(where))
    failed = sum(1 for r in rows if r["status"] != "ok")
    if failed and not failed_drawn:
        parts.append(f"{failed} failed run{'s' if failed > 1 else ''} not drawn")
    return " · ".join(parts)


def _numbers(values: Sequence[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def axis_values(
    ax: Axes, axis: str, values: Sequence[Any], unit: Unit, log_ratio: float = LOG_X_RATIO
) -> None:
    """Ticks at the swept values; a log2 axis when they span ``log_ratio`` or more."""
    distinct = sorted(set(values), key=sort_key)
    if not _numbers(distinct) or not distinct:
        return
    low, high = distinct[0], distinct[-1]
    if low > 0 and high / low >= log_ratio:
        getattr(ax, f"set_{axis}scale")("log", base=2)
    if len(distinct) <= 12:
        getattr(ax, f"set_{axis}ticks")(distinct, [unit(v) for v in distinct])
        getattr(ax, f"{axis}axis").set_minor_locator(_null_locator())


def _null_locator() -> Any:
    from matplotlib.ticker import NullLocator

    return NullLocator()


def palette(n: int) -> list[tuple[float, ...]]:
    from matplotlib import colormaps

    palette = colormaps["tab10"]
    return [palette(i % 10) for i in range(n)]


# ---- metric against a parameter ------------------------------------------------------------------


def plot_line(
    results: Results,
    path: str | Path | IO[bytes],
    *,
    x: str,
    metric: str,
    workloads: Sequence[str] = (),
    where: Sequence[str] = (),
) -> Path:
    """``metric`` against parameter ``x``: a line per workload (and per value of any other
    parameter that varies; narrow those with ``where``)."""
    results.check_column(x, "--x")
    results.check_column(metric, "--metric")
    rows = select(results, workloads, where)
    ok = [r for r in results.with_numbers(rows, metric, "--metric") if r.get(x) is not None]
    others = results.varying(rows, given=["workload", x])
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in ok:
        groups[(row["workload"], *(row.get(p) for p in others))].append(row)
    if len(groups) > MAX_LINES:
        raise SweepError(
            f"{len(groups)} lines: narrow with --where or --workload (other varying parameters: "
            f"{', '.join(others)})"
        )
    if not groups:
        raise SweepError(f"no finished runs have a value for '{metric}'")
    x_unit = unit_for(x, [r.get(x) for r in ok])
    y_unit = unit_for(metric, [results.value(r, metric) for r in ok])
    fig = new_figure(9.0 if len(groups) > 4 else 7.5, 4.6)
    ax = fig.add_subplot()
    ys = _draw_lines(
        ax, groups, others, lambda r: r.get(x), lambda r: results.value(r, metric) / y_unit.scale
    )
    axis_values(ax, "x", [r.get(x) for r in ok], x_unit)
    positive = [v for v in ys if v > 0]
    if positive and max(positive) / min(positive) >= LOG_Y_RATIO:
        ax.set_yscale("log")
    ax.set_xlabel(x_unit.label)
    ax.set_ylabel(y_unit.label)
    ax.grid(color="0.88", linewidth=0.6)
    ax.set_axisbelow(True)
    if len(groups) <= 4:
        ax.legend(fontsize=8, frameon=False, loc="best")
    else:
        ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    titles(fig, f"{y_unit.label} vs {x}", fixed_note(rows, where))
    return save_figure(fig, path)


def _draw_lines(
    ax: Axes,
    groups: dict[tuple[Any, ...], list[dict[str, Any]]],
    others: list[str],
    x_of: Callable[[dict[str, Any]], Any],
    y_of: Callable[[dict[str, Any]], Any],
) -> list[float]:
    """One line per group (workload, values of ``others``): a colour per ``others`` values, a
    line style per workload. Returns every y drawn."""
    names = sorted({key[0] for key in groups})
    variants = sorted({key[1:] for key in groups}, key=lambda k: tuple(map(sort_key, k)))
    colours = palette(len(variants) if others else len(names))
    drawn: list[float] = []
    for key, members in sorted(groups.items(), key=lambda kv: tuple(map(sort_key, kv[0]))):
        members.sort(key=lambda r: sort_key(x_of(r)))
        ys = [float(y_of(r)) for r in members]
        drawn += ys
        style = _LINE_STYLES[names.index(key[0]) % len(_LINE_STYLES)]
        colour = colours[variants.index(key[1:])] if others else colours[names.index(key[0])]
        values = [
            f"{short_name(p, others)}={_shown(p, v)}" for p, v in zip(others, key[1:], strict=True)
        ]
        label = ", ".join([key[0]] * (len(names) > 1 or not others) + values)
        ax.plot(
            [x_of(r) for r in members],
            ys,
            color=colour,
            label=label,
            linewidth=1.6,
            markersize=4.5,
            **style,
        )
    return drawn


def _shown(column: str, value: Any) -> str:
    return unit_for(column, [value])(value) if isinstance(value, (int, float)) else str(value)


# ---- heatmap -------------------------------------------------------------------------------------


def plot_heatmap(
    results: Results,
    path: str | Path | IO[bytes],
    *,
    x: str,
    y: str,
    metric: str,
    workloads: Sequence[str] = (),
    where: Sequence[str] = (),
) -> Path:
    """``metric`` over parameters ``x`` × ``y``, a panel per workload; failed cells grey."""
    from matplotlib import colormaps

    for column, what in ((x, "--x"), (y, "--y"), (metric, "--metric")):
        results.check_column(column, what)
    rows = select(results, workloads, where)
    others = results.varying(rows, given=["workload", x, y])
    if others:
        raise SweepError(
            f"heatmap cells would mix values of {', '.join(others)}; pick one with --where "
            f"(e.g. --where {others[0]}={rows[0].get(others[0])})"
        )
    names = sorted({r["workload"] for r in rows})
    xs = sorted({r.get(x) for r in rows}, key=sort_key)
    ys = sorted({r.get(y) for r in rows}, key=sort_key)
    values = [results.value(r, metric) for r in results.with_numbers(rows, metric, "--metric")]
    unit = unit_for(metric, values)
    x_unit, y_unit = unit_for(x, xs), unit_for(y, ys)
    columns = min(len(names), 3)
    panel_rows = math.ceil(len(names) / columns)
    fig = new_figure(
        max(5.0, 0.9 * len(xs) + 2.6) * columns, (max(3.2, 0.55 * len(ys) + 1.8)) * panel_rows
    )
    higher = parse_objective(metric)[1]
    cmap = colormaps["viridis" if higher else "viridis_r"]
    for i, name in enumerate(names):
        ax = fig.add_subplot(panel_rows, columns, i + 1)
        cells = {(r.get(x), r.get(y)): r for r in rows if r["workload"] == name}
        _heat_panel(fig, ax, cells, xs, ys, results, metric, unit, cmap)
        ax.set_xticks(range(len(xs)), [x_unit(v) for v in xs], fontsize=8)
        ax.set_yticks(range(len(ys)), [y_unit(v) for v in ys], fontsize=8)
        ax.set_xlabel(x_unit.label)
        ax.set_ylabel(y_unit.label)
        ax.set_title(name, fontsize=10)
    better = "higher" if higher else "lower"
    title = f"{unit.label} over {short_name(x, [x, y])} × {short_name(y, [x, y])}"
    titles(
        fig, title, fixed_note(rows, where, failed_drawn=True) + f" · brighter = better ({better})"
    )
    return save_figure(fig, path)


def _heat_panel(
    fig: Figure,
    ax: Axes,
    cells: dict[tuple[Any, Any], dict[str, Any]],
    xs: list[Any],
    ys: list[Any],
    results: Results,
    metric: str,
    unit: Unit,
    cmap: Any,
) -> None:
    import numpy as np
    from matplotlib.colors import Normalize
    from matplotlib.patches import Rectangle

    grid = np.full((len(ys), len(xs)), np.nan)
    for (cx, cy), row in cells.items():
        value = results.value(row, metric)
        if row["status"] == "ok" and isinstance(value, (int, float)):
            grid[ys.index(cy), xs.index(cx)] = value / unit.scale
    finite = grid[np.isfinite(grid)]
    norm = Normalize(finite.min(), finite.max()) if finite.size else Normalize(0, 1)
    image = ax.imshow(grid, cmap=cmap, norm=norm, origin="lower", aspect="auto")
    for (cx, cy), row in cells.items():
        j, i = xs.index(cx), ys.index(cy)
        if row["status"] != "ok":
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, color=_FAILED, hatch="//", ec="0.6"))
            ax.text(j, i, "failed", ha="center", va="center", fontsize=7, color="0.25")
            continue
        value = grid[i, j]
        if math.isnan(value):
            continue
        r, g, b, _ = cmap(norm(value))
        dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
        ax.text(
            j,
            i,
            f"{value:.3g}",
            ha="center",
            va="center",
            fontsize=8,
            color="white" if dark else "black",
        )
    bar = fig.colorbar(image, ax=ax, shrink=0.9)
    bar.set_label(unit.label, fontsize=8)
