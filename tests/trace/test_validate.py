"""The Chrome trace validator accepts good traces and names each class of bad one."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from synthetic_traces import small_trace

from hwsim.trace.chrome import write_chrome_trace
from hwsim.trace.validate import main, validate_chrome_trace

META = [
    {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "p"}},
    {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "t"}},
    {"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": "u"}},
]
GOOD = [
    *META,
    {"ph": "X", "pid": 1, "tid": 1, "ts": 0.0, "dur": 10.0, "name": "outer"},
    {"ph": "X", "pid": 1, "tid": 1, "ts": 2.0, "dur": 3.0, "name": "inner"},
    {"ph": "X", "pid": 1, "tid": 1, "ts": 10.0, "dur": 5.0, "name": "next"},
    {"ph": "B", "pid": 1, "tid": 2, "ts": 1.0, "name": "b"},
    {"ph": "E", "pid": 1, "tid": 2, "ts": 4.0},
    {"ph": "s", "pid": 1, "tid": 1, "ts": 3.0, "id": 7, "cat": "c", "name": "f"},
    {"ph": "f", "pid": 1, "tid": 2, "ts": 2.0, "id": 7, "cat": "c", "name": "f", "bp": "e"},
    {"ph": "C", "pid": 1, "ts": 0.5, "name": "bw", "args": {"GB/s": 12.5}},
]


def problems(events: list, **top) -> list[str]:
    return validate_chrome_trace({"traceEvents": events, **top})


def test_accepts_good_traces(tmp_path: Path) -> None:
    assert problems(GOOD) == []
    assert validate_chrome_trace(GOOD) == []  # the bare list form
    assert validate_chrome_trace(write_chrome_trace(small_trace(), tmp_path / "t.json")) == []


def replace(index: int, **changes) -> list:
    events = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is None:
            events[index].pop(key, None)
        else:
            events[index][key] = value
    return events


@pytest.mark.parametrize(
    ("events", "message"),
    [
        (replace(3, dur=None), "'dur' must be a finite number"),
        (replace(3, ts=-1.0), "'ts' is negative"),
        (replace(3, dur=-2.0), "'dur' is negative"),
        (replace(3, ts="soon"), "'ts' must be a finite number"),
        (replace(3, pid=None), "'pid' must be an integer"),
        (replace(3, tid=None), "'tid' must be an integer"),
        (replace(3, name=None), "'name' must be a string"),
        (replace(3, ph="Q"), "unknown or missing phase"),
        (replace(4, dur=9.0), "overlaps 'outer'"),
        (replace(10, args={"GB/s": "fast"}), "counter series 'GB/s' is not a finite number"),
        (replace(10, args={}), "a counter needs a non-empty 'args'"),
        (replace(9, id=8), "flow end/step id 8 (cat 'c') has no start"),
        (replace(9, ts=30.0), "lies on no slice"),
        (replace(9, bp="x"), "binding point 'bp' must be 'e'"),
        (replace(0, name="process_nmae"), "unknown metadata name"),
        (replace(0, args={"title": "p"}), "metadata 'process_name' needs args.name"),
        (GOOD[1:], "pid 1 (first used by event 2) has no process_name metadata"),
        (
            [e for i, e in enumerate(GOOD) if i != 2],
            "pid 1 tid 2 (first used by event 5) has no thread_name",
        ),
        ([e for i, e in enumerate(GOOD) if i != 7], "'B' of 'b' at 1.0 never ends"),
        ([e for i, e in enumerate(GOOD) if i != 6], "end 'E' without a matching begin"),
        ([*GOOD, 3], "not an object"),
    ],
)
def test_rejects_each_class_of_bad_trace(events: list, message: str) -> None:
    found = problems(events)
    assert any(message in p for p in found), found


def test_rejects_bad_top_level() -> None:
    assert any("'traceEvents' list" in p for p in validate_chrome_trace({"events": []}))
    assert any("must be a list" in p for p in validate_chrome_trace({"traceEvents": {}}))
    assert any("displayTimeUnit" in p for p in problems(GOOD, displayTimeUnit="s"))
    assert any("expected a list of events" in p for p in validate_chrome_trace(3))  # type: ignore[arg-type]


def test_rejects_broken_files(tmp_path: Path) -> None:
    path = write_chrome_trace(small_trace(), tmp_path / "t.json")
    lines = path.read_text().splitlines(keepends=True)
    cut = tmp_path / "cut.json"
    cut.write_text("".join(lines[:-1]))  # no closing ]}
    assert any("truncated" in p for p in validate_chrome_trace(cut))
    bad = tmp_path / "bad.json"
    bad.write_text("".join([*lines[:10], '{"ph": "X", oops},\n', *lines[10:]]))
    assert any("line 11" in p for p in validate_chrome_trace(bad))
    assert any("no such file" in p for p in validate_chrome_trace(tmp_path / "missing.json"))


def test_many_problems_are_capped() -> None:
    events = [*META] + [{"ph": "X", "pid": 1, "tid": 1, "ts": -1.0, "dur": 1.0, "name": "x"}] * 80
    found = problems(events)
    assert len(found) == 51 and found[-1] == "... and 30 more problems"


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_chrome_trace(small_trace(), tmp_path / "t.json")
    assert main([str(good)]) == 0
    assert "valid Chrome trace" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": -1, "name": "x"}]}'
    )
    assert main([str(bad)]) == 1
    out = capsys.readouterr().out
    assert "'dur' is negative" in out and "no process_name" in out
