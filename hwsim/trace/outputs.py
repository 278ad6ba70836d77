"""A run's output folder (trace.json, summary.json, tables/, four PNGs) and reading one back.

Reading back serves ``hwsim report`` and ``hwsim plot``. Everything the plots need is in
trace.json itself: slices with their source tags (timeline), counter events (memory), and the
summary in the file's header line (utilisation, roofline). So ``hwsim plot trace.json`` works on a
bare trace; summary.json is the same summary for tools that do not parse traces, and ``report``
prefers it because it is small.
"""

from __future__ import annotations

import re
import sys
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hwsim import strict_json
from hwsim.errors import HwsimError
from hwsim.isa.origin import origin_of
from hwsim.trace.analysis import (
    Dependencies,
    cores_of,
    engine_code,
    engine_codes,
    engine_label,
    int_column,
)
from hwsim.trace.dma_spans import dma_spans
from hwsim.trace.facts import facts_memo
from hwsim.trace.occupancy import OperandSpans
from hwsim.trace.records import Trace, engine_order
from hwsim.trace.summary import RunSummary

if TYPE_CHECKING:
    from hwsim.outputs_guard import OutputFolder

TRACE_FILE = "trace.json"
#: The same trace in Perfetto's protobuf format, beside the JSON for runs of over
#: ``hwsim.trace.pftrace.PFTRACE_MIN_EVENTS`` events (with the ``perfetto`` extra installed).
PFTRACE_FILE = "trace.pftrace"
SUMMARY_FILE = "summary.json"
TABLES_DIR = "tables"
PLOT_FILES = {
    "timeline": "timeline.png",
    "util": "util.png",
    "memory": "memory.png",
    "roofline": "roofline.png",
}
#: Trace tracks that are not an engine's: DMA queues, host ops, and the derived critical-path
#: and per-op tracks (``hwsim.trace.extra_tracks``; the timeline draws engines and queues).
DERIVED_TRACKS = frozenset({"dma", "host", "critical", "ops"})
#: Where runs go by default (relative to the working directory); ignored by git.
TRACES_DIR = Path("traces")


@dataclass
class RunData:
    """What ``report`` and the plots read, from a Trace in memory or from a trace.json.

    Slices (instructions and DMA transfers) are columns: ``slice_row`` indexes ``rows`` (timeline
    rows in hardware order: engines, then one row per DMA queue, whose slices are its transfers,
    each covering its pieces on the queue's DMA engines: ``hwsim.trace.dma_spans``), ``slice_key``
    indexes ``keys`` (the source tag, or the opcode for untagged work). Times are ns.
    ``counters[name][core]`` = (times ns, values) for "HBM read"/"HBM write" (GB/s) and
    "SBUF occupancy"/"PSUM occupancy" (bytes).
    """

    summary: RunSummary
    rows: list[str] = field(default_factory=list)
    slice_row: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    slice_start_ns: np.ndarray = field(default_factory=lambda: np.zeros(0))
    slice_end_ns: np.ndarray = field(default_factory=lambda: np.zeros(0))
    slice_key: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: Bytes a DMA transfer moved (0 for an instruction) and when it entered its queue (ns; an
    #: instruction's start): what the DMA figure's bytes in flight and queue depth are drawn from.
    slice_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    slice_queued_ns: np.ndarray = field(default_factory=lambda: np.zeros(0))
    keys: list[str] = field(default_factory=list)
    #: The critical path, earliest link first: (core, resource label, start ns, end ns) of each
    #: link's share of the run (the trace's "Critical path" track).
    critical: list[tuple[int, str, float, float]] = field(default_factory=list)
    counters: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)
    source: str = ""


# ---- writing ------------------------------------------------------------------------------------


def write_run_outputs(
    trace: Trace,
    out_dir: str | Path | OutputFolder,
    summary: RunSummary | None = None,
    *,
    plots: bool = True,
    force: bool = False,
) -> dict[str, Path]:
    """Write trace.json, summary.json, tables/ (CSV, + Parquet with pyarrow) and the PNGs.

    ``out_dir`` is a folder claimed through ``hwsim.outputs_guard`` or a path claimed here (with
    ``force``: a non-empty folder that is not a run folder of ours is written into anyway).
    Returns {"trace": ..., "summary": ..., "Instruction.csv": ..., "timeline": ..., ...}.
    """
    from hwsim.outputs_guard import OutputFolder, claim_folder
    from hwsim.trace.chrome import write_chrome_events
    from hwsim.trace.stats import summarize
    from hwsim.trace.tables import write_tables

    if not isinstance(out_dir, OutputFolder):
        with claim_folder(out_dir, force=force) as folder:
            return write_run_outputs(trace, folder, summary, plots=plots)
    out = out_dir
    summary = summary if summary is not None else summarize(trace)
    with out.open(TRACE_FILE, buffering=1 << 20) as stream:
        events = write_chrome_events(trace, stream, summary=summary)
    paths = {"trace": out.path / TRACE_FILE}
    paths.update(_large_trace_as_pftrace(out, events))
    paths["summary"] = out.write_text(
        SUMMARY_FILE, strict_json.dumps(summary.to_dict(), indent=1, default=str) + "\n"
    )
    with out.subdir(TABLES_DIR) as tables:
        paths.update(write_tables(trace, tables, summary))
    if plots:
        from hwsim.plots import plot

        run = run_data(trace, summary)
        for kind, name in PLOT_FILES.items():
            with out.open(name, "wb") as png:
                plot(kind, run, png)
            paths[kind] = out.path / name
    return paths


def default_run_dir(workload: str = "run", root: str | Path = TRACES_DIR) -> Path:
    """A new folder ``<root>/<YYYYmmdd-HHMMSS>-<workload>`` (suffixed -2, -3... if taken)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", workload).strip("_") or "run"
    base = Path(root) / f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    return path


# ---- from a trace in memory ---------------------------------------------------------------------


def colour_key(tag: str) -> str:
    """What a slice is coloured by: an instruction of a graph node by its op (``Origin.op``: a
    model's timeline is coloured by ATen op), any other by its tag."""
    origin = origin_of(tag)
    return origin.op if origin is not None else tag


def run_data(trace: Trace, summary: RunSummary | None = None) -> RunData:
    """The plot/report view of an in-memory trace (same content ``load_run`` reads from JSON)."""
    from hwsim.trace.chrome import counter_series
    from hwsim.trace.extra_tracks import critical_links
    from hwsim.trace.stats import summarize

    summary = summary if summary is not None else summarize(trace)
    facts = facts_memo()
    cores = cores_of(trace)
    engines = engine_order(r.engine for r in trace.instructions)
    deps = Dependencies(trace, facts)
    spans_of_dma = dma_spans(trace, deps.transfers)
    queues = sorted(set(zip(spans_of_dma.core.tolist(), spans_of_dma.queue.tolist(), strict=True)))
    rows, engine_row, dma_row = _rows(cores, engines, queues)

    keys: dict[str, int] = {}
    recs = trace.instructions
    spans = OperandSpans()
    key_codes = array("q")
    for rec in recs:
        f = facts(rec.instruction)
        key_codes.append(keys.setdefault(colour_key(f.tag or f.opcode), len(keys)))
        if trace.memory_allocations:
            spans.add(rec.core, f.spans, rec.start_tick, rec.done_tick)
    lookup = np.full((max(cores) + 1, max(engine_code(e) for e in engines) + 1), -1, np.int64)
    for (core, engine), row in engine_row.items():
        lookup[core, engine_code(engine)] = row
    inst_rows = (
        lookup[int_column(recs, "core"), engine_codes(recs)] if recs else np.zeros(0, np.int64)
    )

    transfer_key = []
    for index in deps.transfers.trigger_record.tolist():
        trigger = facts(recs[index].instruction) if index >= 0 else None
        name = (trigger.tag or trigger.opcode) if trigger else "dma"
        transfer_key.append(keys.setdefault(colour_key(name), len(keys)))
    d = spans_of_dma
    piece_rows = np.fromiter(
        (dma_row[c, q] for c, q in zip(d.core.tolist(), d.queue.tolist(), strict=True)),
        np.int64,
        len(d),
    )
    piece_keys = np.array(transfer_key, np.int64)[d.transfer] if len(d) else np.zeros(0, np.int64)
    ns = 1000 / trace.base_mhz
    counters: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]] = {}
    critical = [
        (core, name, t0 * ns, t1 * ns) for core, name, t0, t1 in critical_links(trace, deps)
    ]
    for name, core, times, values, _ in counter_series(trace, facts, deps, spans):
        counters.setdefault(name, {})[core] = (times.astype(np.float64), values.astype(np.float64))
    return RunData(
        summary=summary,
        rows=rows,
        slice_row=np.concatenate([inst_rows, piece_rows]),
        slice_start_ns=np.concatenate([int_column(recs, "start_tick") * ns, d.start_tick * ns]),
        slice_end_ns=np.concatenate([int_column(recs, "end_tick") * ns, d.end_tick * ns]),
        slice_key=np.concatenate(
            [np.frombuffer(key_codes, np.int64) if recs else np.zeros(0, np.int64), piece_keys]
        ),
        slice_bytes=np.concatenate([np.zeros(len(recs)), d.transfer_bytes.astype(np.float64)]),
        slice_queued_ns=np.concatenate([int_column(recs, "start_tick") * ns, d.queued_tick * ns]),
        keys=list(keys),
        critical=critical,
        counters=counters,
        source=str(trace.meta.get("workload", "")),
    )


def _rows(
    cores: list[int], engines: list[str], dma_queues: list[tuple[int, int]]
) -> tuple[list[str], dict[tuple[int, str], int], dict[tuple[int, int], int]]:
    """Row labels in hardware order and the row of each (core, engine) / (core, DMA queue)."""
    rows: list[str] = []
    engine_row: dict[tuple[int, str], int] = {}
    dma_row: dict[tuple[int, int], int] = {}
    prefix = len(cores) > 1
    for core in cores:
        lead = f"NC{core} " if prefix else ""
        for engine in engines:
            engine_row[core, engine] = len(rows)
            rows.append(lead + engine_label(engine))
        for c, queue in dma_queues:
            if c == core:
                dma_row[core, queue] = len(rows)
                rows.append(f"{lead}DMA q{queue}")
    return rows, engine_row, dma_row


# ---- from disk ----------------------------------------------------------------------------------


def resolve_run(path: str | Path) -> tuple[Path | None, Path | None]:
    """(trace.json, summary.json) of a run folder or a trace file; either may be None."""
    path = Path(path)
    if path.is_dir():
        trace = path / TRACE_FILE
        summary = path / SUMMARY_FILE
        found = (trace if trace.is_file() else None, summary if summary.is_file() else None)
        if found == (None, None):
            raise HwsimError(f"{path}: no {TRACE_FILE} or {SUMMARY_FILE} in this folder")
        return found
    if path.is_file():
        if path.name == SUMMARY_FILE:
            return None, path
        sidecar = path.with_name(SUMMARY_FILE)
        return path, sidecar if path.name == TRACE_FILE and sidecar.is_file() else None
    raise HwsimError(f"{path}: no such trace file or run folder")


def load_summary(path: str | Path) -> RunSummary:
    """The run summary of a run folder, summary.json or trace.json (its header; no events read),
    also one written by an older version (``RunSummary.from_dict``).

    Anything else (not JSON, not UTF-8, nested past the parser's depth, not an object, another
    ``schema``, fields of the wrong kind) is an ``HwsimError`` naming the file."""
    from hwsim.trace.chrome import read_header
    from hwsim.trace.stats import SUMMARY_SCHEMA

    trace_path, summary_path = resolve_run(path)
    source = summary_path or trace_path
    assert source is not None
    try:
        if summary_path is not None:
            summary = strict_json.loads(summary_path.read_text(encoding="utf-8"))
        else:
            header = read_header(source)
            summary = header.get("summary") if isinstance(header, dict) else None
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        what = "JSON summary" if summary_path is not None else "Chrome trace JSON file"
        raise HwsimError(f"{source}: not a {what} ({_reason(exc)})") from None
    except OSError as exc:
        raise HwsimError(f"{source}: cannot read it ({exc.strerror})") from None
    if summary_path is None and not summary:
        raise HwsimError(f"{source}: no hwsim summary in this trace (was it written by hwsim?)")
    if type(summary) is not dict:
        raise HwsimError(
            f"{source}: the run summary is a JSON {type(summary).__name__}, not an object "
            "(was it written by hwsim?)"
        )
    schema = summary.get("schema", SUMMARY_SCHEMA)  # older versions wrote none
    if schema != SUMMARY_SCHEMA:
        raise HwsimError(
            f"{source}: not a run summary of this hwsim (schema {str(schema)[:40]!r}, this hwsim "
            f"reads {SUMMARY_SCHEMA!r}); simulate the run again"
        )
    try:
        return RunSummary.from_dict(summary)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise HwsimError(
            f"{source}: its run summary has a missing or malformed field ({type(exc).__name__}: "
            f"{str(exc)[:120]}); was it edited? simulate the run again"
        ) from exc


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc)[:200]


def load_run(path: str | Path) -> RunData:
    """Read a run folder or trace.json back into a RunData (slices, counters, summary)."""
    from hwsim.trace.chrome import iter_events, read_header

    trace_path, _ = resolve_run(path)
    summary = load_summary(path)
    if trace_path is None:
        return RunData(summary=summary, source=str(path))
    cores: dict[int, int] = {}
    tracks: dict[tuple[int, int], dict[str, Any]] = {}
    pids, tids, keys_col = array("q"), array("q"), array("q")
    starts, ends, moved, queued = array("d"), array("d"), array("d"), array("d")
    ns_per_tick = 1000 / float(read_header(trace_path).get("base_mhz") or 1000)
    critical: list[tuple[int, str, float, float]] = []  # pid until the cores are known
    keys: dict[str, int] = {}
    raw_counters: dict[tuple[str, int], tuple[array[float], array[float]]] = {}
    try:
        for event in iter_events(trace_path):
            ph = event.get("ph")
            if ph == "X" and event.get("cat") == "critical":
                ts = event["ts"] * 1000
                critical.append((event["pid"], event["name"], ts, ts + event["dur"] * 1000))
            elif ph == "X" and event.get("cat") != "op":
                args = event.get("args") or {}
                pids.append(event["pid"])
                tids.append(event["tid"])
                starts.append(event["ts"] * 1000)
                ends.append((event["ts"] + event["dur"]) * 1000)
                moved.append(float(args.get("bytes", 0)) if event.get("cat") == "dma" else 0.0)
                wait_ticks = args.get("start_tick", 0) - args.get("queued_tick", 0)
                queued.append(starts[-1] - max(0, wait_ticks) * ns_per_tick)
                key = args.get("op") or args.get("tag") or event.get("name", "")
                keys_col.append(keys.setdefault(key, len(keys)))
            elif ph == "C":
                for value in event["args"].values():
                    times, values = raw_counters.setdefault(
                        (event["name"], event["pid"]), (array("d"), array("d"))
                    )
                    times.append(event["ts"] * 1000)
                    values.append(float(value))
            elif ph == "M" and event.get("name") == "process_name":
                core = (event.get("args") or {}).get("hwsim_core")
                if core is not None:
                    cores[event["pid"]] = int(core)
            elif ph == "M" and event.get("name") == "thread_name":
                tracks[event["pid"], event.get("tid", 0)] = event.get("args") or {}
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise HwsimError(f"{trace_path}: cannot read trace events ({_reason(exc)})") from None
    slices = {"start": starts, "end": ends, "bytes": moved, "queued": queued}
    run = _run_from_columns(
        summary, cores, tracks, pids, tids, slices, keys_col, keys, raw_counters, trace_path
    )
    run.critical = [(cores[pid], name, t0, t1) for pid, name, t0, t1 in critical if pid in cores]
    return run


def _run_from_columns(
    summary: RunSummary,
    cores: dict[int, int],
    tracks: dict[tuple[int, int], dict[str, Any]],
    pids: array[int],
    tids: array[int],
    slices: dict[str, array[float]],
    keys_col: array[int],
    keys: dict[str, int],
    raw_counters: dict[tuple[str, int], tuple[array[float], array[float]]],
    trace_path: Path,
) -> RunData:
    engines_seen = {str(t["hwsim_track"]) for t in tracks.values() if t.get("hwsim_track")}
    engines_seen -= DERIVED_TRACKS
    engines = engine_order(engines_seen)
    dma_queues = sorted(
        {
            (cores[pid], int(t["queue"]))
            for (pid, _), t in tracks.items()
            if t.get("hwsim_track") == "dma" and pid in cores
        }
    )
    rows, engine_row, dma_row = _rows(sorted(set(cores.values())) or [0], engines, dma_queues)
    track_row: dict[tuple[int, int], int] = {}
    for (pid, tid), t in tracks.items():
        if pid not in cores:
            continue
        kind = t.get("hwsim_track")
        if kind == "dma":
            track_row[pid, tid] = dma_row[cores[pid], int(t["queue"])]
        elif (cores[pid], kind) in engine_row:
            track_row[pid, tid] = engine_row[cores[pid], str(kind)]
    row = np.fromiter(
        (track_row.get((p, t), -1) for p, t in zip(pids, tids, strict=True)), np.int64, len(pids)
    )
    device = row >= 0
    counters: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]] = {}
    for (name, pid), (times, values) in raw_counters.items():
        if pid in cores:
            counters.setdefault(name, {})[cores[pid]] = (np.array(times), np.array(values))
    return RunData(
        summary=summary,
        rows=rows,
        slice_row=row[device],
        slice_start_ns=np.array(slices["start"])[device],
        slice_end_ns=np.array(slices["end"])[device],
        slice_key=np.array(keys_col, np.int64)[device],
        slice_bytes=np.array(slices["bytes"])[device],
        slice_queued_ns=np.array(slices["queued"])[device],
        keys=list(keys),
        counters=counters,
        source=str(trace_path),
    )


def _large_trace_as_pftrace(out: OutputFolder, events: int) -> dict[str, Path]:
    """A trace too large for the UI to load quickly from JSON also goes out as protobuf."""
    from hwsim.trace.pftrace import PFTRACE_MIN_EVENTS, perfetto_available, write_pftrace

    if events <= PFTRACE_MIN_EVENTS:
        return {}
    if not perfetto_available():
        print(
            f"note: the trace has {events:,} events; pip install 'hwsim[perfetto]' to also get "
            f"{PFTRACE_FILE}, which the Perfetto UI loads several times faster",
            file=sys.stderr,
        )
        return {}
    from hwsim.trace.chrome import iter_events

    with out.open(PFTRACE_FILE, "wb") as stream:
        write_pftrace(iter_events(out.path / TRACE_FILE), stream)
    return {"pftrace": out.path / PFTRACE_FILE}
