"""Chrome Trace Event JSON of a run, for Perfetto UI and chrome://tracing, streamed to disk.

Layout (see traces/README.md for how to read it):

- one process per NeuronCore (pid ``CORE_PID_BASE + core``) and one "host" process (PyTorch ops
  on the CPU, from ``trace.meta['host_events']``), ordered by ``process_sort_index``;
- per core, a "Critical path" track on top (one slice per link of the chain that set the run's
  end, named by its resource, tiling the run: ``hwsim.trace.critical_path``), then one track per
  engine in hardware order (``hwsim.engines``), then one track per used DMA queue ("DMA q0"): one
  slice per transfer on that queue, covering its pieces, with the DMA engines, pieces, bytes and
  descriptors as args (``hwsim.trace.dma_spans``; a queue whose transfers overlap gets extra lanes
  "DMA q0 (2)", ...), then an "Ops" track of one span per source tag (a bridge run's op, from its
  first instruction's start to its last's end; lanes as needed), all ordered by
  ``thread_sort_index``;
- complete ("X") slices whose args carry ticks, opcode, profiler opcode, operands, bytes per
  memory, FLOPs and the source tag;
- flow arrows ("s" -> "f", bound to the enclosing slices) from the instruction or DMA transfer
  whose semaphore update met a wait, to the instruction that waited; and, for each collective of
  a run over several cores, from each rank's slice on its core's CollectiveE track to the next
  rank's (category "collective"), so a collective reads as one chain across the cores;
- counters ("C"): HBM read and write bandwidth (GB/s, binned) and SBUF/PSUM occupancy (bytes).

Times are µs with ns resolution: every tick is floored to an integer ns first and ``dur`` is the
difference of floored ends, so adjacent slices never overlap after rounding (Perfetto stores
integer ns; rounding ``ts`` and ``dur`` independently could make them overlap). Exact ticks are in
the args.

File shape: the first line holds ``displayTimeUnit`` and ``otherData`` (format, time base, meta,
the effective config and the run summary), the second opens ``traceEvents``, then one event per
line. It is ordinary JSON; ``read_header`` and ``iter_events`` use the line shape to read a
summary or stream events without loading the file (and fall back to ``json.load`` otherwise).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from hwsim import strict_json
from hwsim.engines import COLLECTIVE_ENGINE
from hwsim.isa.ap import AccessPattern
from hwsim.isa.origin import origin_of
from hwsim.trace import extra_tracks
from hwsim.trace.analysis import (
    Dependencies,
    cores_of,
    dma_columns,
    end_tick,
    engine_code,
    engine_label,
)
from hwsim.trace.array_ops import bin_edges, binned_amounts
from hwsim.trace.dma_spans import dma_spans
from hwsim.trace.facts import MEMORIES, FactsMemo, IdentityMemo, facts_memo
from hwsim.trace.occupancy import OperandSpans, occupancy_steps
from hwsim.trace.records import Trace, engine_order
from hwsim.trace.summary import RunSummary

TRACE_FORMAT = "hwsim.chrome/1"
HOST_PID = 1
CORE_PID_BASE = 10
HOST_TID = 1
DMA_TID_BASE = 100
#: Tracks per DMA queue (its lanes) in the tid numbering; ops tracks come after every queue's.
DMA_LANES_PER_QUEUE = 64
CRITICAL_TID = 90
OPS_TID_BASE = 100_000
#: HBM bandwidth counters: bins over the run (each bin's value is its mean bandwidth).
COUNTER_BINS = 1000
#: Collective flows take ids above any semaphore flow's (those count from 1, one per wait).
_COLLECTIVE_FLOW_IDS = 1 << 40
_HEADER_KEY = '{"displayTimeUnit":"ns","otherData":'
_EVENTS_LINE = '"traceEvents":['


def core_pid(core: int) -> int:
    return CORE_PID_BASE + core


def engine_tid(engine: str) -> int:
    """Engine tracks 1..5 in hardware order (unknown engines after them)."""
    return engine_code(engine) + 1


def dma_tid(queue: int, lane: int = 0) -> int:
    """The track of a DMA queue's ``lane`` (0 unless its transfers overlap)."""
    return DMA_TID_BASE + queue * DMA_LANES_PER_QUEUE + min(lane, DMA_LANES_PER_QUEUE - 1)


def write_chrome_trace(
    trace: Trace,
    path: str | Path | IO[str],
    *,
    summary: RunSummary | None = None,
    counter_bins: int = COUNTER_BINS,
) -> Path:
    """Write ``trace`` as Chrome Trace Event JSON at ``path`` (a file path, written through the
    output guard, or a text stream open for writing); returns the path.

    Streams: events go to the file as they are formatted; only per-semaphore and per-record index
    arrays (a few int64 per record) are held, never the event list.
    """
    if not isinstance(path, (str, Path)):
        _Writer(trace, path, summary, counter_bins).write()
        return Path(path.name)
    from hwsim.outputs_guard import output_file

    with output_file(path, "w", buffering=1 << 20) as out:
        _Writer(trace, out, summary, counter_bins).write()
    return Path(path)


def write_chrome_events(trace: Trace, out: IO[str], *, summary: RunSummary | None = None) -> int:
    """``write_chrome_trace`` to a text stream; returns the number of events written (a run's
    outputs add the .pftrace form past ``hwsim.trace.pftrace.PFTRACE_MIN_EVENTS``)."""
    return _Writer(trace, out, summary, COUNTER_BINS).write()


class _EventStream:
    """Writes one event per line with the commas JSON needs (holds back one line)."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._pending: str | None = None
        self.count = 0

    def emit(self, line: str) -> None:
        self.count += 1
        if self._pending is not None:
            self._out.write(self._pending)
            self._out.write(",\n")
        self._pending = line

    def close(self) -> None:
        if self._pending is not None:
            self._out.write(self._pending)
            self._out.write("\n")
        self._out.write("]}\n")


class _Writer:
    def __init__(
        self, trace: Trace, out: IO[str], summary: RunSummary | None, counter_bins: int
    ) -> None:
        self.trace = trace
        self.out = out
        self.summary = summary
        self.counter_bins = counter_bins
        self.base = trace.base_mhz
        self.facts = facts_memo()
        self.static_args: IdentityMemo[str] = IdentityMemo(self._static_args)
        self.events = _EventStream(out)
        self.cores = cores_of(trace)

    # ---- time ---------------------------------------------------------------------------------
    def ns(self, tick: int) -> int:
        return tick * 1000 // self.base

    @staticmethod
    def us(ns: int) -> str:
        return f"{ns // 1000}.{ns % 1000:03d}"

    # ---- top level ----------------------------------------------------------------------------
    def write(self) -> int:
        """Write the whole trace; returns the number of events."""
        self.out.write(_HEADER_KEY + strict_json.dumps(self._other_data(), default=str) + ",\n")
        self.out.write(_EVENTS_LINE + "\n")
        deps = Dependencies(self.trace, self.facts)
        self.dma_spans = dma_spans(self.trace, deps.transfers)
        self._metadata()
        # the derived tracks first: their temporaries are gone before the operand spans grow
        extra_tracks.write_critical_path(self, deps)
        extra_tracks.write_op_spans(self)
        spans = OperandSpans()
        self._instructions(deps, spans)
        self._collective_flows()
        self._dma(deps)
        del self.dma_spans  # done with: freed before the counters, the writer's peak of memory
        self._host()
        self._counters(deps, spans)
        self.events.close()
        return self.events.count

    def _other_data(self) -> dict[str, Any]:
        trace = self.trace
        meta = {k: v for k, v in trace.meta.items() if k != "host_events"}
        config = trace.config
        dump = config.model_dump(mode="json") if hasattr(config, "model_dump") else None
        return {
            "format": TRACE_FORMAT,
            "base_mhz": trace.base_mhz,
            "meta": meta,
            "config": dump,
            "summary": self.summary.to_dict() if self.summary is not None else None,
        }

    def _metadata(self) -> None:
        emit = self.events.emit
        emit(_meta("process_name", HOST_PID, None, {"name": "host (PyTorch ops)"}))
        emit(_meta("process_sort_index", HOST_PID, None, {"sort_index": 0}))
        emit(
            _meta("thread_name", HOST_PID, HOST_TID, {"name": "PyTorch ops", "hwsim_track": "host"})
        )
        emit(_meta("thread_sort_index", HOST_PID, HOST_TID, {"sort_index": 0}))
        engines = engine_order(r.engine for r in self.trace.instructions)
        for core in self.cores:
            pid = core_pid(core)
            emit(
                _meta("process_name", pid, None, {"name": f"NeuronCore {core}", "hwsim_core": core})
            )
            emit(_meta("process_sort_index", pid, None, {"sort_index": 1 + core}))
            for rank, engine in enumerate(engines):
                names = {"name": engine_label(engine), "hwsim_track": engine}
                emit(_meta("thread_name", pid, engine_tid(engine), names))
                emit(_meta("thread_sort_index", pid, engine_tid(engine), {"sort_index": rank}))
            rank = len(engines)
            d = self.dma_spans
            mine = d.core == core
            lanes = sorted(set(zip(d.queue[mine].tolist(), d.lane[mine].tolist(), strict=True)))
            for queue, lane in lanes:
                tid = dma_tid(queue, lane)
                args: dict[str, Any] = {
                    "name": f"DMA q{queue}" + (f" ({lane + 1})" if lane else ""),
                    "hwsim_track": "dma",
                    "queue": queue,
                    "lane": lane,
                }
                emit(_meta("thread_name", pid, tid, args))
                emit(_meta("thread_sort_index", pid, tid, {"sort_index": rank}))
                rank += 1

    # ---- instruction slices and flows ---------------------------------------------------------
    def _static_args(self, instruction: Any) -> str:
        f = self.facts(instruction)
        parts = [
            f'"opcode":{json_str(f.opcode)}',
            f'"profiler_opcode":{json_str(f.profiler_opcode)}',
            f'"operands":{json_str(instruction.describe())}',
            f'"tag":{json_str(f.tag)}{origin_args(f.tag)}',
            f'"flops":{f.flops}',
        ]
        for m, memory in enumerate(MEMORIES):
            if f.read_bytes[m]:
                parts.append(f'"{memory}_read_bytes":{f.read_bytes[m]}')
            if f.write_bytes[m]:
                parts.append(f'"{memory}_write_bytes":{f.write_bytes[m]}')
        attributes = {
            name: value
            for name in _attribute_fields(type(instruction))
            if not isinstance(value := getattr(instruction, name), AccessPattern)
        }
        if attributes:
            parts.append(f'"attributes":{strict_json.dumps(attributes, default=str)}')
        return ",".join(parts)

    def _instructions(self, deps: Dependencies, spans: OperandSpans) -> None:
        trace, emit, ns, us = self.trace, self.events.emit, self.ns, self.us
        src_pid, src_tid, src_ns = self._update_sources(deps)
        track_spans = bool(trace.memory_allocations)
        satisfying = deps.semaphores.satisfying
        flow_id = 0
        for rec in trace.instructions:
            instruction = rec.instruction
            pid, tid = core_pid(rec.core), engine_tid(rec.engine)
            t0, t1 = ns(rec.start_tick), ns(rec.end_tick)
            wait_ns = ns(rec.start_tick) - ns(rec.ready_tick)
            emit(
                f'{{"ph":"X","pid":{pid},"tid":{tid},"ts":{us(t0)},"dur":{us(t1 - t0)},'
                f'"name":"{instruction.OPCODE}","cat":"{rec.engine}","args":{{'
                f'"pc":{rec.pc},"ready_tick":{rec.ready_tick},"start_tick":{rec.start_tick},'
                f'"end_tick":{rec.end_tick},"done_tick":{rec.done_tick},"wait_ns":{wait_ns},'
                f"{self.static_args(instruction)}}}}}"
            )
            if track_spans:
                spans.add(rec.core, self.facts(instruction).spans, rec.start_tick, rec.done_tick)
            if not instruction.waits:
                continue
            here = us((t0 + t1) // 2)
            for semaphore, value in instruction.waits:
                u = satisfying(rec.core, semaphore, value)
                if u < 0 or src_pid[u] < 0:
                    continue
                flow_id += 1
                name = json.dumps(f"{semaphore}>={value}")
                emit(
                    f'{{"ph":"s","id":{flow_id},"pid":{src_pid[u]},"tid":{src_tid[u]},'
                    f'"ts":{us(int(src_ns[u]))},"name":{name},"cat":"semaphore"}}'
                )
                emit(
                    f'{{"ph":"f","bp":"e","id":{flow_id},"pid":{pid},"tid":{tid},'
                    f'"ts":{here},"name":{name},"cat":"semaphore"}}'
                )

    def _collective_flows(self) -> None:
        """Rank r's part of a collective to rank r + 1's, for the collectives of this run."""
        by_collective: dict[tuple[Any, ...], dict[int, Any]] = {}
        for record in self.trace.collectives:
            by_collective.setdefault((record.group, record.seq), {})[record.rank] = record
        flow_id = _COLLECTIVE_FLOW_IDS
        emit, ns, us = self.events.emit, self.ns, self.us
        tid = engine_tid(COLLECTIVE_ENGINE)
        for (group, seq), ranks in by_collective.items():
            order = [ranks[r] for r in sorted(ranks)]
            for sender, receiver in itertools.pairwise(order):
                flow_id += 1
                name = json.dumps(f"{sender.kind} {seq} on {list(group)}")
                mid = (ns(sender.start_tick) + ns(sender.end_tick)) // 2
                there = (ns(receiver.start_tick) + ns(receiver.end_tick)) // 2
                emit(
                    f'{{"ph":"s","id":{flow_id},"pid":{core_pid(sender.core)},"tid":{tid},'
                    f'"ts":{us(mid)},"name":{name},"cat":"collective"}}'
                )
                emit(
                    f'{{"ph":"f","bp":"e","id":{flow_id},"pid":{core_pid(receiver.core)},'
                    f'"tid":{tid},"ts":{us(there)},"name":{name},"cat":"collective"}}'
                )

    def _update_sources(self, deps: Dependencies) -> tuple[list[int], list[int], np.ndarray]:
        """Per semaphore update: pid, tid and mid-slice ns of the slice that made it (-1: none)."""
        trace = self.trace
        n = len(trace.semaphore_updates)
        pid = [-1] * n
        tid = [-1] * n
        mid = np.zeros(n, np.int64)
        recs = trace.instructions
        for u in np.flatnonzero(deps.update_instruction >= 0):
            rec = recs[deps.update_instruction[u]]
            pid[u], tid[u] = core_pid(rec.core), engine_tid(rec.engine)
            mid[u] = (self.ns(rec.start_tick) + self.ns(rec.end_tick)) // 2
        last_piece = deps.transfers.last_piece
        d = self.dma_spans
        for u in np.flatnonzero(deps.update_transfer >= 0):
            span = int(d.span_of_piece[last_piece[deps.update_transfer[u]]])
            pid[u] = core_pid(int(d.core[span]))
            tid[u] = dma_tid(int(d.queue[span]), int(d.lane[span]))
            mid[u] = (self.ns(int(d.start_tick[span])) + self.ns(int(d.end_tick[span]))) // 2
        return pid, tid, mid

    # ---- DMA pieces ---------------------------------------------------------------------------
    def _dma(self, deps: Dependencies) -> None:
        trace, emit, ns, us = self.trace, self.events.emit, self.ns, self.us
        transfers = deps.transfers
        labels = []
        for t, index in enumerate(transfers.trigger_record.tolist()):
            _, engine, pc = transfers.trigger(t)
            if index < 0:
                labels.append(('"dma"', f'"trigger":"{engine}[{pc}]"'))
                continue
            f = self.facts(trace.instructions[index].instruction)
            src = next((m for m, b in zip(MEMORIES, f.read_bytes, strict=True) if b), "?")
            dst = next((m for m, b in zip(MEMORIES, f.write_bytes, strict=True) if b), "?")
            labels.append(
                (
                    json.dumps(f.opcode),
                    f'"trigger":"{engine}[{pc}]","direction":"{src}->{dst}",'
                    f'"tag":{json.dumps(f.tag)}{origin_args(f.tag)}',
                )
            )
        d = self.dma_spans
        for s in range(len(d)):
            name, extra = labels[int(d.transfer[s])]
            start, end = int(d.start_tick[s]), int(d.end_tick[s])
            t0, t1 = ns(start), ns(end)
            emit(
                f'{{"ph":"X","pid":{core_pid(int(d.core[s]))},'
                f'"tid":{dma_tid(int(d.queue[s]), int(d.lane[s]))},'
                f'"ts":{us(t0)},"dur":{us(t1 - t0)},"name":{name},"cat":"dma","args":{{'
                f'"queued_tick":{int(d.queued_tick[s])},"start_tick":{start},'
                f'"end_tick":{end},"bytes":{int(d.transfer_bytes[s])},'
                f'"descriptors":{int(d.descriptors[s])},"queue":{int(d.queue[s])},'
                f'"pieces":{int(d.pieces[s])},"dma_engines":{json.dumps(d.dma_engines(s))},'
                f"{extra}}}}}"
            )

    # ---- host ---------------------------------------------------------------------------------
    def _host(self) -> None:
        lanes = host_lanes(self.trace.meta.get("host_events") or [])
        for lane in sorted({lane for lane, _ in lanes} - {0}):
            name = {"name": f"PyTorch ops ({lane + 1})", "hwsim_track": "host"}
            self.events.emit(_meta("thread_name", HOST_PID, HOST_TID + lane, name))
            sort = {"sort_index": lane}
            self.events.emit(_meta("thread_sort_index", HOST_PID, HOST_TID + lane, sort))
        for lane, event in lanes:
            t0 = int(event["start_ns"])
            t1 = max(t0, int(event["end_ns"]))
            args = strict_json.dumps(event.get("args", {}), default=str)
            self.events.emit(
                f'{{"ph":"X","pid":{HOST_PID},"tid":{HOST_TID + lane},"ts":{self.us(t0)},'
                f'"dur":{self.us(t1 - t0)},"name":{json.dumps(str(event["name"]))},'
                f'"cat":"host","args":{args}}}'
            )

    # ---- counters -----------------------------------------------------------------------------
    def _counters(self, deps: Dependencies, spans: OperandSpans) -> None:
        for name, core, ns, values, unit in counter_series(
            self.trace, self.facts, deps, spans, self.counter_bins
        ):
            self._counter(core_pid(core), name, unit, ns, values)

    def _counter(self, pid: int, name: str, unit: str, ns: np.ndarray, values: np.ndarray) -> None:
        previous = None
        for t, value in zip(ns.tolist(), values.tolist(), strict=True):
            text = f"{value:.6g}" if isinstance(value, float) else str(value)
            if text == previous:  # binned rates carry float noise: compare what is written
                continue
            previous = text
            self.events.emit(
                f'{{"ph":"C","pid":{pid},"ts":{self.us(int(t))},"name":"{name}",'
                f'"args":{{"{unit}":{text}}}}}'
            )


def counter_series(
    trace: Trace,
    facts: FactsMemo,
    deps: Dependencies,
    spans: OperandSpans,
    bins: int = COUNTER_BINS,
) -> Iterator[tuple[str, int, np.ndarray, np.ndarray, str]]:
    """(counter name, core, times in integer ns, values, unit) of every counter track.

    HBM read/write: GB/s per bin (bytes of the DMA pieces overlapping the bin, spread evenly over
    each piece). SBUF/PSUM occupancy: bytes in use (``occupancy.occupancy_steps``); ``spans``
    must already hold the instructions' operand spans.
    """
    total = end_tick(trace)
    base = trace.base_mhz
    edges = bin_edges(total, bins)
    edge_ns = (edges * 1000 / base).astype(np.int64)
    width_ns = np.maximum(np.diff(edges) * 1000 / base, 1e-9)
    cols = dma_columns(trace, facts, deps.instructions, deps.transfers)
    lives = spans.lifetimes(trace.memory_allocations)
    for core in cores_of(trace):
        mine = cols.core == core
        for name, amount in (("HBM read", cols.hbm_read), ("HBM write", cols.hbm_write)):
            if not amount[mine].any():
                continue
            per_bin = binned_amounts(cols.start[mine], cols.end[mine], amount[mine], edges)
            gbps = per_bin / width_ns  # bytes/ns = GB/s
            yield name, core, edge_ns, np.append(gbps, 0.0), "GB/s"
        for memory, label in (("sbuf", "SBUF occupancy"), ("psum", "PSUM occupancy")):
            if not any(life.memory == memory and life.core == core for life in lives):
                continue
            ticks, level = occupancy_steps(lives, memory, core)
            yield label, core, ticks * 1000 // base, level, "bytes"


def host_lanes(events: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """Assign host events to lanes so each lane nests properly (no partial overlaps).

    Sorted by (start, longest first); an event joins the first lane whose open events either
    ended before it starts or contain it.
    """
    ordered = sorted(events, key=lambda e: (float(e["start_ns"]), -float(e["end_ns"])))
    stacks: list[list[float]] = []
    out = []
    for event in ordered:
        start, end = float(event["start_ns"]), float(event["end_ns"])
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                out.append((lane, event))
                break
        else:
            stacks.append([end])
            out.append((len(stacks) - 1, event))
    return out


_ATTRIBUTE_FIELDS: dict[type, tuple[str, ...]] = {}


def _attribute_fields(cls: type) -> tuple[str, ...]:
    """Fields of an instruction class that ``Instruction.attributes()`` reports (non-operand,
    non-sync), without ClassVars, which dataclasses also lists in ``__dataclass_fields__``."""
    names = _ATTRIBUTE_FIELDS.get(cls)
    if names is None:
        skip = {"engine", "waits", "signals", "tag", "name"}
        names = tuple(f.name for f in dataclasses.fields(cls) if f.name not in skip)
        _ATTRIBUTE_FIELDS[cls] = names
    return names


def origin_args(tag: str) -> str:
    """The typed parts of a tag with an ``Origin`` as args after ``"tag"`` (``,"op":...,
    "node":...``: what a timeline colours by and the graph node), "" for any other tag."""
    origin = origin_of(tag)
    if origin is None:
        return ""
    return f',"op":{json_str(origin.op)},"node":{json_str(origin.node)}'


def json_str(text: str) -> str:
    """``json.dumps`` of a string, with a fast path for the plain ASCII of opcodes and operands."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    return json.dumps(text)


def _meta(name: str, pid: int, tid: int | None, args: dict[str, Any]) -> str:
    tid_part = f',"tid":{tid}' if tid is not None else ""
    return f'{{"ph":"M","pid":{pid}{tid_part},"name":"{name}","args":{json.dumps(args)}}}'


# ---- reading ------------------------------------------------------------------------------------


def read_header(path: str | Path) -> dict[str, Any]:
    """The ``otherData`` of a trace written by this module (summary, meta, config) without
    reading the events; for other Chrome JSON files, their ``otherData`` (or {})."""
    with Path(path).open(encoding="utf-8") as f:
        first = f.readline()
        if first.startswith(_HEADER_KEY) and first.rstrip().endswith(","):
            data: dict[str, Any] = strict_json.loads(first[len(_HEADER_KEY) :].rstrip()[:-1])
            return data
    loaded = _load(path)
    return loaded.get("otherData", {}) if isinstance(loaded, dict) else {}


def is_line_format(path: str | Path) -> bool:
    """Whether the file has the one-event-per-line shape this module writes."""
    with Path(path).open(encoding="utf-8") as f:
        first = f.readline(len(_HEADER_KEY) + 1)
        if not first.startswith(_HEADER_KEY):
            return False
        f.readline()  # rest of the header line
        return f.readline().strip() == _EVENTS_LINE


def iter_events(path: str | Path) -> Iterator[dict[str, Any]]:
    """Every event of a Chrome trace file; line by line (streaming) for files written here.

    Raises ValueError for a line that is not JSON or a file cut off before its closing ``]}``.
    """
    if not is_line_format(path):
        loaded = _load(path)
        yield from loaded.get("traceEvents", []) if isinstance(loaded, dict) else loaded
        return
    with Path(path).open(encoding="utf-8") as f:
        f.readline()
        f.readline()
        closed = False
        for number, line in enumerate(f, start=3):
            text = line.strip()
            if text == "]}":
                closed = True
                continue
            if not text:
                continue
            if closed:
                raise ValueError(f"line {number}: data after the closing ']}}'")
            try:
                yield strict_json.loads(text[:-1] if text.endswith(",") else text)
            except ValueError as exc:  # not JSON, or a NaN / Infinity literal
                raise ValueError(f"line {number}: {exc}") from None
        if not closed:
            raise ValueError("the file ends before the closing ']}' (truncated?)")


def _load(path: str | Path) -> Any:
    with Path(path).open(encoding="utf-8") as f:
        return strict_json.loads(f.read())
