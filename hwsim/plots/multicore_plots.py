"""Figures of many cores: each core's engine utilisation in one run, and how a workload's
simulated time scales with the number of cores.

``core_utilisation(trace)`` is the numbers (per core, per engine and for its DMA: busy time, the
union of its slices, over the run's length); ``plot_core_utilisation`` draws them as grouped
bars; ``plot_scaling`` draws speed-up against cores beside the ideal line. matplotlib is
imported inside the functions, as in ``run_plots``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import IO

import numpy as np

from hwsim.errors import HwsimError
from hwsim.plots.run_plots import _figure, _legend_outside, _save
from hwsim.trace.array_ops import union_ticks
from hwsim.trace.records import Trace

#: The row a core's DMA pieces are counted under.
DMA_ROW = "DMA"


def core_utilisation(trace: Trace) -> dict[int, dict[str, float]]:
    """Per core: each engine's (and ``DMA``'s) busy fraction of the run (0..1)."""
    intervals: dict[int, dict[str, list[tuple[int, int]]]] = {}
    for rec in trace.instructions:
        if rec.end_tick > rec.start_tick:
            rows = intervals.setdefault(rec.core, {})
            rows.setdefault(rec.engine, []).append((rec.start_tick, rec.end_tick))
    for piece in trace.dma:
        rows = intervals.setdefault(piece.core, {})
        rows.setdefault(DMA_ROW, []).append((piece.start_tick, piece.end_tick))
    ends = [r.end_tick for r in trace.instructions] + [p.end_tick for p in trace.dma]
    total = max(ends, default=0)
    if total <= 0:
        raise HwsimError("core_utilisation: the trace has no busy engine")
    result: dict[int, dict[str, float]] = {}
    for core in sorted(intervals):
        result[core] = {}
        for engine, pairs in sorted(intervals[core].items()):
            array = np.asarray(pairs, np.int64)
            result[core][engine] = union_ticks(array[:, 0], array[:, 1]) / total
    return result


def plot_core_utilisation(
    trace: Trace, path: str | Path | IO[bytes], title: str = "per-core utilisation"
) -> Path:
    """Grouped bars: one group per core, one bar per engine (busy % of the run)."""
    table = core_utilisation(trace)
    engines = sorted({engine for rows in table.values() for engine in rows})
    cores = list(table)
    fig = _figure(max(6.0, 0.6 * len(cores) * max(1, len(engines)) / 3), 4.0)
    ax = fig.add_subplot()
    width = 0.8 / len(engines)
    for k, engine in enumerate(engines):
        heights = [100 * table[core].get(engine, 0.0) for core in cores]
        positions = [i + (k - (len(engines) - 1) / 2) * width for i in range(len(cores))]
        ax.bar(positions, heights, width, label=engine)
    ax.set_xticks(range(len(cores)), [f"core {core}" for core in cores])
    ax.set_ylabel("busy (% of the run)")
    ax.set_ylim(0, 100)
    ax.set_title(title)
    _legend_outside(ax)
    return _save(fig, path)


def plot_scaling(
    cores: Sequence[int],
    simulated_ns: Sequence[float],
    path: str | Path | IO[bytes],
    title: str = "scaling",
) -> Path:
    """Speed-up (one core's simulated time over N cores') against N, beside the ideal N."""
    if len(cores) != len(simulated_ns) or not cores or cores[0] != 1:
        raise HwsimError(
            f"plot_scaling: {len(cores)} core counts and {len(simulated_ns)} times; the first "
            "count must be 1 (the speed-up is over one core)"
        )
    if min(simulated_ns) <= 0:
        raise HwsimError("plot_scaling: every simulated time must be positive")
    speedup = [simulated_ns[0] / t for t in simulated_ns]
    fig = _figure(6.0, 4.0)
    ax = fig.add_subplot()
    ax.plot(cores, cores, "--", color="grey", label="ideal (N x)")
    ax.plot(cores, speedup, "o-", label="simulated")
    ax.set_xlabel("cores")
    ax.set_ylabel("speed-up over one core")
    ax.set_xticks(list(cores))
    ax.set_title(title)
    ax.legend(loc="upper left")
    return _save(fig, path)
