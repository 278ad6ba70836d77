"""Runners sharing one sweep database: every run is done exactly once, and the runs a dead or
frozen runner held are taken over when its lease ends (real processes, real leases)."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from hwsim.sweep import execute, load_results, load_sweep, run_sweep
from hwsim.sweep.lowering import ProgramCache
from tests.sweep.helpers import write_spec
from tests.sweep.workloads_for_tests import GATE_ENV, LOG_ENV, SLEEP_ENV

ROOT = Path(__file__).resolve().parents[2]
#: 2 x 4 configs of the logged gemm: each build appends its config hash to the log.
PARAMETERS = {"grid": {"dma.engines": [1, 2, 3, 4], "dma.queues_per_engine": [2, 3]}}
RUNS = 8
#: The lease of a dead runner on this host, which must not be waited for.
DEAD_LEASE_S = 40.0
_SWEEP = (
    "import sys; from hwsim.sweep import load_sweep, run_sweep; "
    "run_sweep(load_sweep(sys.argv[1]), sys.argv[2], jobs=1, progress=False, "
    "lease_s=float(sys.argv[3]))"
)


def _env(log: Path, sleep_s: float) -> dict[str, str]:
    return {**os.environ, LOG_ENV: str(log), SLEEP_ENV: str(sleep_s), "PYTHONPATH": str(ROOT)}


def _rows(db: Path) -> dict[str, tuple[str, int, str]]:
    """config hash -> (status, attempts, runner) of the rows written so far."""
    found = _select(db, "SELECT config_hash, status, attempts, runner FROM runs")
    return {h: (s, a, r) for h, s, a, r in found}


def _select(db: Path, query: str) -> list[tuple[Any, ...]]:
    """The rows of ``query`` on the database as it is now; none before a runner made it. Read
    only: a plain ``sqlite3.connect`` would make an empty file there for the runners to find."""
    if not db.exists():
        return []
    try:
        with closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=5)) as conn:
            return conn.execute(query).fetchall()
    except sqlite3.OperationalError:  # its tables not made yet
        return []


def _wait_for_rows(db: Path, count: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while len(_rows(db)) < count:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the first runner wrote no rows in 60 s"
        time.sleep(0.02)


def test_two_runners_on_one_database_do_each_run_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ``hwsim sweep`` processes on one database. Each build waits at a gate that opens only
    once both runners hold a claim, so both are working on the database at the same time."""
    spec = write_spec(tmp_path, parameters=PARAMETERS, workloads=["workloads_for_tests.py:counted"])
    db, log, gate = tmp_path / "r.sqlite", tmp_path / "builds.log", tmp_path / "gate"
    command = [sys.executable, "-m", "hwsim.cli", "sweep", str(spec), "--db", str(db), "-j", "1"]
    env = {**_env(log, 0.05), GATE_ENV: str(gate)}
    runners = [  # different hash seeds: results must not depend on them
        subprocess.Popen(
            [*command, "-q"],
            env={**env, "PYTHONHASHSEED": seed},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in ("1", "2")
    ]
    deadline = time.monotonic() + 60
    while len(_claimants(db)) < 2:
        if any(r.poll() is not None for r in runners) or time.monotonic() > deadline:
            for runner in runners:  # the other one waits at the gate: stop it, then report
                runner.kill()
            pytest.fail(
                f"the two runners never both held a claim: {[r.communicate() for r in runners]}"
            )
        time.sleep(0.02)
    gate.touch()
    outputs = [r.communicate(timeout=120)[0] for r in runners]
    assert [r.returncode for r in runners] == [0, 0], outputs
    rows = _rows(db)
    assert len(rows) == RUNS and {(s, a) for s, a, _ in rows.values()} == {("ok", 1)}
    builds = Counter(log.read_text().split())
    assert set(builds) == set(rows) and set(builds.values()) == {1}  # each run executed once
    by_runner = Counter(runner for _, _, runner in rows.values())
    assert len(by_runner) == 2  # both did some of the work
    ran = [int(out.split(" runs in ")[0].rsplit("\n", 1)[-1]) for out in outputs]
    assert sorted(ran) == sorted(by_runner.values()) and sum(ran) == RUNS
    assert f"; {RUNS - ran[0]} by another runner" in outputs[0]
    # the same results as one runner in this process: split over processes, nothing changes
    alone = tmp_path / "alone.sqlite"
    monkeypatch.setattr(execute, "_CACHE", ProgramCache())  # lower every run again here
    run_sweep(load_sweep(spec), alone, jobs=1, progress=False)
    assert _metrics(db) == _metrics(alone)


def _metrics(db: Path) -> dict[str, tuple[object, ...]]:
    frame = load_results(db)
    return {
        row["config_hash"]: (row["total_ns"], row["mbu_pct"], row["engines.tensor.busy_pct"])
        for row in frame.to_dict("records")
    }


def _claimants(db: Path) -> set[str]:
    return {
        row[0] for row in _select(db, "SELECT claimed_by FROM claims WHERE claimed_by IS NOT NULL")
    }


def test_a_frozen_runner_loses_its_runs_when_its_lease_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runner A (lease 1 s) is frozen (SIGSTOP) inside its first run, and its heartbeat with it.
    Runner B, this process, does everything, taking A's run once A's lease ends. A, resumed,
    finishes that run too, but its result is dropped: B recorded it first, and no row is written
    twice. (A is frozen between transactions: one frozen inside a transaction would hold
    SQLite's write lock, and every runner would wait for it.)"""
    spec = write_spec(tmp_path, parameters=PARAMETERS, workloads=["workloads_for_tests.py:counted"])
    db, log, gate = tmp_path / "r.sqlite", tmp_path / "builds.log", tmp_path / "gate"
    a = subprocess.Popen(
        [sys.executable, "-c", _SWEEP, str(spec), str(db), "1.0"],
        env={**_env(log, 0.0), GATE_ENV: str(gate)},
        cwd=ROOT,
        start_new_session=True,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text()):  # A has claimed a run and waits at the gate
        assert a.poll() is None, a.communicate()
        assert time.monotonic() < deadline, "runner A started no run in 60 s"
        time.sleep(0.02)
    os.killpg(a.pid, signal.SIGSTOP)
    try:
        [held] = log.read_text().split()
        [runner_a] = _claimants(db)
        gate.touch()
        monkeypatch.setenv(LOG_ENV, str(log))  # runner B (this process) logs its builds too
        monkeypatch.setattr(execute, "_CACHE", ProgramCache())  # and builds each one here
        outcome = run_sweep(load_sweep(spec), db, jobs=1, progress=False, lease_s=1.0)
    finally:
        os.killpg(a.pid, signal.SIGCONT)
    _, err = a.communicate(timeout=60)
    assert a.returncode == 0, err
    assert (outcome.ok, outcome.elsewhere) == (RUNS, 0)
    rows = _rows(db)
    assert len(rows) == RUNS and {(s, a) for s, a, _ in rows.values()} == {("ok", 1)}
    assert runner_a not in {runner for _, _, runner in rows.values()}  # A's late result dropped
    builds = Counter(log.read_text().split())
    assert builds[held] == 2 and set(builds.values()) == {1, 2}  # A's run was done again by B


def test_a_lease_held_elsewhere_is_waited_for_then_taken(tmp_path: Path) -> None:
    """A runner on another host (its claim put in by hand) is never asked whether it lives: its
    runs wait for the lease to end. A dead runner on this host loses its leases at once."""
    spec = write_spec(tmp_path)
    plan = load_sweep(spec)
    db = tmp_path / "r.sqlite"
    run_sweep(plan, db, jobs=1, progress=False, lease_s=1.0)  # makes the tables and claim rows
    dead_pid = _a_dead_pid()
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM runs")
        keys = conn.execute(
            "SELECT config_hash, workload FROM claims ORDER BY config_hash"
        ).fetchall()
        assert len(keys) == 4
        conn.execute(
            "UPDATE claims SET claimed_by = 'far-away:1:x', lease_until = ? WHERE config_hash = ?",
            (time.time() + 1.5, keys[0][0]),
        )
        conn.execute(
            "UPDATE claims SET claimed_by = ?, lease_until = ? WHERE config_hash = ?",
            (f"{socket.gethostname()}:{dead_pid}:x", time.time() + DEAD_LEASE_S, keys[1][0]),
        )
    start = time.monotonic()
    outcome = run_sweep(plan, db, jobs=1, progress=False, lease_s=1.0)
    assert (outcome.ok, outcome.elsewhere) == (4, 0)
    # waited for the live lease, not for the dead runner's (that would take DEAD_LEASE_S)
    assert 1.4 <= time.monotonic() - start < DEAD_LEASE_S / 2
    with sqlite3.connect(db) as conn:
        assert conn.execute(
            "SELECT count(*) FROM claims WHERE claimed_by IS NOT NULL"
        ).fetchone() == (0,)


def _a_dead_pid() -> int:
    """The pid of a process that has exited (and was reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid
