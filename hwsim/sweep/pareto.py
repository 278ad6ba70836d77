"""The Pareto front of two columns of sweep results, the non-dominated configs labelled with their
swept values (a figure of ``hwsim sweep plot --kind pareto``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from hwsim.sweep.errors import SweepError
from hwsim.sweep.plots import (
    LOG_Y_RATIO,
    axis_values,
    fixed_note,
    new_figure,
    palette,
    save_figure,
    titles,
)
from hwsim.sweep.table import Results, Unit, parse_objective, point_label, select, unit_for

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: Pareto points labelled per panel (the rest are marked but unlabelled).
MAX_LABELS = 16


def pareto_front(points: Sequence[tuple[float, float]], maximise: tuple[bool, bool]) -> list[int]:
    """Indices of the non-dominated points (no other is at least as good in both and better in
    one); ties on both coordinates are all kept. O(n log n)."""
    sign = (-1.0 if maximise[0] else 1.0, -1.0 if maximise[1] else 1.0)
    order = sorted(
        range(len(points)), key=lambda i: (sign[0] * points[i][0], sign[1] * points[i][1])
    )
    front: list[int] = []
    best_y = math.inf
    last: tuple[float, float] | None = None
    for i in order:
        px, py = sign[0] * points[i][0], sign[1] * points[i][1]
        if py < best_y or (last is not None and (px, py) == last):
            front.append(i)
            best_y, last = py, (px, py)
    return front


def plot_pareto(
    results: Results,
    path: str | Path | IO[bytes],
    *,
    x: str,
    y: str,
    workloads: Sequence[str] = (),
    where: Sequence[str] = (),
) -> Path:
    """Every finished config as a point of columns ``x``, ``y`` (``name:min``/``name:max`` set
    the direction; default: maximise utilisation %, minimise the rest), the non-dominated ones
    joined and labelled with their swept values; a panel per workload."""
    (x_col, x_max), (y_col, y_max) = parse_objective(x), parse_objective(y)
    results.check_column(x_col, "--x")
    results.check_column(y_col, "--y")
    rows = select(results, workloads, where)
    ok = [
        r
        for r in rows
        if r["status"] == "ok"
        and isinstance(results.value(r, x_col), (int, float))
        and isinstance(results.value(r, y_col), (int, float))
    ]
    if not ok:
        raise SweepError(f"no finished runs have both '{x_col}' and '{y_col}'")
    names = sorted({r["workload"] for r in ok})
    varying = results.varying(ok, given=["workload"])
    x_unit = unit_for(x_col, [results.value(r, x_col) for r in ok])
    y_unit = unit_for(y_col, [results.value(r, y_col) for r in ok])
    columns = min(len(names), 2)
    panel_rows = math.ceil(len(names) / columns)
    fig = new_figure(7.2 * columns, 5.2 * panel_rows)
    for i, (name, colour) in enumerate(zip(names, palette(len(names)), strict=True)):
        ax = fig.add_subplot(panel_rows, columns, i + 1)
        mine = [r for r in ok if r["workload"] == name]
        points = [
            (results.value(r, x_col) / x_unit.scale, results.value(r, y_col) / y_unit.scale)
            for r in mine
        ]
        front = pareto_front(points, (x_max, y_max))
        _pareto_panel(ax, points, front, [mine[k] for k in front], colour, varying, results)
        _pareto_axis(ax, "x", x_col, [p[0] for p in points], x_unit, results)
        _pareto_axis(ax, "y", y_col, [p[1] for p in points], y_unit, results)
        ax.set_xlabel(f"{x_unit.label}  ({'higher' if x_max else 'lower'} is better)")
        ax.set_ylabel(f"{y_unit.label}  ({'higher' if y_max else 'lower'} is better)")
        ax.set_title(f"{name}: {len(front)} of {len(mine)} configs on the front", fontsize=10)
        ax.grid(color="0.9", linewidth=0.6)
        ax.set_axisbelow(True)
    title = f"Pareto front: {y_unit.label} vs {x_unit.label}"
    titles(fig, title, fixed_note(rows, where))
    return save_figure(fig, path)


def _pareto_axis(
    ax: Axes, axis: str, column: str, shown: list[float], unit: Unit, results: Results
) -> None:
    """Swept parameters (and products of them) get ticks at their values, log2 if wide;
    metrics a log axis when they span LOG_Y_RATIO or more."""
    if all(part.strip() in results.parameters for part in column.split("*")):
        axis_values(ax, axis, shown, Unit(unit.label))
        return
    positive = [v for v in shown if v > 0]
    if positive and max(positive) / min(positive) >= LOG_Y_RATIO:
        getattr(ax, f"set_{axis}scale")("log")


def _pareto_panel(
    ax: Axes,
    points: list[tuple[float, float]],
    front: list[int],
    front_rows: list[dict[str, Any]],
    colour: tuple[float, ...],
    varying: list[str],
    results: Results,
) -> None:
    on_front = set(front)
    others = [p for k, p in enumerate(points) if k not in on_front]
    if others:
        ax.scatter(
            [p[0] for p in others],
            [p[1] for p in others],
            s=18,
            color="0.72",
            label="dominated",
            zorder=2,
        )
    fx, fy = [points[k][0] for k in front], [points[k][1] for k in front]
    ax.step(fx, fy, where="post", color=colour, linewidth=1.2, alpha=0.7, zorder=3)
    ax.scatter(
        fx,
        fy,
        s=42,
        color=colour,
        edgecolor="black",
        linewidth=0.6,
        zorder=4,
        label="non-dominated",
    )
    step = max(1, math.ceil(len(front) / MAX_LABELS))
    for n, (px, py, row) in enumerate(zip(fx, fy, front_rows, strict=True)):
        if n % step:
            continue
        label = point_label(row, varying, results) or row["config_hash"][:8]
        ax.annotate(
            label,
            (px, py),
            xytext=(8, 6 if n % 2 == 0 else -12),
            textcoords="offset points",
            fontsize=7,
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "0.8", "alpha": 0.85},
            zorder=5,
        )
    ax.legend(fontsize=8, frameon=False, loc="best")
