"""The typed run summary: ``to_dict()`` keeps the JSON the design promises, ``from_dict`` reads
it back (also older and JSON-decoded forms), and docs/summary.schema.json describes it.

tests/data/run_summaries_v1.json holds ``hwsim run --json`` output (wall times dropped) and the
plain ``summarize`` dict of three workloads, captured from the untyped dict summary just before
``RunSummary`` replaced it (on this branch the typed ``to_dict()`` reproduced them exactly, key
order included, for six workload x config cases)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hwsim.trace.summary import DmaStats, EngineStats, RunSummary
from hwsim.trace.summary_schema import summary_json_schema
from hwsim.workloads.cli_run import run_workload

ROOT = Path(__file__).parents[2]
CAPTURED = json.loads((ROOT / "tests" / "data" / "run_summaries_v1.json").read_text())
SCHEMA_FILE = ROOT / "docs" / "summary.schema.json"
#: Keys added since the capture (additions keep the schema name; a removal or rename must not).
ADDED_SINCE_CAPTURE = ("numerics_tolerance",)


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


@pytest.mark.parametrize("case", CAPTURED, ids=lambda c: f"{c['workload']}@{c['config']}")
def test_captured_dicts_read_back_and_write_out_unchanged(case):
    for form in ("summary", "cli"):
        old = case[form]
        typed = RunSummary.from_dict(old)
        assert _json(typed.to_dict()) == old
        assert list(typed.to_dict()) == list(old)  # the same key order too
    cli = RunSummary.from_dict(case["cli"])
    assert cli.config == case["config"] and isinstance(cli.engines["tensor"], EngineStats)
    assert cli.dma.queue_bytes and all(isinstance(k, int) for k in cli.dma.queue_bytes)


def _key_tree(value: Any) -> Any:
    """The keys of nested dicts (lists by their first item), for comparing shapes, not values."""
    if isinstance(value, dict):
        return {k: _key_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_key_tree(value[0])] if value and isinstance(value[0], dict) else []
    return None


@pytest.mark.parametrize("case", CAPTURED[:2], ids=lambda c: f"{c['workload']}@{c['config']}")
def test_a_fresh_run_has_the_captured_keys(case):
    _, summary = run_workload(case["workload"], case["config"], numerics=case["numerics"])
    fresh = _json(summary.to_dict())
    for key in ("wall_build_s", "wall_simulate_s"):
        fresh.pop(key)
    if case["numerics"]:
        assert fresh["numerics_tolerance"] > 0
    assert [k for k in fresh if k not in ADDED_SINCE_CAPTURE] == list(case["cli"])
    shape = _key_tree(fresh)
    old_shape = _key_tree(case["cli"])
    for key in ("engines", "flops", "memory", "critical_path", "peaks", "bottleneck_evidence"):
        assert shape[key].keys() == old_shape[key].keys(), key
    assert shape["engines"]["tensor"] == old_shape["engines"]["tensor"]
    assert shape["tags"] == old_shape["tags"]
    assert set(shape["dma"]) == set(old_shape["dma"])
    _validate(fresh, summary_json_schema())


def test_old_rows_missing_newer_fields_take_defaults_and_keep_unknown_keys():
    old = {"total_ns": 12.5, "engines": {"tensor": {"busy_pct": 3.0}}, "dma": {"pieces": 4}}
    old |= {"from_a_later_version": [1, 2]}
    typed = RunSummary.from_dict(old)
    assert typed.total_ns == 12.5 and typed.engines["tensor"].busy_pct == 3.0
    assert typed.engines["tensor"].wait_pct_by_source == {}
    assert typed.dma == DmaStats(pieces=4)
    assert typed.bottleneck == "n/a" and typed.memory_stats("sbuf").peak_bytes == 0
    assert typed.to_dict()["from_a_later_version"] == [1, 2]


def test_schema_file_is_current():
    assert json.loads(SCHEMA_FILE.read_text()) == summary_json_schema(), (
        "regenerate: python -m hwsim.trace.summary_schema > docs/summary.schema.json"
    )


def test_schema_rejects_what_it_should():
    schema = summary_json_schema()
    good = _json(RunSummary().to_dict())
    _validate(good, schema)
    with pytest.raises(AssertionError):
        _validate({**good, "total_ticks": "many"}, schema)
    with pytest.raises(AssertionError):
        _validate({k: v for k, v in good.items() if k != "engines"}, schema)
    bad_engine = {**good, "engines": {"tensor": {**EngineStats().__dict__, "busy": 1}}}
    with pytest.raises(AssertionError):
        _validate(bad_engine, schema)


_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "null": type(None),
}


def _validate(value: Any, schema: dict[str, Any], where: str = "$") -> None:
    """The subset of JSON Schema that summary_json_schema emits (raises AssertionError)."""
    if "anyOf" in schema:
        errors = []
        for option in schema["anyOf"]:
            try:
                _validate(value, option, where)
                return
            except AssertionError as error:
                errors.append(str(error))
        raise AssertionError(f"{where}: matches none of {errors}")
    kind = schema.get("type")
    if kind is not None:
        ok = isinstance(value, _TYPES[kind])
        if kind in ("integer", "number") and isinstance(value, bool):
            ok = False
        assert ok, f"{where}: {value!r} is not {kind}"
    if kind == "object":
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            assert name in value, f"{where}: missing {name}"
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                _validate(item, props[key], f"{where}.{key}")
            elif extra is False:
                raise AssertionError(f"{where}: unexpected key {key}")
            elif isinstance(extra, dict):
                _validate(item, extra, f"{where}.{key}")
            if "propertyNames" in schema:
                assert key.isdigit(), f"{where}: key {key} is not an integer"
    if kind == "array":
        for i, item in enumerate(value):
            _validate(item, schema.get("items", {}), f"{where}[{i}]")


def test_sweep_metric_names_and_values_are_those_of_the_dict_summary():
    """Sweep rows store metrics by dotted path into the JSON form: the names a sweep accepts
    and the values it extracts are the same as with the untyped summary, so old rows match."""
    from hwsim.sweep.metrics import _scalar_paths, extract, summary_metric_names

    old = CAPTURED[0]["summary"]
    names = summary_metric_names()  # from an empty trace's summary
    assert "total_ns" in names and "engines.tensor.busy_pct" in names
    # a real run has every path an empty one has, except evidence named after its own verdict
    assert {n for n in names if not n.startswith("bottleneck_evidence.")} <= set(_scalar_paths(old))
    typed = RunSummary.from_dict(old)
    assert extract(typed.to_dict(), names) == extract(old, names)
