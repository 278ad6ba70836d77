"""Perfetto's own trace format (``trace.pftrace``, protobuf) from a Chrome JSON trace written by
``hwsim.trace.chrome``, through the maintained ``perfetto`` package (``pip install
'hwsim[perfetto]'``).

The JSON stays the primary trace (every tool reads it); a run over ``PFTRACE_MIN_EVENTS`` events
also gets the protobuf form, which the Perfetto UI loads several times faster and in less memory.
``hwsim trace convert`` makes one from any saved trace.

What maps to what: a JSON process or thread is a track (names and sort order kept); a complete
event (``X``) a slice, its ``args`` as debug annotations; a counter (``C``) one counter track per
series; a flow (``s``/``f``) an instant carrying the flow id on the track and time where it starts
or ends (Perfetto draws the arrow between them). Slices on one JSON thread that overlap without
nesting (the protobuf form, unlike the JSON importer, would mis-pair their ends) go to extra
tracks under the same process, named ``NAME (overlap 2)`` and so on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from hwsim.errors import HwsimError

#: A run's trace of more events than this also gets trace.pftrace (when the extra is installed).
PFTRACE_MIN_EVENTS = 1_000_000
#: The packet sequence all packets of the file belong to (one writer: one sequence).
_SEQUENCE_ID = 1
_NS_PER_US = 1000


def perfetto_available() -> bool:
    try:
        import perfetto.trace_builder.proto_builder  # noqa: F401
    except ImportError:
        return False
    return True


def write_pftrace(events: Iterable[dict[str, Any]], out: IO[bytes]) -> int:
    """Write ``events`` (Chrome trace events, e.g. ``chrome.iter_events(path)``) to ``out`` as
    a Perfetto protobuf trace; returns the number of events converted."""
    try:
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent
        from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder
    except ImportError as exc:
        raise HwsimError(
            f"writing a .pftrace needs the perfetto package: pip install 'hwsim[perfetto]' ({exc})"
        ) from None
    converter = _Converter(StreamingTraceProtoBuilder(out), TracePacket, TrackEvent)
    count = 0
    for event in events:
        converter.event(event)
        count += 1
    return count


def convert_file(json_path: str | Path, out_path: str | Path) -> int:
    """``trace.json`` -> ``trace.pftrace`` (written through the output guard)."""
    from hwsim.outputs_guard import output_file
    from hwsim.trace.chrome import iter_events

    with output_file(out_path, "wb") as out:
        return write_pftrace(_checked(iter_events(json_path), json_path), out)


def _checked(events: Iterator[dict[str, Any]], path: str | Path) -> Iterator[dict[str, Any]]:
    try:
        yield from events
    except ValueError as exc:
        raise HwsimError(f"{path}: not a readable Chrome trace ({exc})") from None


class _Converter:
    """One pass over the events: a track is declared when first used (hwsim's traces give
    every name and sort order before the first event, so each track is described once)."""

    def __init__(self, builder: Any, packet_type: Any, event_type: Any) -> None:
        self.builder = builder
        self.packet_type = packet_type
        self.event_type = event_type
        self.next_uuid = 1
        self.processes: dict[int, int] = {}
        self.threads: dict[tuple[int, int], list[_Lane]] = {}
        self.counters: dict[tuple[int, str, str], int] = {}
        self.process_names: dict[int, str] = {}
        self.process_ranks: dict[int, int] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.first_packet = True

    # ---- packets ------------------------------------------------------------------------------
    def _packet(self) -> Any:
        packet = self.builder.create_packet()
        packet.trusted_packet_sequence_id = _SEQUENCE_ID
        if self.first_packet:
            packet.sequence_flags = self.packet_type.SEQ_INCREMENTAL_STATE_CLEARED
            self.first_packet = False
        return packet

    def _uuid(self) -> int:
        self.next_uuid += 1
        return self.next_uuid

    def _process(self, pid: int) -> int:
        """The process's track, declared when first used (its metadata come before that)."""
        if pid not in self.processes:
            self.processes[pid] = self._uuid()
            packet = self._packet()
            track = packet.track_descriptor
            track.uuid = self.processes[pid]
            track.process.pid = pid
            track.process.process_name = self.process_names.get(pid, f"process {pid}")
            if pid in self.process_ranks:
                track.sibling_order_rank = self.process_ranks[pid]
            self.builder.write_packet(packet)
        return self.processes[pid]

    def _lanes(self, pid: int, tid: int) -> list[_Lane]:
        if (pid, tid) not in self.threads:
            self.threads[(pid, tid)] = []
            self._add_lane(pid, tid)
        return self.threads[(pid, tid)]

    def _add_lane(self, pid: int, tid: int, sort_index: int | None = None) -> _Lane:
        lanes = self.threads[(pid, tid)]
        lane = _Lane(self._uuid())
        lanes.append(lane)
        parent = self._process(pid)  # written before the packet that names it as parent
        packet = self._packet()
        track = packet.track_descriptor
        track.uuid = lane.uuid
        track.parent_uuid = parent
        name = self.thread_names.get((pid, tid), f"thread {tid}")
        track.name = name if len(lanes) == 1 else f"{name} (overlap {len(lanes)})"
        if sort_index is not None:
            track.sibling_order_rank = sort_index
        self.builder.write_packet(packet)
        return lane

    # ---- events -------------------------------------------------------------------------------
    def event(self, event: dict[str, Any]) -> None:
        phase = event.get("ph")
        if phase == "M":
            self._metadata(event)
        elif phase == "X":
            self._slice(event)
        elif phase == "C":
            self._counter(event)
        elif phase in ("s", "f", "i", "I"):
            self._instant(event, phase)

    def _metadata(self, event: dict[str, Any]) -> None:
        pid, args = int(event.get("pid", 0)), event.get("args", {})
        kind = event.get("name")
        if kind == "process_name":
            self.process_names[pid] = str(args.get("name", ""))
        elif kind == "process_sort_index":
            self.process_ranks[pid] = int(args.get("sort_index", 0))
        elif kind == "thread_name":
            self.thread_names[(pid, int(event.get("tid", 0)))] = str(args.get("name", ""))
        elif kind == "thread_sort_index":
            tid = int(event.get("tid", 0))
            if (pid, tid) not in self.threads:
                self.threads[(pid, tid)] = []
                self._add_lane(pid, tid, int(args.get("sort_index", 0)))

    def _slice(self, event: dict[str, Any]) -> None:
        pid, tid = int(event.get("pid", 0)), int(event.get("tid", 0))
        start = _ns(event.get("ts", 0))
        end = start + max(0, _ns(event.get("dur", 0)))
        lanes = self._lanes(pid, tid)
        lane = next((lane for lane in lanes if lane.fits(start, end)), None)
        if lane is None:
            lane = self._add_lane(pid, tid)
        lane.open(start, end)
        begin = self._track_event(start, lane.uuid, self.event_type.TYPE_SLICE_BEGIN, event)
        _annotate(begin.track_event, event.get("args"))
        self.builder.write_packet(begin)
        self.builder.write_packet(self._track_event(end, lane.uuid, self.event_type.TYPE_SLICE_END))

    def _instant(self, event: dict[str, Any], phase: str) -> None:
        pid, tid = int(event.get("pid", 0)), int(event.get("tid", 0))
        lane = self._lanes(pid, tid)[0]
        packet = self._track_event(
            _ns(event.get("ts", 0)), lane.uuid, self.event_type.TYPE_INSTANT, event
        )
        if phase == "s":
            packet.track_event.flow_ids.append(_flow_id(event))
        elif phase == "f":
            packet.track_event.terminating_flow_ids.append(_flow_id(event))
        _annotate(packet.track_event, event.get("args"))
        self.builder.write_packet(packet)

    def _counter(self, event: dict[str, Any]) -> None:
        pid, name = int(event.get("pid", 0)), str(event.get("name", ""))
        for series, value in (event.get("args") or {}).items():
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            key = (pid, name, str(series))
            if key not in self.counters:
                self.counters[key] = self._uuid()
                parent = self._process(pid)
                packet = self._packet()
                track = packet.track_descriptor
                track.uuid = self.counters[key]
                track.parent_uuid = parent
                track.name = f"{name} ({series})"
                track.counter.SetInParent()
                self.builder.write_packet(packet)
            packet = self._track_event(
                _ns(event.get("ts", 0)), self.counters[key], self.event_type.TYPE_COUNTER
            )
            packet.track_event.double_counter_value = float(value)
            self.builder.write_packet(packet)

    def _track_event(
        self, ns: int, track_uuid: int, kind: Any, event: dict[str, Any] | None = None
    ) -> Any:
        packet = self._packet()
        packet.timestamp = ns
        track_event = packet.track_event
        track_event.type = kind
        track_event.track_uuid = track_uuid
        if event is not None:
            track_event.name = str(event.get("name", ""))
            if event.get("cat"):
                track_event.categories.append(str(event["cat"]))
        return packet


class _Lane:
    """One track of a JSON thread: the ends of the slices open on it at the latest start."""

    def __init__(self, uuid: int) -> None:
        self.uuid = uuid
        self.ends: list[int] = []
        self.last_start = -1

    def fits(self, start: int, end: int) -> bool:
        if start < self.last_start:  # out of order: nesting cannot be judged here
            return False
        open_ends = [e for e in self.ends if e > start]
        return not open_ends or end <= open_ends[-1]

    def open(self, start: int, end: int) -> None:
        self.ends = [e for e in self.ends if e > start]
        self.ends.append(end)
        self.last_start = start


def _ns(us: Any) -> int:
    """A JSON timestamp or duration in µs (hwsim writes them to the nanosecond) as ns."""
    value = float(us)
    return round(value * _NS_PER_US) if math.isfinite(value) else 0


def _flow_id(event: dict[str, Any]) -> int:
    raw = event.get("id", 0)
    try:
        return int(raw)
    except (TypeError, ValueError):
        return hash(str(raw)) & 0x7FFF_FFFF_FFFF_FFFF


def _annotate(track_event: Any, args: Any) -> None:
    if not isinstance(args, dict):
        return
    for key, value in args.items():
        annotation = track_event.debug_annotations.add()
        annotation.name = str(key)
        if isinstance(value, bool):
            annotation.bool_value = value
        elif isinstance(value, int) and -(2**63) <= value < 2**63:
            annotation.int_value = value
        elif isinstance(value, float):
            annotation.double_value = value
        elif isinstance(value, str):
            annotation.string_value = value
        else:
            annotation.string_value = json.dumps(value, default=str)
