"""bench/speed.py --json on its tiny size: one JSON object with the issue's keys, of the right
types (the figures themselves are not checked: they depend on the machine and its load)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "speed.py"
NUMBER_KEYS = (
    "sim_items_per_s",
    "bare_simpy_events_per_s",
    "build_instructions_per_s",
    "summary_over_sim",
    "numerics_over_numpy",
    "initcheck_cost",
    "trace_events_per_s",
    "trace_write_over_sim",
)
LARGE_KEYS = ("million_instr_end_to_end_s", "million_instr_peak_rss_mb")


@pytest.fixture(scope="module")
def speed():
    spec = importlib.util.spec_from_file_location("bench_speed", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def _json_of(speed, capsys, *flags: str) -> dict:
    speed.main(["--json", "--size", "tiny", "--trials", "1", *flags])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1, lines  # one JSON object, nothing else on stdout
    report = json.loads(lines[0])
    assert isinstance(report, dict)
    return report


def _positive_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def test_json_has_the_keys_with_large_ones_null_without_large(speed, capsys):
    report = _json_of(speed, capsys)
    for key in NUMBER_KEYS:
        assert _positive_number(report[key]), (key, report[key])
    for key in LARGE_KEYS:
        assert report[key] is None
    assert report["sim_items"] > report["instructions"] > 0  # items count DMA pieces too
    # a slice per instruction and per DMA transfer at least, beside the metadata and counters
    assert report["trace_events"] > report["instructions"]
    assert isinstance(report["machine_loaded"], bool)


def test_json_large_runs_in_a_subprocess_and_reports_time_and_rss(speed, capsys):
    report = _json_of(speed, capsys, "--large", "--skip-numerics")
    assert report["numerics_over_numpy"] is None
    for key in LARGE_KEYS:
        assert _positive_number(report[key]), (key, report[key])
    assert report["large_instructions"] >= speed.SIZES["tiny"][1]
    # the peak of a process that imported numpy and hwsim is tens of MB at least, not KiB or GB
    assert 20 < report["million_instr_peak_rss_mb"] < 100_000
    assert report["large_trace_events"] > report["large_instructions"]
    assert _positive_number(report["large_trace_s"])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM is Linux's")
def test_the_large_run_reports_its_own_peak_not_its_parents(speed):
    """The large run's child must report its own peak: ``ru_maxrss`` in a child started by
    ``subprocess`` (vfork, exec) holds its parent's peak, so the 1M run once reported the
    parent's numerics peak as its own."""
    import resource
    import subprocess

    import numpy as np

    block = np.ones(600 * 2**20 // 8)  # 600 MB, every page touched
    assert block.sum() > 0
    del block
    parent_peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert parent_peak_mb >= 600
    code = (
        f"import sys; sys.path.insert(0, {str(BENCH.parent)!r}); import speed; "
        "print(speed.own_peak_rss_mb())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    child_peak_mb = float(done.stdout.strip().splitlines()[-1])
    # The child imports numpy and hwsim (tens to a few hundred MB) and allocates nothing else.
    assert 20 < child_peak_mb < 450, (child_peak_mb, parent_peak_mb)
