"""Expansion of parameter blocks: grid order, zip, seeded random draws, explicit points."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwsim.sweep import load_sweep
from hwsim.sweep.expand import grid_points, product, random_points, zip_points
from hwsim.sweep.spec import RandomRange
from tests.sweep.helpers import write_spec


def test_grid_varies_the_last_path_fastest() -> None:
    assert grid_points({"a": [1, 2], "b": ["x", "y"]}) == [
        {"a": 1, "b": "x"},
        {"a": 1, "b": "y"},
        {"a": 2, "b": "x"},
        {"a": 2, "b": "y"},
    ]


def test_zip_goes_side_by_side_and_checks_lengths() -> None:
    assert zip_points({"a": [1, 2], "b": [3, 4]}) == [{"a": 1, "b": 3}, {"a": 2, "b": 4}]
    with pytest.raises(ValueError, match=r"equal lengths \(a: 2, b: 1\)"):
        zip_points({"a": [1, 2], "b": [3]})


def test_blocks_combine_by_product() -> None:
    assert product([[{"a": 1}, {"a": 2}], [{"b": 3}]]) == [{"a": 1, "b": 3}, {"a": 2, "b": 3}]
    assert product([]) == [{}]


def _ranges(**specs: dict[str, object]) -> dict[str, RandomRange]:
    return {path.replace("__", "."): RandomRange.model_validate(s) for path, s in specs.items()}


def test_random_is_seeded_and_more_samples_keep_the_first() -> None:
    ranges = _ranges(a={"low": 1, "high": 1000, "log": True}, b={"choices": [8, 16, 32]})
    first = random_points(5, 7, ranges, lambda path: path == "b")
    assert first == random_points(5, 7, ranges, lambda path: path == "b")
    assert random_points(9, 7, ranges, lambda path: path == "b")[:5] == first
    assert first != random_points(5, 8, ranges, lambda path: path == "b")
    assert all(1 <= p["a"] <= 1000 and p["b"] in (8, 16, 32) for p in first)


def test_random_rounds_integer_fields_and_snaps_to_steps() -> None:
    ranges = _ranges(n={"low": 1, "high": 100}, s={"low": 1024, "high": 8192, "step": 1024})
    points = random_points(20, 0, ranges, lambda path: path == "n")
    assert all(isinstance(p["n"], int) and 1 <= p["n"] <= 100 for p in points)
    assert all(p["s"] % 1024 == 0 and isinstance(p["s"], float) for p in points)


def test_random_integers_follow_the_config_schema(tmp_path: Path) -> None:
    random = {
        "samples": 6,
        "seed": 3,
        "parameters": {
            "dma.engines": {"low": 1, "high": 16},  # an int field: drawn as ints
            "hbm.bandwidth_bytes_per_ns_per_stack": {"low": 2, "high": 32, "log": True},
        },
    }
    plan = load_sweep(write_spec(tmp_path, parameters={"random": random}))
    engines = [p.config.dma.engines for p in plan.points]
    assert all(isinstance(e, int) for e in engines)
    assert all(2 <= p.config.hbm.bandwidth_bytes_per_ns_per_stack <= 32 for p in plan.points)


def test_all_blocks_in_one_spec(tmp_path: Path) -> None:
    parameters = {
        "grid": {"dma.engines": [2, 4]},
        "zip": {"dma.bandwidth_bytes_per_ns": [2, 4], "dma.start_latency_ns": [50, 100]},
        "points": [{"sbuf.bytes_per_partition": 8192}, {"sbuf.bytes_per_partition": 16384}],
    }
    plan = load_sweep(write_spec(tmp_path, parameters=parameters))
    assert len(plan.points) == 2 * 2 * 2
    assert plan.points[1].params == {
        "dma.engines": 2,
        "dma.bandwidth_bytes_per_ns": 2,
        "dma.start_latency_ns": 50,
        "sbuf.bytes_per_partition": 16384,
    }
