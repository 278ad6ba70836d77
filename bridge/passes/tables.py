"""The report's compiler tables: each pass's effect (with vs without) and each graph's floor."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from hwsim.bridge.passes.effects import METRICS
from hwsim.units import size_text, time_text

_HEAD = {
    "total_ns": "sim time",
    "hbm_bytes": "HBM traffic",
    "instructions": "instructions",
    "sbuf_peak_bytes": "SBUF peak/partition",
}


def _fmt(metric: str, value: float) -> str:
    if metric == "total_ns":
        return time_text(value)
    if metric in ("hbm_bytes", "sbuf_peak_bytes"):
        return size_text(value)
    return f"{value:,.0f}"


def pass_effect_table(pass_effects: list[dict[str, Any]]) -> Table | None:
    """One row per (graph, pass): each metric with the pass / without it (and the ratio)."""
    if not pass_effects:
        return None
    table = Table(title="graph passes: effect of each (with / without)", title_justify="left")
    for column in ["graph", "pass", *(_HEAD[m] for m in METRICS), "speed-up"]:
        table.add_column(column)
    for graph in pass_effects:
        for row in graph["rows"]:
            on, off = row["with"], row["without"]
            cells = [f"{_fmt(m, on[m])} / {_fmt(m, off[m])}" for m in METRICS]
            speedup = off["total_ns"] / on["total_ns"] if on["total_ns"] else 0.0
            table.add_row(graph["graph"], row["pass"], *cells, f"{speedup:.2f}x")
    return table


def floor_table(runs: list[dict[str, Any]]) -> Table | None:
    """Per run: simulated time, the roofline floor, their ratio and the binding term, and the
    runtime's per-inference overhead outside the program (``bridge.runtime``) with the end-to-end
    time it gives (what a published latency measures)."""
    rows = [r for r in runs if r.get("floor_ns")]
    if not rows:
        return None
    table = Table(
        title="roofline floor (bridge.passes.floor); runtime overhead (bridge.runtime)",
        title_justify="left",
    )
    columns = ("graph", "call", "sim time", "floor", "sim / floor", "binding", "runtime", "e2e")
    for column in columns:
        table.add_column(column)
    for r in rows:
        total = float(r.get("total_ns") or 0.0)
        overhead = r.get("runtime_overhead_ns")
        table.add_row(
            str(r.get("graph")),
            "-" if r.get("call") is None else str(r["call"]),  # eager ops have no call number
            _fmt("total_ns", total),
            _fmt("total_ns", float(r["floor_ns"])),
            f"{float(r.get('over_floor') or 0.0):.1f}x",
            str(r.get("floor_binding")),
            "-" if overhead is None else _fmt("total_ns", float(overhead)),
            "-" if overhead is None else _fmt("total_ns", total + float(overhead)),
        )
    return table
