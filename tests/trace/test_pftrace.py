"""trace.pftrace: the Chrome JSON trace in Perfetto's protobuf form, read back packet by packet."""

from __future__ import annotations

import collections
import io
from pathlib import Path
from typing import Any

import pytest
from synthetic_traces import small_trace

from hwsim.cli.main import main
from hwsim.trace import outputs, pftrace
from hwsim.trace.chrome import iter_events, write_chrome_trace

pytest.importorskip("perfetto.trace_builder.proto_builder")
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent


def _read(data: bytes) -> tuple[dict[int, Any], list[Any]]:
    packets = list(Trace.FromString(data).packet)
    tracks = {
        p.track_descriptor.uuid: p.track_descriptor
        for p in packets
        if p.HasField("track_descriptor")
    }
    events = [p for p in packets if p.HasField("track_event")]
    return tracks, events


def _converted(events: list[dict[str, Any]]) -> tuple[dict[int, Any], list[Any]]:
    out = io.BytesIO()
    assert pftrace.write_pftrace(events, out) == len(events)
    return _read(out.getvalue())


def test_every_slice_counter_and_flow_of_a_run_is_in_the_protobuf(tmp_path: Path) -> None:
    json_path = write_chrome_trace(small_trace(), tmp_path / "trace.json")
    chrome = list(iter_events(json_path))
    data = _bytes(chrome)
    tracks, events = _read(data)
    packets = Trace.FromString(data).packet
    assert packets[0].sequence_flags == 1  # the first packet clears incremental state
    # every track's parent is declared before the track that names it
    seen: set[int] = set()
    for packet in packets:
        if packet.HasField("track_descriptor"):
            track = packet.track_descriptor
            assert not track.parent_uuid or track.parent_uuid in seen
            seen.add(track.uuid)
    slices = [e for e in chrome if e["ph"] == "X"]
    begins = [e for e in events if e.track_event.type == TrackEvent.TYPE_SLICE_BEGIN]
    ends = [e for e in events if e.track_event.type == TrackEvent.TYPE_SLICE_END]
    assert len(begins) == len(ends) == len(slices)
    assert collections.Counter(b.track_event.name for b in begins) == collections.Counter(
        s["name"] for s in slices
    )
    first = slices[0]
    begin = next(b for b in begins if b.track_event.name == first["name"])
    assert begin.timestamp == round(float(first["ts"]) * 1000)
    assert {a.name for a in begin.track_event.debug_annotations} == set(first["args"])
    # process and thread names kept: the slice's track is named as its JSON thread
    names = {
        (e["pid"], e.get("tid")): e["args"]["name"]
        for e in chrome
        if e["name"] in ("thread_name", "process_name")
    }
    track = tracks[begin.track_event.track_uuid]
    assert track.name == names[(first["pid"], first["tid"])]
    assert tracks[track.parent_uuid].process.process_name == names[(first["pid"], None)]
    # flows: each JSON flow id starts and terminates once
    starts = [i for e in events for i in e.track_event.flow_ids]
    stops = [i for e in events for i in e.track_event.terminating_flow_ids]
    flow_ids = [e["id"] for e in chrome if e["ph"] == "s"]
    assert flow_ids and sorted(starts) == sorted(stops) == sorted(flow_ids)
    counters = [e for e in events if e.track_event.type == TrackEvent.TYPE_COUNTER]
    series = sum(len(e["args"]) for e in chrome if e["ph"] == "C")
    assert len(counters) == series


def _bytes(events: list[dict[str, Any]]) -> bytes:
    out = io.BytesIO()
    pftrace.write_pftrace(events, out)
    return out.getvalue()


def test_slices_that_overlap_without_nesting_go_to_a_second_track() -> None:
    def x(name: str, ts: float, dur: float) -> dict[str, Any]:
        return {"ph": "X", "pid": 10, "tid": 3, "ts": ts, "dur": dur, "name": name}

    names = {"ph": "M", "pid": 10, "tid": 3, "name": "thread_name", "args": {"name": "DMA q0"}}
    # a nests in outer; b starts inside outer and ends after it: not nestable on one track
    tracks, events = _converted([names, x("outer", 0, 10), x("a", 1, 2), x("b", 5, 10)])
    begins = {
        e.track_event.name: e.track_event.track_uuid
        for e in events
        if e.track_event.type == TrackEvent.TYPE_SLICE_BEGIN
    }
    assert begins["outer"] == begins["a"] != begins["b"]
    assert tracks[begins["b"]].name == "DMA q0 (overlap 2)"
    # on each track, ends come back in the order their slices nest
    for uuid in set(begins.values()):
        stack: list[int] = []
        for e in sorted(
            (e for e in events if e.track_event.track_uuid == uuid),
            key=lambda e: (e.timestamp, e.track_event.type == TrackEvent.TYPE_SLICE_BEGIN),
        ):
            if e.track_event.type == TrackEvent.TYPE_SLICE_BEGIN:
                stack.append(e.timestamp)
            else:
                assert stack, "an end with no open slice"
                stack.pop()
        assert not stack


def test_a_large_run_writes_the_pftrace_beside_the_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(pftrace, "PFTRACE_MIN_EVENTS", 10)
    paths = outputs.write_run_outputs(small_trace(), tmp_path / "big", plots=False)
    assert paths["pftrace"].name == "trace.pftrace"
    _, events = _read(paths["pftrace"].read_bytes())
    assert events
    monkeypatch.setattr(pftrace, "perfetto_available", lambda: False)
    paths = outputs.write_run_outputs(small_trace(), tmp_path / "no-extra", plots=False)
    assert "pftrace" not in paths
    assert "pip install 'hwsim[perfetto]'" in capsys.readouterr().err
    monkeypatch.setattr(pftrace, "PFTRACE_MIN_EVENTS", 10**9)
    assert "pftrace" not in outputs.write_run_outputs(
        small_trace(), tmp_path / "small", plots=False
    )


def test_the_command_converts_a_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs.write_run_outputs(small_trace(), tmp_path / "run", plots=False)
    assert main(["pftrace", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "trace.pftrace").stat().st_size > 0
    assert "wrote" in capsys.readouterr().out
    assert main(["pftrace", str(tmp_path / "nothing-here")]) == 2  # a user error
    assert "no such trace" in capsys.readouterr().err
