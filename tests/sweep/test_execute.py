"""Running sweeps: results rows, failures recorded without stopping, resume, retry, traces."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hwsim.config import load_config
from hwsim.errors import WorkloadError
from hwsim.sweep import SweepError, load_results, load_sweep, run_sweep, save_program
from hwsim.workloads.gemm import GemmSpec, build_gemm
from tests.sweep.helpers import write_spec
from tests.sweep.workloads_for_tests import LOG_ENV


def _rows(db: Path) -> list[dict[str, Any]]:
    rows = load_results(db)
    return rows.to_dict("records") if hasattr(rows, "to_dict") else rows


def test_a_sweep_writes_one_row_per_config_and_workload(tmp_path: Path) -> None:
    plan = load_sweep(write_spec(tmp_path, workloads=["gemm:32x64x64", "gemm:32x32x128"]))
    db = tmp_path / "r.sqlite"
    outcome = run_sweep(plan, db, jobs=1, progress=False)
    assert (outcome.planned, outcome.ok, outcome.failed, outcome.skipped) == (8, 8, 0, 0)
    rows = _rows(db)
    assert len(rows) == 8
    row = rows[0]
    assert row["workload"] == "gemm:32x32x128:bf16"
    assert row["status"] == "ok" and row["attempts"] == 1 and row["sweep"] == "t"
    assert row["hbm.bandwidth_bytes_per_ns_per_stack"] == 4 and row["dma.engines"] == 2
    assert row["total_ns"] > 0 and row["bottleneck_resource"]
    assert row["wall_s"] >= row["simulate_s"] > 0
    # HBM bandwidth and DMA engines change no lowering-relevant field of this small gemm
    # (2-byte inputs read dma.engines for the transpose choice: one lowering per engine count)
    assert outcome.lowerings == 4


def test_a_failing_run_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, workloads=["workloads_for_tests.py:fails_on_two_engines"])
    outcome = run_sweep(load_sweep(spec), tmp_path / "r.sqlite", jobs=1, progress=False)
    assert (outcome.ok, outcome.failed) == (2, 2)
    failed = [r for r in _rows(tmp_path / "r.sqlite") if r["status"] == "failed"]
    assert {r["dma.engines"] for r in failed} == {2}
    assert all(
        r["error"].startswith("WorkloadError: workloads_for_tests.py:fails_on_two_engines: ")
        and " raised ValueError at workloads_for_tests.py:" in r["error"]
        and r["error"].endswith(": this test workload refuses configs with 2 DMA engines")
        for r in failed
    )
    assert all("Traceback" in str(r["traceback"]) for r in failed)  # the user's code: kept
    assert all(r["total_ns"] is None or r["total_ns"] != r["total_ns"] for r in failed)  # NaN


def test_resume_skips_finished_rows_and_retry_failed_reruns_only_failures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "builds.log"
    monkeypatch.setenv(LOG_ENV, str(log))
    spec = write_spec(
        tmp_path,
        workloads=["workloads_for_tests.py:counted", "workloads_for_tests.py:fails_on_two_engines"],
    )
    db = tmp_path / "r.sqlite"
    first = run_sweep(load_sweep(spec), db, jobs=1, progress=False)
    assert (first.ok, first.failed) == (6, 2)
    assert len(log.read_text().split()) == 4
    again = run_sweep(load_sweep(spec), db, jobs=1, progress=False)
    assert (again.skipped, again.ran) == (8, 0)
    retry = run_sweep(load_sweep(spec), db, jobs=1, progress=False, retry_failed=True)
    assert (retry.skipped, retry.ran, retry.failed) == (6, 2, 2)
    assert len(log.read_text().split()) == 4  # the counted workload never ran again
    attempts = {(r["workload"], r["status"]): r["attempts"] for r in _rows(db)}
    assert attempts[("workloads_for_tests.py:counted", "ok")] == 1
    assert attempts[("workloads_for_tests.py:fails_on_two_engines", "failed")] == 2


def test_asking_for_numerics_reruns_timing_only_rows(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    run_sweep(load_sweep(write_spec(tmp_path)), db, jobs=1, progress=False)
    spec = write_spec(tmp_path, numerics=True, metrics=["total_ns", "max_abs_err", "numerics_ok"])
    outcome = run_sweep(load_sweep(spec), db, jobs=1, progress=False)
    assert outcome.ran == 4
    rows = _rows(db)
    assert all(r["numerics"] == 1 and r["numerics_ok"] == 1 for r in rows)
    assert all(r["max_abs_err"] < 1.0 for r in rows)


def test_traces_are_written_only_when_asked(tmp_path: Path) -> None:
    parameters = {"points": [{"dma.engines": 2}]}
    plain = write_spec(tmp_path, name="plain", parameters=parameters)
    run_sweep(load_sweep(plain), tmp_path / "plain.sqlite", jobs=1, progress=False)
    assert not (tmp_path / "plain-traces").exists()
    traced = write_spec(tmp_path, name="traced", parameters=parameters, traces=True)
    run_sweep(load_sweep(traced), tmp_path / "traced.sqlite", jobs=1, progress=False)
    (row,) = _rows(tmp_path / "traced.sqlite")
    trace_dir = Path(str(row["trace_dir"]))
    assert trace_dir.parent.parent == tmp_path / "traced-traces"
    assert (trace_dir / "trace.json").is_file() and (trace_dir / "summary.json").is_file()


def test_two_local_processes(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, workloads=["workloads_for_tests.py:fails_on_two_engines"])
    outcome = run_sweep(load_sweep(spec), tmp_path / "r.sqlite", jobs=2, progress=False)
    assert (outcome.ok, outcome.failed) == (2, 2)
    workers = {r["worker"] for r in _rows(tmp_path / "r.sqlite")}
    assert len(workers) >= 1 and all(":" in str(w) for w in workers)


def test_a_killed_worker_stops_the_sweep_and_keeps_finished_rows(tmp_path: Path) -> None:
    parameters = {"points": [{"dma.engines": 4}, {"dma.engines": 8}, {"dma.engines": 2}]}
    spec = write_spec(
        tmp_path,
        parameters=parameters,
        workloads=["workloads_for_tests.py:kills_worker_on_two_engines"],
    )
    db = tmp_path / "r.sqlite"
    with pytest.raises(SweepError, match="a worker process died") as info:
        run_sweep(load_sweep(spec), db, jobs=2, progress=False)
    assert "running the same command resumes" in str(info.value)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        outcome = conn.execute("SELECT outcome FROM invocations").fetchone()[0]
    assert outcome.startswith("error: SweepError: a worker process died")


def test_unknown_backend_and_missing_ray_are_clear_errors(tmp_path: Path) -> None:
    plan = load_sweep(write_spec(tmp_path))
    with pytest.raises(SweepError, match="unknown backend 'spark'; valid: loky, dask, ray"):
        run_sweep(plan, tmp_path / "r.sqlite", backend="spark", progress=False)
    try:
        import ray  # noqa: F401
    except ImportError:
        with pytest.raises(SweepError, match=r"pip install 'hwsim\[ray\]'"):
            run_sweep(plan, tmp_path / "r.sqlite", backend="ray", progress=False)


def test_a_saved_program_is_lowered_once_and_simulated_on_every_config(tmp_path: Path) -> None:
    program = build_gemm(GemmSpec.parse("gemm:32x64x64"), load_config("tiny"))
    save_program(program, tmp_path / "gemm.hwprog")
    spec = write_spec(tmp_path, workloads=["gemm.hwprog"])
    outcome = run_sweep(load_sweep(spec), tmp_path / "r.sqlite", jobs=1, progress=False)
    assert (outcome.ok, outcome.lowerings) == (4, 1)  # a saved program reads no config field
    assert {r["workload"] for r in _rows(tmp_path / "r.sqlite")} == {"gemm.hwprog"}
    with pytest.raises(WorkloadError, match=r"saved programs end in \.hwprog"):
        save_program(program, tmp_path / "gemm.pkl")
