"""Sweep specs: every mistake is reported before anything runs, with its dotted path and a fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwsim.config import config_hash, load_config
from hwsim.sweep import SpecError, load_sweep
from tests.sweep.helpers import write_spec


def _error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_sweep(path)
    return str(info.value)


def test_valid_spec_builds_every_config(tmp_path: Path) -> None:
    plan = load_sweep(write_spec(tmp_path))
    assert plan.runs == 4
    assert plan.parameters == ["hbm.bandwidth_bytes_per_ns_per_stack", "dma.engines"]
    assert [w.key for w in plan.workloads] == ["gemm:32x64x64:bf16"]  # canonical name
    first = plan.points[0]
    assert first.params == {"hbm.bandwidth_bytes_per_ns_per_stack": 4, "dma.engines": 2}
    expected = load_config("tiny", first.params)
    assert first.config == expected
    assert first.config_hash == config_hash(expected)


def test_repeated_configs_are_dropped(tmp_path: Path) -> None:
    # dma.engines 4 is tiny's own value: the point {} and {dma.engines: 4} are one config
    spec = write_spec(tmp_path, parameters={"points": [{}, {"dma.engines": 4}, {"dma.engines": 2}]})
    plan = load_sweep(spec)
    assert (len(plan.points), plan.duplicates) == (2, 1)


def test_unknown_top_level_key_suggests_the_right_one(tmp_path: Path) -> None:
    message = _error(tmp_path, "name: x\nparamters: {}\nworkloads: [softmax]\n")
    assert "bad.yaml: paramters: unknown key (did you mean 'parameters'?)" in message


def test_unknown_key_in_a_block(tmp_path: Path) -> None:
    text = "name: x\nparameters: {gird: {dma.engines: [1]}}\nworkloads: [softmax]\n"
    assert "parameters.gird: unknown key (did you mean 'grid'?)" in _error(tmp_path, text)


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    message = _error(tmp_path, "name: x\nworkloads: [softmax\n")
    assert "bad.yaml:3: not valid YAML at column 1 (" in message


def test_all_path_metric_and_workload_errors_come_together(tmp_path: Path) -> None:
    text = """
name: x
base: tiny
parameters:
  grid: {tensor_engine.rowz: [16], tensr_engine.cols: [8], sbuf: [1]}
  zip: {dma.engines: [1, 2], dma.bandwidth_bytes_per_ns: [1, 2]}
  points: [{dma.engines: 3}, {tensor_engine.cycles_multiplier_by_dtype.bf61: 2}]
workloads: [sofmax, gemm:64x64x64]
metrics: [total_nss, max_abs_err]
"""
    message = _error(tmp_path, text)
    assert (
        "parameters.grid.tensor_engine.rowz: unknown config field 'rowz' in 'tensor_engine' "
        "(did you mean 'tensor_engine.rows'?)" in message
    )
    assert "(did you mean 'tensor_engine.cols'?)" in message
    assert "parameters.grid.sbuf: 'sbuf' is a section; name one of its fields" in message
    assert "parameters.points[0].dma.engines: 'dma.engines' is already set by parameters.zip" in (
        message
    )
    assert (
        "unknown key 'bf61' of table 'tensor_engine.cycles_multiplier_by_dtype' (did you "
        "mean 'bf16'?)" in message
    )
    assert "workloads[0]: unknown workload 'sofmax' (did you mean 'softmax'?)" in message
    assert "metrics[0]: unknown metric 'total_nss' (did you mean 'total_ns'?)" in message
    assert "metrics[1]: 'max_abs_err' needs 'numerics: true'" in message


def test_values_are_validated_by_building_every_config(tmp_path: Path) -> None:
    text = """
name: x
base: tiny
parameters:
  grid: {tensor_engine.rows: [16, 64, 2000], dma.engines: [4, 0]}
workloads: [gemm:32x32x32]
"""
    message = _error(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'bad.yaml'}: 5 of 6 configs are invalid: ")
    # the first point with each problem, with the config's own error text
    assert (
        "point {tensor_engine.rows: 16, dma.engines: 0} (and 1 more point): dma.engines: input "
        "should be greater than or equal to 1, got 0 (allowed: 1 <= value <= 256)" in message
    )
    assert (
        "point {tensor_engine.rows: 64, dma.engines: 4}: tensor_engine.rows (64) exceeds "
        "sbuf.partitions (32)" in message
    )
    assert "tensor_engine.rows: input should be less than or equal to 1024, got 2000" in message


def test_zip_lists_must_match(tmp_path: Path) -> None:
    text = (
        "name: x\nparameters: {zip: {dma.engines: [1, 2], sbuf.partitions: [32]}}\n"
        "workloads: [softmax]\n"
    )
    assert "zip lists must have equal lengths (dma.engines: 2, sbuf.partitions: 1)" in _error(
        tmp_path, text
    )


def test_random_ranges_are_checked(tmp_path: Path) -> None:
    text = """
name: x
parameters:
  random: {samples: 2, parameters: {dma.engines: {low: 4}, hbm.stacks: {low: 4, high: 2}}}
workloads: [softmax]
"""
    message = _error(tmp_path, text)
    assert "parameters.random.parameters.dma.engines: give choices: [...] or both low and high" in (
        message
    )
    assert "hbm.stacks: low (4.0) is above high (2.0)" in message


def test_wrong_types_and_missing_keys(tmp_path: Path) -> None:
    message = _error(tmp_path, "name: x\nnumerics: 'yes'\nmetrics: []\n")
    assert "numerics: input should be a valid boolean, got 'yes'" in message
    assert "workloads: missing required key" in message
    assert "metrics: list should have at least 1 item" in message


def test_missing_base_and_workload_file(tmp_path: Path) -> None:
    text = "name: x\nbase: trn9\nworkloads: [kernels.py:fast]\n"
    message = _error(tmp_path, text)
    assert "base: trn9: not a preset (did you mean 'trn3'?)" in message
    assert "workloads[0]: workload file 'kernels.py' not found" in message


def test_file_workload_must_define_the_name(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, workloads=["workloads_for_tests.py:nope"])
    with pytest.raises(SpecError, match=r"workloads_for_tests\.py defines no 'nope'"):
        load_sweep(spec)
