"""Figures of one run: engine timeline (Gantt), utilisation bars, SBUF/PSUM occupancy, roofline.

Each function takes a ``RunData`` (``hwsim.trace.outputs``: from a Trace in memory or a saved
trace.json) and writes a PNG. matplotlib is imported inside the functions and only through its
object API (``Figure`` + the Agg canvas), so importing hwsim never loads it and plotting never
changes a caller's pyplot backend.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np

from hwsim.trace.array_ops import interval_integral

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from hwsim.trace.outputs import RunData
    from hwsim.trace.summary import FlopStats, RunSummary

#: Above this many slices the timeline switches from bars to a binned heat strip.
DENSE_SLICES = 3000
#: Time bins of the heat strip (about two pixels each at the figure's width and dpi).
HEAT_BINS = 800
#: Colour keys (source tags / opcodes) given their own colour; the rest are "other".
TOP_KEYS = 10
DPI = 150
_OTHER = "other"
_OTHER_COLOUR = (0.62, 0.62, 0.62)
_WAIT_DMA = "#f28e2b"
_WAIT_ENGINE = "#fcc66d"
_BUSY = "#4e79a7"
_CRITICAL = "#7b1f1f"
_IDLE = "#e6e6e6"


def plot(kind: str, run: RunData, path: str | Path | IO[bytes]) -> Path:
    """Write the ``kind`` figure (timeline, util, memory, roofline) of ``run`` as PNG to ``path``
    (a file path, written through the output guard, or a binary stream)."""
    try:
        fn = PLOTS[kind]
    except KeyError:
        raise ValueError(f"unknown plot kind '{kind}'; valid: {', '.join(PLOTS)}") from None
    return fn(run, path)


# ---- shared --------------------------------------------------------------------------------------


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _save(fig: Figure, path: str | Path | IO[bytes]) -> Path:
    from hwsim.png_mark import save_png

    return save_png(fig, path, DPI)


def _title(run: RunData, what: str) -> str:
    s = run.summary
    workload = s.workload or Path(run.source).stem or "run"
    config = s.config_name or "?"
    return f"{what} — {workload} on {config}"


def _headings(
    fig: Figure, ax: Axes, run: RunData, what: str, note: str, wrap: bool = False
) -> None:
    """Every plot's two headings: the figure's (what, of which run on which config) and, above
    the axes, a grey note on how to read them."""
    ax.set_title(note, fontsize=8, loc="left", color="0.3", wrap=wrap)
    fig.suptitle(_title(run, what), fontsize=12, x=0.01, ha="left")


def time_unit(total_ns: float) -> tuple[str, float]:
    """A readable unit for a span: (name, ns per unit)."""
    if total_ns < 2_000:
        return "ns", 1.0
    if total_ns < 2_000_000:
        return "µs", 1e3
    return "ms", 1e6


def _legend_outside(ax: Axes) -> None:
    """The legend right of the axes, where no line (a peak or capacity) can cross it."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7, frameon=False)


def _short(text: str, width: int = 40) -> str:
    """``text`` in at most ``width`` characters, cut in the middle so that both the kernel's name
    and the end (a source tag's ``file.py:LINE``) stay readable."""
    if len(text) <= width:
        return text
    tail = min(len(text) - len(text.rsplit("/", 1)[-1].rsplit(":", 2)[0]), width // 2)
    tail = max(tail, width // 3)
    return text[: width - tail - 1] + "…" + text[-tail:]


def _total_ns(run: RunData) -> float:
    total = float(run.summary.total_ns or 0.0)
    if len(run.slice_end_ns):
        total = max(total, float(run.slice_end_ns.max()))
    return max(total, 1e-9)


# ---- timeline ------------------------------------------------------------------------------------


def plot_timeline(run: RunData, path: str | Path | IO[bytes]) -> Path:
    """Gantt chart, one row per engine and per DMA queue, coloured by source tag (or opcode).

    A DMA queue's slices are its transfers (each covering its pieces on the queue's DMA engines).
    Up to DENSE_SLICES slices are drawn as bars; beyond that each row becomes a heat strip of
    HEAT_BINS time bins whose hue is the bin's dominant source and whose depth is the fraction
    of the bin the engine (or queue) was busy. The critical path's links are a row on top.
    """
    from matplotlib.patches import Patch

    total = _total_ns(run)
    unit, scale = time_unit(total)
    rows = run.rows or ["(no tracks)"]
    colour_of, legend_keys = _key_colours(run)
    fig = _figure(12, 1.6 + 0.3 * len(rows))
    ax = fig.add_subplot()
    dense = len(run.slice_row) > DENSE_SLICES
    if dense:
        _heat_strip(ax, fig, run, colour_of, total, scale)
    else:
        _bars(ax, run, colour_of, scale)
    top = _critical_row(ax, run, total, scale)
    ax.set_ylim(len(rows) - 0.5, top - 0.5)
    ticks = ([-1] if top < 0 else []) + list(range(len(rows)))
    ax.set_yticks(ticks, (["critical path"] if top < 0 else []) + rows, fontsize=8)
    ax.set_xlim(0, total / scale)
    ax.set_xlabel(f"time ({unit})")
    ax.grid(axis="x", color="0.88", linewidth=0.6)
    ax.set_axisbelow(True)
    for r, label in enumerate(rows[1:], start=1):
        if _is_dma_row(label) and not _is_dma_row(rows[r - 1]):
            ax.axhline(r - 0.5, color="0.5", linewidth=0.8)
    mode = f"binned: {HEAT_BINS} bins, shade = busy fraction" if dense else "one bar per slice"
    verdict = run.summary.bottleneck
    _headings(
        fig,
        ax,
        run,
        "Engine timeline",
        f"{len(run.slice_row):,} slices ({mode}) · bottleneck: {verdict}",
    )
    handles = [Patch(color=colour_of[k][:3], label=_short(k)) for k in legend_keys]  # type: ignore[arg-type]
    if top < 0:
        handles.append(Patch(color=_CRITICAL, label="critical path (by resource)"))
    if handles:
        ax.legend(
            handles=handles,
            title="source (tag or op)",
            loc="upper left",
            bbox_to_anchor=(1.005, 1.0),
            fontsize=7,
            title_fontsize=8,
            frameon=False,
        )
    return _save(fig, path)


def _critical_row(ax: Axes, run: RunData, total: float, scale: float) -> int:
    """Draw the critical path's links (each one's share of the run) on a row above the engines,
    named by resource where wide enough; the index of the top row (-1, or 0 without a path)."""
    links = [(name, t0, t1) for core, name, t0, t1 in run.critical if core == min(run.critical)[0]]
    if not links:
        return 0
    spans = [(t0 / scale, (t1 - t0) / scale) for _, t0, t1 in links]
    ax.broken_barh(spans, (-1.38, 0.76), facecolors=_CRITICAL, edgecolor="white", linewidth=0.4)
    for (name, t0, t1), (x, width) in zip(links, spans, strict=True):
        if (t1 - t0) > total * 0.04:
            ax.text(x + width / 2, -1, name, ha="center", va="center", fontsize=6, color="white")
    ax.axhline(-0.5, color="0.5", linewidth=0.8)
    return -1


def _is_dma_row(label: str) -> bool:
    return "DMA q" in label


def _key_colours(run: RunData) -> tuple[dict[str, tuple[float, ...]], list[str]]:
    """Colours of the TOP_KEYS keys by busy time (the rest share grey), and the legend order."""
    from matplotlib import colormaps

    durations = run.slice_end_ns - run.slice_start_ns
    busy = np.bincount(run.slice_key, weights=durations, minlength=len(run.keys))
    ranked = [
        run.keys[i]
        for i in np.argsort(-busy, kind="stable")
        if busy[i] > 0 or len(run.keys) <= TOP_KEYS
    ]
    palette = colormaps["tab10"]
    colours: dict[str, tuple[float, ...]] = {}
    for rank, key in enumerate(ranked):
        colours[key] = tuple(palette(rank)[:3]) if rank < TOP_KEYS else _OTHER_COLOUR
    for key in run.keys:
        colours.setdefault(key, _OTHER_COLOUR)
    legend = ranked[:TOP_KEYS] + ([_OTHER] if len(ranked) > TOP_KEYS else [])
    colours[_OTHER] = _OTHER_COLOUR
    return colours, legend


def _bars(ax: Axes, run: RunData, colour_of: dict[str, tuple[float, ...]], scale: float) -> None:
    starts = run.slice_start_ns / scale
    widths = (run.slice_end_ns - run.slice_start_ns) / scale
    order = np.lexsort((run.slice_key, run.slice_row))
    for row in np.unique(run.slice_row):
        in_row = order[run.slice_row[order] == row]
        for key in np.unique(run.slice_key[in_row]):
            chosen = in_row[run.slice_key[in_row] == key]
            spans = list(zip(starts[chosen].tolist(), widths[chosen].tolist(), strict=True))
            ax.broken_barh(
                spans,
                (row - 0.38, 0.76),
                facecolors=colour_of[run.keys[key]],
                edgecolor="white",
                linewidth=0.4,
            )


def _heat_strip(
    ax: Axes,
    fig: Figure,
    run: RunData,
    colour_of: dict[str, tuple[float, ...]],
    total: float,
    scale: float,
) -> None:
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    rows = len(run.rows)
    edges = np.linspace(0.0, total, HEAT_BINS + 1)
    width = edges[1] - edges[0]
    # busy time per (row, key, bin), from the cumulative busy function at the bin edges
    keys = np.unique(run.slice_key)
    busy = np.zeros((rows, len(keys), HEAT_BINS))
    key_index = {k: i for i, k in enumerate(keys.tolist())}
    order = np.lexsort((run.slice_key, run.slice_row))
    row_sorted, key_sorted = run.slice_row[order], run.slice_key[order]
    cuts = np.flatnonzero((np.diff(row_sorted) != 0) | (np.diff(key_sorted) != 0)) + 1
    for group in np.split(order, cuts):
        if not len(group):
            continue
        r, k = int(run.slice_row[group[0]]), key_index[int(run.slice_key[group[0]])]
        s, e = run.slice_start_ns[group], run.slice_end_ns[group]
        busy[r, k] = np.diff(interval_integral(s, e, np.ones(len(s)), edges))
    # a DMA queue's transfers can overlap: its shade is the part of the bin it had one running
    util = np.clip(busy.sum(axis=1) / width, 0.0, 1.0)
    dominant = keys[np.argmax(busy, axis=1)]
    palette = np.array([colour_of[run.keys[k]][:3] for k in range(len(run.keys))])
    rgb = palette[dominant]
    image = 1.0 - util[..., None] * (1.0 - rgb)
    ax.imshow(
        image,
        aspect="auto",
        interpolation="nearest",
        extent=(0, total / scale, rows - 0.5, -0.5),
        zorder=2,  # above the time grid
    )
    bar = fig.colorbar(
        ScalarMappable(Normalize(0, 100), colormaps["Greys"]),
        ax=ax,
        location="bottom",
        shrink=0.25,
        aspect=30,
        pad=0.02,
    )
    bar.set_label("busy % of each time bin (shade)", fontsize=7)
    bar.ax.tick_params(labelsize=7)


# ---- utilisation ---------------------------------------------------------------------------------


def plot_utilisation(run: RunData, path: str | Path | IO[bytes]) -> Path:
    """Stacked bars per engine: busy, waiting on DMA semaphores, waiting on engines, idle."""
    from matplotlib.patches import Patch

    s = run.summary
    labels, busy, wait_dma, wait_other = [], [], [], []
    for name, e in s.engines.items():
        labels.append(e.label or name)
        busy.append(e.busy_pct)
        by = e.wait_pct_by_source
        wait_dma.append(by.get("dma", 0.0))
        wait_other.append(max(0.0, e.wait_pct - by.get("dma", 0.0)))
    if s.engines:  # a summary with engines has its DMA section
        labels.append("DMA (any engine)")
        busy.append(s.dma_active_pct)
        wait_dma.append(0.0)
        wait_other.append(0.0)
        per_engine = list(s.dma.engine_busy_pct.values())
        if per_engine:
            engines_total = s.peaks.dma_engines or len(per_engine)
            labels.append(f"DMA engines (mean of {engines_total})")
            busy.append(sum(per_engine) / engines_total)
            wait_dma.append(0.0)
            wait_other.append(0.0)
    b, wd, wo = np.array(busy), np.array(wait_dma), np.array(wait_other)
    # waits can overlap nothing else on the engine, but cap the stack at 100% for display
    wo = np.minimum(wo, np.maximum(0.0, 100 - b - wd))
    wd = np.minimum(wd, np.maximum(0.0, 100 - b))
    idle = np.maximum(0.0, 100 - b - wd - wo)
    y = np.arange(len(labels))
    fig = _figure(10, 1.8 + 0.42 * len(labels))
    ax = fig.add_subplot()
    left = np.zeros(len(labels))
    for values, colour in ((b, _BUSY), (wd, _WAIT_DMA), (wo, _WAIT_ENGINE), (idle, _IDLE)):
        ax.barh(y, values, left=left, color=colour, height=0.66, edgecolor="white", linewidth=0.5)
        left += values
    for i, (bv, wv) in enumerate(zip(b, wd + wo, strict=True)):
        ax.text(
            min(bv, 100) + 0.8 if bv < 12 else bv / 2,
            i,
            f"{bv:.1f}%",
            va="center",
            ha="left" if bv < 12 else "center",
            fontsize=8,
            color="black" if bv < 12 else "white",
        )
        if wv >= 6:
            ax.text(bv + wv / 2, i, f"wait {wv:.0f}%", va="center", ha="center", fontsize=7)
    ax.set_yticks(y, labels, fontsize=9)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlim(0, 100)
    total = _total_ns(run)
    unit, scale = time_unit(total)
    ax.set_xlabel(f"% of run time ({total / scale:,.2f} {unit}{_cores_note(s)})")
    ax.grid(axis="x", color="0.88", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.legend(
        handles=[
            Patch(color=_BUSY, label="busy"),
            Patch(color=_WAIT_DMA, label="waiting on DMA queues"),
            Patch(color=_WAIT_ENGINE, label="waiting on engines / other"),
            Patch(color=_IDLE, label="idle"),
        ],
        loc="upper left",
        bbox_to_anchor=(1.005, 1.0),
        fontsize=8,
        frameon=False,
    )
    _headings(
        fig,
        ax,
        run,
        "Engine utilisation",
        f"MFU {s.mfu_pct:.1f}% · HFU {s.hfu_pct:.1f}% · MBU {s.mbu_pct:.1f}% · {s.bottleneck}",
        wrap=True,
    )
    return _save(fig, path)


def _cores_note(summary: RunSummary) -> str:
    cores = summary.cores
    return f", mean of {cores} cores" if cores and cores > 1 else ""


# ---- memory --------------------------------------------------------------------------------------


def plot_memory(run: RunData, path: str | Path | IO[bytes]) -> Path:
    """SBUF and PSUM occupancy over time (with capacity), and HBM read/write bandwidth."""
    total = _total_ns(run)
    unit, scale = time_unit(total)
    summary = run.summary
    peaks = summary.peaks
    fig = _figure(11, 7.2)
    axes = fig.subplots(3, 1, sharex=True)
    panels = (
        ("SBUF occupancy", "SBUF", "MiB", 2**20, summary.memory_stats("sbuf").capacity_bytes),
        ("PSUM occupancy", "PSUM", "KiB", 2**10, summary.memory_stats("psum").capacity_bytes),
    )
    for ax, (counter, label, size_unit, size, capacity) in zip(axes, panels, strict=False):
        series = run.counters.get(counter, {})
        if not series:
            ax.text(
                0.5,
                0.5,
                f"no {label} allocations recorded in this trace",
                ha="center",
                va="center",
                transform=ax.transAxes,
                color="0.4",
            )
        for core, (times, values) in sorted(series.items()):
            x = np.append(times, total) / scale
            y = np.append(values, values[-1] if len(values) else 0) / size
            name = f"NC{core}" if len(series) > 1 else label
            ax.step(x, y, where="post", linewidth=1.2, label=name)
            ax.fill_between(x, y, step="post", alpha=0.25)
            peak = float(values.max()) if len(values) else 0.0
            at = float(times[int(np.argmax(values))]) / scale if len(values) else 0.0
            ax.annotate(
                f"peak {peak / size:,.2f} {size_unit}",
                (at, peak / size),
                xytext=(4, 4),
                textcoords="offset points",
                fontsize=7,
            )
        top = max((float(v.max()) for _, v in series.values() if len(v)), default=0.0)
        if capacity and top >= capacity / 4:
            ax.axhline(
                capacity / size,
                color="#e15759",
                linestyle="--",
                linewidth=1,
                label=f"capacity {capacity / size:,.0f} {size_unit}",
            )
            ax.set_ylim(0, capacity / size * 1.3)  # head room for the legend
        elif top > 0:
            # far below capacity: scale to the data so the shape is visible, and say so
            note = f"capacity {capacity / size:,.0f} {size_unit} (off scale)" if capacity else None
            ax.plot([], [], " ", label=note)
            ax.set_ylim(0, top / size * 1.3)
        ax.set_ylabel(f"{label} ({size_unit})")
        ax.grid(color="0.9", linewidth=0.6)
        if ax.get_legend_handles_labels()[1]:  # an empty memory (no PSUM use) has no labels
            _legend_outside(ax)
    ax = axes[2]
    plotted = False
    for counter, colour in (("HBM read", "#4e79a7"), ("HBM write", "#f28e2b")):
        for core, (times, values) in sorted(run.counters.get(counter, {}).items()):
            x = np.append(times, total) / scale
            y = np.append(values, 0.0)
            suffix = f" NC{core}" if len(run.counters[counter]) > 1 else ""
            ax.step(x, y, where="post", color=colour, linewidth=0.9, label=f"{counter}{suffix}")
            plotted = True
    roof = peaks.hbm_bytes_per_s
    highest = max(
        (
            float(v.max())
            for c in ("HBM read", "HBM write")
            for _, v in run.counters.get(c, {}).values()
            if len(v)
        ),
        default=0.0,
    )
    if roof:
        per_core = roof / 1e9 / max(1, int(peaks.cores))
        ax.axhline(
            per_core,
            color="#e15759",
            linestyle="--",
            linewidth=1,
            label=f"HBM bandwidth per core {per_core:,.0f} GB/s",
        )
        highest = max(highest, per_core)
    ax.set_ylim(0, max(highest, 1.0) * 1.3)  # head room for the legend
    if not plotted:
        ax.text(
            0.5,
            0.5,
            "no HBM traffic",
            ha="center",
            va="center",
            transform=ax.transAxes,
            color="0.4",
        )
    ax.set_ylabel("HBM (GB/s)")
    ax.grid(color="0.9", linewidth=0.6)
    _legend_outside(ax)
    ax.set_xlim(0, total / scale)
    ax.set_xlabel(f"time ({unit})")
    s = run.summary
    _headings(
        fig,
        axes[0],
        run,
        "Memory",
        f"SBUF peak {s.memory_stats('sbuf').peak_pct:.1f}% · PSUM peak "
        f"{s.memory_stats('psum').peak_pct:.1f}% · MBU {s.mbu_pct:.1f}% "
        "(buffer live from first to last use; HBM binned)",
    )
    return _save(fig, path)


# ---- roofline ------------------------------------------------------------------------------------


def plot_roofline(run: RunData, path: str | Path | IO[bytes]) -> Path:
    """FLOP per HBM byte against FLOP/s, under the compute peak and the HBM and DMA roofs."""
    s = run.summary
    peaks = s.peaks
    flops = s.flops
    peak = float(peaks.flops_per_s or 0.0)
    hbm_bw = float(peaks.hbm_bytes_per_s or 0.0)
    dma_bw = float(peaks.dma_bytes_per_s or 0.0)
    total_s = float(s.total_ns) / 1e9
    points = _roofline_points(s, flops, total_s)
    fig = _figure(9, 6)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ridges = [peak / bw for bw in (hbm_bw, dma_bw) if bw and peak]
    xs = [x for _, x, _, _ in points if np.isfinite(x) and x > 0] + ridges
    lo = min(xs) / 8 if xs else 0.1
    hi = max(xs) * 8 if xs else 1e4
    grid = np.logspace(np.log10(lo), np.log10(hi), 200)
    if peak:
        for bw, label, style in ((hbm_bw, "HBM", "-"), (dma_bw, "DMA engines", "--")):
            if bw:
                roof = np.minimum(peak, grid * bw) / 1e12
                ax.plot(
                    grid,
                    roof,
                    style,
                    color="0.2" if label == "HBM" else "0.55",
                    linewidth=1.4,
                    label=f"{label} roof {bw / 1e9:,.0f} GB/s (ridge {peak / bw:,.0f} FLOP/B)",
                )
        ax.axhline(
            peak / 1e12,
            color="#e15759",
            linewidth=1,
            linestyle=":",
            label=f"TensorE peak {peak / 1e12:,.1f} TFLOP/s ({peaks.dtype})",
        )
    colour_of, _ = _key_colours(run)
    legend = {label for label, *_ in points[:TOP_KEYS]}
    markers = {"run": ("o", 110, "black"), "model": ("*", 170, "#b07aa1"), "tag": ("s", 40, None)}
    for label, x, y, kind in points:
        if not (np.isfinite(x) and x > 0 and y > 0):
            continue
        marker, size, colour = markers[kind]
        if kind != "tag":
            ax.annotate(
                f"{y / 1e12:,.1f} TFLOP/s at {x:,.0f} FLOP/B",
                (x, y / 1e12),
                xytext=(9, -3),
                textcoords="offset points",
                fontsize=7,
            )
        ax.scatter(
            [x],
            [y / 1e12],
            s=size,
            marker=marker,
            zorder=5,
            label=_short(label, 40) if kind != "tag" or label in legend else "_nolegend_",
            color=colour or colour_of.get(label, _OTHER_COLOUR),
            edgecolor="black",
            linewidth=0.5,
            alpha=0.9,
        )
    no_traffic = [label for label, x, y, _ in points if y > 0 and not np.isfinite(x)]
    if no_traffic:
        ax.text(
            0.99,
            0.02,
            "no HBM traffic (off the chart): " + ", ".join(no_traffic[:3]),
            transform=ax.transAxes,
            ha="right",
            fontsize=7,
            color="0.4",
        )
    ax.set_xlim(lo, hi)
    top = max([peak] + [y for *_, y, _ in points] + [1.0]) / 1e12
    floor = min([y for *_, y, _ in points if y > 0] + [lo * min(hbm_bw, dma_bw or hbm_bw)]) / 1e12
    ax.set_ylim(max(floor / 3, top / 1e6), top * 2.5)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of HBM traffic)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.grid(which="both", color="0.9", linewidth=0.5)
    ax.legend(loc="lower right", fontsize=7, frameon=True, framealpha=0.9)
    _headings(
        fig,
        ax,
        run,
        "Roofline",
        f"MFU {s.mfu_pct:.1f}% · HFU {s.hfu_pct:.1f}% · MBU {s.mbu_pct:.1f}%{_cores_note(s)}",
    )
    return _save(fig, path)


def _roofline_points(
    summary: RunSummary, flops: FlopStats, total_s: float
) -> list[tuple[str, float, float, str]]:
    """(label, FLOP/byte, FLOP/s, kind) of the whole run, the model, and the top source tags."""
    hbm = float(summary.hbm_bytes or 0)
    points = []
    tensor = float(flops.tensor_flops or 0)
    model = float(flops.model_flops or 0)
    if total_s > 0 and tensor > 0:
        points.append(
            ("run (TensorE FLOPs)", tensor / hbm if hbm else np.inf, tensor / total_s, "run")
        )
    if total_s > 0 and model > 0 and model != tensor:
        points.append(
            ("run (model FLOPs)", model / hbm if hbm else np.inf, model / total_s, "model")
        )
    for tag in summary.tags:  # one point per op (the summary lists the busiest tags)
        span_s = (tag.end_ns - tag.start_ns) / 1e9
        if tag.flops > 0 and tag.hbm_bytes > 0 and span_s > 0:
            points.append((tag.tag, tag.flops / tag.hbm_bytes, tag.flops / span_s, "tag"))
    return points


PLOTS: dict[str, Callable[[RunData, str | Path | IO[bytes]], Path]] = {
    "timeline": plot_timeline,
    "util": plot_utilisation,
    "memory": plot_memory,
    "roofline": plot_roofline,
}
