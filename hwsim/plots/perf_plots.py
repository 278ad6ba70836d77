"""Figures for performance work on one run: time by op (or tag) as bars, and the DMA queues' depth
and bytes in flight over time (``run_plots`` draws the timeline, utilisation, memory, roofline).
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np

from hwsim.plots.run_plots import (
    TOP_KEYS,
    _figure,
    _headings,
    _legend_outside,
    _save,
    _short,
    _total_ns,
    time_unit,
)

if TYPE_CHECKING:
    from hwsim.trace.outputs import RunData

#: Bars in the time-by-op figure (the rest are summed into one "other" bar).
TOP_OPS = 20


def op_times(run: RunData) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(op or tag, engine busy ns, DMA busy ns) per colour key, busiest first: the time the
    engines spent on its instructions and the time its DMA transfers were in flight."""
    is_dma = np.array(["DMA q" in row for row in run.rows], bool)
    durations = run.slice_end_ns - run.slice_start_ns
    on_dma = is_dma[run.slice_row] if len(run.slice_row) else np.zeros(0, bool)
    n = len(run.keys)
    engine = np.bincount(run.slice_key[~on_dma], durations[~on_dma], n)
    dma = np.bincount(run.slice_key[on_dma], durations[on_dma], n)
    order = [int(k) for k in np.argsort(-(engine + dma), kind="stable") if engine[k] + dma[k] > 0]
    return [run.keys[k] for k in order], engine[order], dma[order]


def plot_ops(run: RunData, path: str | Path | IO[bytes]) -> Path:
    """Horizontal bars: per op (a bridge run's ATen op) or source tag, engine busy time and DMA
    transfer time, busiest on top."""
    names, engine, dma = op_times(run)
    if len(names) > TOP_OPS:
        names = [*names[: TOP_OPS - 1], f"other ({len(names) - TOP_OPS + 1})"]
        engine = np.append(engine[: TOP_OPS - 1], engine[TOP_OPS - 1 :].sum())
        dma = np.append(dma[: TOP_OPS - 1], dma[TOP_OPS - 1 :].sum())
    unit, scale = time_unit(float(max(engine.max(initial=0), dma.max(initial=0), 1.0)))
    fig = _figure(10, 1.4 + 0.32 * max(len(names), 1))
    ax = fig.add_subplot()
    y = np.arange(len(names))
    ax.barh(y - 0.2, engine / scale, height=0.4, color="#4e79a7", label="engine busy")
    ax.barh(y + 0.2, dma / scale, height=0.4, color="#f28e2b", label="DMA transfers in flight")
    ax.set_yticks(y, [_short(n, 48) for n in names], fontsize=8)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xlabel(f"time ({unit}, summed over engines / queues)")
    ax.grid(axis="x", color="0.9", linewidth=0.6)
    ax.set_axisbelow(True)
    if not names:
        ax.text(0.5, 0.5, "no work recorded", ha="center", va="center", transform=ax.transAxes)
    else:
        _legend_outside(ax)
    total_unit, total_scale = time_unit(_total_ns(run))
    _headings(
        fig,
        ax,
        run,
        "Time by op",
        f"run {_total_ns(run) / total_scale:.3g} {total_unit}; bars add time on every engine and "
        "queue, so they can exceed it",
    )
    return _save(fig, path)


def queue_series(run: RunData, row: int, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(transfers queued or running, bytes in flight) of DMA row ``row`` at each of ``edges``
    (ns): a transfer counts from entering its queue to its last piece's end, and its bytes
    from its first piece's start to its end."""
    mine = run.slice_row == row
    queued, start, end = run.slice_queued_ns[mine], run.slice_start_ns[mine], run.slice_end_ns[mine]
    moved = run.slice_bytes[mine]
    depth = np.searchsorted(np.sort(queued), edges, "right") - np.searchsorted(
        np.sort(end), edges, "right"
    )
    order_s, order_e = np.argsort(start), np.argsort(end)
    began = np.concatenate([[0.0], np.cumsum(moved[order_s])])
    ended = np.concatenate([[0.0], np.cumsum(moved[order_e])])
    in_flight = (
        began[np.searchsorted(start[order_s], edges, "right")]
        - ended[np.searchsorted(end[order_e], edges, "right")]
    )
    return depth, in_flight


def plot_dma(run: RunData, path: str | Path | IO[bytes]) -> Path:
    """Two panels over time, one line per DMA queue: transfers queued or running (queue depth)
    and bytes in flight."""
    total = _total_ns(run)
    unit, scale = time_unit(total)
    fig = _figure(11, 5.6)
    depth_ax, bytes_ax = fig.subplots(2, 1, sharex=True)
    edges = np.linspace(0.0, total, 801)
    dma_rows = [r for r, label in enumerate(run.rows) if "DMA q" in label]
    peak_bytes = max(
        (float(queue_series(run, r, edges)[1].max(initial=0)) for r in dma_rows), default=0.0
    )
    size_unit, size = ("MiB", 2**20) if peak_bytes >= 2**20 else ("KiB", 2**10)
    for rank, row in enumerate(dma_rows[:TOP_KEYS]):
        depth, in_flight = queue_series(run, row, edges)
        colour = f"C{rank}"
        depth_ax.step(edges / scale, depth, where="post", color=colour, label=run.rows[row])
        bytes_ax.step(edges / scale, in_flight / size, where="post", color=colour)
    for ax, what in (
        (depth_ax, "transfers queued or running"),
        (bytes_ax, f"in flight ({size_unit})"),
    ):
        ax.set_ylabel(what, fontsize=8)
        ax.grid(color="0.9", linewidth=0.6)
        ax.set_ylim(bottom=0)
    if dma_rows:
        _legend_outside(depth_ax)
    else:
        depth_ax.text(0.5, 0.5, "no DMA transfers", ha="center", va="center",
                      transform=depth_ax.transAxes)  # fmt: skip
    bytes_ax.set_xlim(0, total / scale)
    bytes_ax.set_xlabel(f"time ({unit})")
    _headings(
        fig,
        depth_ax,
        run,
        "DMA queues",
        "a transfer counts from entering its queue to its last piece's end; its bytes while its "
        "pieces move",
    )
    return _save(fig, path)
