"""A pure-Python validator of Chrome Trace Event JSON: what Perfetto and chrome://tracing need.

Checks: top-level structure (a list of events, or an object with a ``traceEvents`` list); the
fields each phase requires, with types; non-negative ``ts``/``dur``; ``process_name`` metadata for
every pid and ``thread_name`` for every (pid, tid) that carries slices or flows; slices on one
track nest (no partial overlap); every flow step/end has a flow start with the same (cat, id), and
every flow event lies on a slice it can bind to; counter values are finite numbers.

``python -m hwsim.trace.validate FILE`` prints the problems and exits 1 if there are any.
"""

from __future__ import annotations

import math
import sys
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from hwsim import strict_json

#: Slack when comparing float µs: ts + dur is summed in binary floating point.
EPSILON_US = 1e-6
MAX_MESSAGES = 50
_KNOWN_PHASES = set("BEXiICMstfbenPONDRSTFcvV()")
_SLICE_PHASES = {"X", "B", "E"}
_FLOW_PHASES = {"s", "t", "f"}
_THREAD_PHASES = _SLICE_PHASES | _FLOW_PHASES | {"i", "I"}
_METADATA = {
    "process_name": "name",
    "thread_name": "name",
    "process_sort_index": "sort_index",
    "thread_sort_index": "sort_index",
    "process_labels": "labels",
    "process_uptime_seconds": None,
    "num_cpus": None,
    "trace_buffer_overran": None,
}


def validate_chrome_trace(trace: str | Path | dict[str, Any] | list[Any]) -> list[str]:
    """Problems found in a Chrome trace (a path, or the loaded JSON); an empty list means valid."""
    checker = _Checker()
    if isinstance(trace, str | Path):
        checker.check_file(Path(trace))
    else:
        checker.check_object(trace)
    return checker.report()


class _Track:
    """Slices of one (pid, tid) as parallel arrays (ts, end) plus names, for nesting checks."""

    __slots__ = ("ends", "names", "open_b", "starts")

    def __init__(self) -> None:
        self.starts = array("d")
        self.ends = array("d")
        self.names: list[str] = []
        self.open_b: list[tuple[float, str]] = []

    def add(self, ts: float, end: float, name: str) -> None:
        self.starts.append(ts)
        self.ends.append(end)
        self.names.append(name)


class _Checker:
    def __init__(self) -> None:
        self.errors: list[str] = []
        self.error_count = 0
        self.events = 0
        self.process_names: set[Any] = set()
        self.thread_names: set[tuple[Any, Any]] = set()
        self.used_pids: dict[Any, int] = {}
        self.used_threads: dict[tuple[Any, Any], int] = {}
        self.tracks: dict[tuple[Any, Any], _Track] = {}
        self.flow_starts: set[tuple[str, Any]] = set()
        self.flow_ends: list[tuple[str, Any, int]] = []
        self.flow_points: list[tuple[Any, Any, float, str, int]] = []

    # ---- entry points -------------------------------------------------------------------------
    def check_file(self, path: Path) -> None:
        from hwsim.trace.chrome import is_line_format, iter_events

        if not path.is_file():
            self.error(f"{path}: no such file")
            return
        try:
            if is_line_format(path):
                self.check_events(iter_events(path))  # streamed: never one JSON document
            else:
                with path.open(encoding="utf-8") as f:
                    self.check_object(strict_json.loads(f.read()))
        except (ValueError, UnicodeDecodeError) as exc:
            self.error(f"{path}: not valid JSON: {exc}")

    def check_object(self, obj: Any) -> None:
        if isinstance(obj, dict):
            if "traceEvents" not in obj:
                self.error("top level: an object must have a 'traceEvents' list")
                return
            unit = obj.get("displayTimeUnit")
            if unit is not None and unit not in ("ms", "ns"):
                self.error(f"top level: displayTimeUnit must be 'ms' or 'ns', not {unit!r}")
            events = obj["traceEvents"]
            if not isinstance(events, list):
                self.error("top level: 'traceEvents' must be a list")
                return
        elif isinstance(obj, list):
            events = obj
        else:
            self.error(
                f"top level: expected a list of events or an object, got {type(obj).__name__}"
            )
            return
        self.check_events(events)

    def check_events(self, events: Iterable[Any]) -> None:
        for index, event in enumerate(events):
            self.events += 1
            self.check_event(index, event)
        self.finish()

    def error(self, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_MESSAGES:
            self.errors.append(message)

    def report(self) -> list[str]:
        if self.error_count > len(self.errors):
            return [*self.errors, f"... and {self.error_count - len(self.errors)} more problems"]
        return self.errors

    # ---- one event ----------------------------------------------------------------------------
    def check_event(self, index: int, event: Any) -> None:
        if not isinstance(event, dict):
            self.error(f"event {index}: not an object")
            return
        ph = event.get("ph")
        where = f"event {index} (ph {ph!r}, name {event.get('name')!r})"
        if not isinstance(ph, str) or ph not in _KNOWN_PHASES:
            self.error(f"{where}: unknown or missing phase 'ph'")
            return
        pid = event.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool):
            self.error(f"{where}: 'pid' must be an integer")
            return
        if ph == "M":
            self.check_metadata(where, event)
            return
        ts = self.number(where, event, "ts")
        if ts is None:
            return
        self.used_pids.setdefault(pid, index)
        tid = event.get("tid")
        scope = event.get("s", "t")
        needs_tid = ph in _THREAD_PHASES and not (ph in ("i", "I") and scope in ("g", "p"))
        if needs_tid:
            if not isinstance(tid, int) or isinstance(tid, bool):
                self.error(f"{where}: 'tid' must be an integer")
                return
            self.used_threads.setdefault((pid, tid), index)
        if ph in ("X", "B", "i", "I", "C") and not isinstance(event.get("name"), str):
            self.error(f"{where}: 'name' must be a string")
            return
        if ph == "X":
            dur = self.number(where, event, "dur")
            if dur is not None:
                self.track(pid, tid).add(ts, ts + dur, event["name"])
        elif ph == "B":
            self.track(pid, tid).open_b.append((ts, event["name"]))
        elif ph == "E":
            opened = self.track(pid, tid).open_b
            if not opened:
                self.error(f"{where}: end 'E' without a matching begin 'B' on pid {pid} tid {tid}")
            else:
                start, name = opened.pop()
                if ts < start:
                    self.error(f"{where}: 'E' at {ts} before its 'B' at {start}")
                else:
                    self.track(pid, tid).add(start, ts, name)
        elif ph == "C":
            self.check_counter(where, event)
        elif ph in _FLOW_PHASES:
            self.check_flow(index, where, event, pid, tid, ts)

    def number(self, where: str, event: dict[str, Any], key: str) -> float | None:
        value = event.get(key)
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
        ):
            self.error(f"{where}: '{key}' must be a finite number, got {value!r}")
            return None
        if value < 0:
            self.error(f"{where}: '{key}' is negative ({value})")
            return None
        return float(value)

    def track(self, pid: Any, tid: Any) -> _Track:
        track = self.tracks.get((pid, tid))
        if track is None:
            track = self.tracks[pid, tid] = _Track()
        return track

    def check_metadata(self, where: str, event: dict[str, Any]) -> None:
        name = event.get("name")
        if name not in _METADATA:
            self.error(f"{where}: unknown metadata name (expected one of {', '.join(_METADATA)})")
            return
        args = event.get("args")
        key = _METADATA[name]
        if key is not None and (not isinstance(args, dict) or key not in args):
            self.error(f"{where}: metadata '{name}' needs args.{key}")
            return
        if name.endswith("sort_index") and not isinstance(args["sort_index"], int):  # type: ignore[index]
            self.error(f"{where}: args.sort_index must be an integer")
        if name.startswith("thread_"):
            tid = event.get("tid")
            if not isinstance(tid, int) or isinstance(tid, bool):
                self.error(f"{where}: thread metadata needs an integer 'tid'")
                return
            if name == "thread_name":
                self.thread_names.add((event["pid"], tid))
        elif name == "process_name":
            self.process_names.add(event["pid"])

    def check_counter(self, where: str, event: dict[str, Any]) -> None:
        args = event.get("args")
        if not isinstance(args, dict) or not args:
            self.error(f"{where}: a counter needs a non-empty 'args' object of series values")
            return
        for key, value in args.items():
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not ok or not math.isfinite(value):
                self.error(f"{where}: counter series '{key}' is not a finite number: {value!r}")

    def check_flow(
        self, index: int, where: str, event: dict[str, Any], pid: Any, tid: Any, ts: float
    ) -> None:
        flow_id = event.get("id")
        if not isinstance(flow_id, int | str) or isinstance(flow_id, bool):
            self.error(f"{where}: a flow event needs an 'id'")
            return
        cat = str(event.get("cat", ""))
        ph = event["ph"]
        bind = event.get("bp")
        if bind is not None and bind != "e":
            self.error(f"{where}: binding point 'bp' must be 'e' if given, not {bind!r}")
        if ph == "s":
            self.flow_starts.add((cat, flow_id))
        else:
            self.flow_ends.append((cat, flow_id, index))
        mode = "enclosing" if ph == "s" or bind == "e" else "next"
        self.flow_points.append((pid, tid, ts, mode, index))

    # ---- whole-trace checks -------------------------------------------------------------------
    def finish(self) -> None:
        for pid, index in self.used_pids.items():
            if pid not in self.process_names:
                self.error(f"pid {pid} (first used by event {index}) has no process_name metadata")
        for (pid, tid), index in self.used_threads.items():
            if (pid, tid) not in self.thread_names:
                self.error(
                    f"pid {pid} tid {tid} (first used by event {index}) has no thread_name metadata"
                )
        for (pid, tid), track in self.tracks.items():
            for start, name in track.open_b:
                self.error(f"pid {pid} tid {tid}: 'B' of '{name}' at {start} never ends")
            self.check_nesting(pid, tid, track)
        for cat, flow_id, index in self.flow_ends:
            if (cat, flow_id) not in self.flow_starts:
                self.error(
                    f"event {index}: flow end/step id {flow_id!r} (cat {cat!r}) has no start 's'"
                )
        self.check_flow_binding()

    def check_nesting(self, pid: Any, tid: Any, track: _Track) -> None:
        order = sorted(range(len(track.starts)), key=lambda i: (track.starts[i], -track.ends[i]))
        stack: list[int] = []
        reported = 0
        for i in order:
            start, end = track.starts[i], track.ends[i]
            while stack and track.ends[stack[-1]] <= start + EPSILON_US:
                stack.pop()
            if stack and end > track.ends[stack[-1]] + EPSILON_US:
                outer = stack[-1]
                reported += 1
                if reported <= 3:
                    self.error(
                        f"pid {pid} tid {tid}: slice '{track.names[i]}' [{start}, {end}) overlaps "
                        f"'{track.names[outer]}' [{track.starts[outer]}, {track.ends[outer]}) "
                        "without nesting in it"
                    )
                continue
            stack.append(i)

    def check_flow_binding(self) -> None:
        sorted_tracks: dict[tuple[Any, Any], tuple[list[float], list[float]]] = {}
        for pid, tid, ts, mode, index in self.flow_points:
            key = (pid, tid)
            if key not in sorted_tracks:
                track = self.tracks.get(key)
                pairs = sorted(zip(track.starts, track.ends, strict=True)) if track else []
                starts = [s for s, _ in pairs]
                reach = _running_max([e for _, e in pairs])
                sorted_tracks[key] = (starts, reach)
            starts, reach = sorted_tracks[key]
            k = bisect_right(starts, ts + EPSILON_US)
            if mode == "enclosing":
                bound = k > 0 and reach[k - 1] >= ts - EPSILON_US
            else:
                bound = k < len(starts) or (k > 0 and reach[k - 1] >= ts - EPSILON_US)
            if not bound:
                self.error(
                    f"event {index}: flow event at {ts} on pid {pid} tid {tid} lies on no slice "
                    "it could bind to"
                )


def _running_max(values: Sequence[float]) -> list[float]:
    out, best = [], -math.inf
    for v in values:
        best = max(best, v)
        out.append(best)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m hwsim.trace.validate TRACE.json", file=sys.stderr)
        return 2
    problems = validate_chrome_trace(args[0])
    if problems:
        for message in problems:
            print(f"{args[0]}: {message}")
        return 1
    print(f"{args[0]}: valid Chrome trace")
    return 0


if __name__ == "__main__":
    sys.exit(main())
