"""Killing a sweep mid-way (SIGKILL of the whole process group, or Ctrl-C) loses no finished row,
leaves a consistent database, and a rerun finishes the rest without running anything twice."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from hwsim.sweep import load_sweep, run_sweep
from tests.sweep.helpers import write_spec
from tests.sweep.workloads_for_tests import LOG_ENV, SLEEP_ENV

ROOT = Path(__file__).resolve().parents[2]
RUNS = 12
#: Rows that must be finished before the sweep is killed.
FINISHED_BEFORE_KILL = 3
#: Seconds each run of the killed sweep sleeps: the 9 runs left take >= 1.3 s even on 2 workers,
#: so a busy machine does not let the sweep finish before the test's signal lands.
BUILD_SLEEP_S = 0.3
# Ctrl-C raises KeyboardInterrupt even if this test was started with SIGINT ignored (as
# background jobs of a non-interactive shell are, and their children inherit)
_SWEEP = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from hwsim.sweep import load_sweep, run_sweep; "
    "run_sweep(load_sweep(sys.argv[1]), sys.argv[2], jobs=int(sys.argv[3]), progress=False)"
)


def _start(spec: Path, db: Path, jobs: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, LOG_ENV: str(log), SLEEP_ENV: str(BUILD_SLEEP_S), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", _SWEEP, str(spec), str(db), str(jobs)],
        env=env,
        cwd=ROOT,
        start_new_session=True,  # its own process group: the signal reaches its workers too
        stderr=subprocess.PIPE,
    )


def _ok_rows(db: Path) -> dict[tuple[str, str], tuple[str, int, float]]:
    if not db.exists():
        return {}
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            rows = conn.execute(
                "SELECT config_hash, workload, finished_at, attempts, total_ns FROM runs "
                "WHERE status = 'ok'"
            ).fetchall()
    except sqlite3.OperationalError:  # the table is not created yet
        return {}
    return {(h, w): (t, a, ns) for h, w, t, a, ns in rows}


def _kill_after_some_rows(proc: subprocess.Popen[bytes], db: Path, sig: int) -> None:
    deadline = time.monotonic() + 60
    while len(_ok_rows(db)) < FINISHED_BEFORE_KILL:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, "the sweep wrote no rows in 60 s"
        time.sleep(0.02)
    os.killpg(proc.pid, sig)
    proc.wait(timeout=30)


@pytest.mark.parametrize(("sig", "jobs"), [(signal.SIGKILL, 2), (signal.SIGINT, 1)])
def test_killed_sweep_resumes_without_losing_or_repeating_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: int, jobs: int
) -> None:
    parameters = {"grid": {"dma.engines": [1, 2, 3, 4], "dma.queues_per_engine": [2, 3, 4]}}
    spec = write_spec(tmp_path, parameters=parameters, workloads=["workloads_for_tests.py:counted"])
    db, log = tmp_path / "r.sqlite", tmp_path / "builds.log"

    proc = _start(spec, db, jobs, log)
    _kill_after_some_rows(proc, db, sig)
    assert proc.returncode != 0, "the sweep finished before it was killed"
    before = _ok_rows(db)
    assert FINISHED_BEFORE_KILL <= len(before) < RUNS
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        if sig == signal.SIGINT:  # Ctrl-C is caught: the invocation says so
            assert conn.execute("SELECT outcome FROM invocations").fetchone() == ("interrupted",)

    monkeypatch.setenv(LOG_ENV, str(log))
    outcome = run_sweep(load_sweep(spec), db, jobs=1, progress=False)
    after = _ok_rows(db)
    assert len(after) == RUNS and outcome.skipped == len(before)
    assert all(after[key] == value for key, value in before.items())  # untouched, attempts 1
    assert {attempts for _, attempts, _ in after.values()} == {1}
    # each config's build is logged once per run: finished ones never ran again; only runs in
    # flight when the sweep was killed ran twice (per worker: the one it was running, and one
    # whose result was on its way to the parent)
    runs = Counter(log.read_text().split())
    assert set(runs) == {key[0] for key in after}
    assert all(runs[config] == 1 for config, _ in before)
    assert sum(runs.values()) - RUNS <= 2 * jobs
