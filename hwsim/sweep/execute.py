"""Running a sweep plan: skip finished rows, fan runs out through joblib, record each as it ends.

The parent validates the plan (``hwsim.sweep.spec``), opens the results database, warms the
Numba cache once (so workers load compiled kernels rather than each compiling them), and hands
joblib one small ``Task`` per run. A worker builds the workload's program through its own
``ProgramCache`` (lowered once per distinct lowering-relevant config, see
``hwsim.sweep.lowering``), simulates it, and returns a small dict of metrics; traces are written
to disk by the worker only when the spec asks. The parent writes each result in its own
transaction as it arrives, so nothing finished is lost to Ctrl-C or a dead worker.

Several runners (``hwsim sweep`` processes, on one host or many) may share one database: each
claims a run before handing it out (``hwsim.sweep.leases``, ``hwsim.sweep.fanout``), so every run
is done once, and a runner that dies leaves its runs to the others when its lease ends.

``lowering='parent'`` instead builds in the parent and sends each task its program (measured
slower: see ``bench/sweep.py``; kept for backends whose workers cannot build).
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from hwsim.config.schema import HardwareConfig
from hwsim.errors import HwsimError
from hwsim.program import Program
from hwsim.sweep.backends import BACKENDS, capped_jobs, require
from hwsim.sweep.db import database_errors
from hwsim.sweep.errors import SweepError
from hwsim.sweep.fanout import FanOut
from hwsim.sweep.leases import DEFAULT_LEASE_S, Leases
from hwsim.sweep.lowering import ProgramCache
from hwsim.sweep.metrics import extract
from hwsim.sweep.spec import SweepPlan
from hwsim.sweep.store import ResultStore
from hwsim.sweep.workloads import SweepWorkload, check_runnable

Lowering = Literal["worker", "parent"]


@dataclass(frozen=True)
class Task:
    """One run: a workload on a config. Small: it is pickled to a worker."""

    workload: SweepWorkload
    config: HardwareConfig
    config_hash: str
    point: int
    metrics: tuple[str, ...]
    numerics: bool
    trace_dir: str | None
    trace_root: str | None  # the database's folder: trace_dir is made below it, links unfollowed
    parent_pid: int
    program: Program | None = None  # only with lowering='parent'

    @property
    def key(self) -> tuple[str, str]:
        return self.config_hash, self.workload.key

    @property
    def lowering_key(self) -> str:
        """What the program cache keys on besides config fields: a timing-only build may leave
        out the input values a numerics run needs."""
        return f"{self.workload.key}|{'numerics' if self.numerics else 'timing'}"


@dataclass(frozen=True)
class SweepOutcome:
    """What a ``run_sweep`` call did."""

    db: Path
    planned: int
    skipped: int
    ok: int
    failed: int
    lowerings: int
    elapsed_s: float
    backend: str
    elsewhere: int = 0  # runs another runner on the same database did while this one ran

    @property
    def ran(self) -> int:
        """Runs this runner did (``elsewhere`` and ``skipped`` are the others)."""
        return self.ok + self.failed


# ---- worker side --------------------------------------------------------------------------------

_CACHE = ProgramCache()
_PREPARED = False


def _prepare_worker(task: Task) -> None:
    """Once per worker process: one BLAS thread (threadpoolctl, if there); Numba kernels loaded."""
    global _PREPARED
    if _PREPARED:
        return
    _PREPARED = True
    if os.getpid() != task.parent_pid:
        try:
            from threadpoolctl import threadpool_limits

            threadpool_limits(1)
        except ImportError:  # loky and Dask already start workers with one-thread env vars
            pass
    if task.numerics:
        from hwsim.kernels import warm_up

        warm_up()


def run_task(task: Task) -> dict[str, Any]:
    """Build (or reuse) the program, simulate, and return the run's metrics; never raises for
    a failed run: the error is part of the result."""
    from hwsim.machine.simulator import run

    _prepare_worker(task)
    start = time.perf_counter()
    result: dict[str, Any] = {
        "config_hash": task.config_hash,
        "workload": task.workload.key,
        "point": task.point,
        "numerics": task.numerics,
        "worker": f"{socket.gethostname()}:{os.getpid()}",
        "status": "failed",
        "metrics": {},
    }
    try:
        if task.program is not None:
            program, cached, build_s = task.program, True, 0.0
        else:
            try:
                program, cached, build_s = _CACHE.get(
                    task.lowering_key, lambda c: task.workload.build(c, task.numerics), task.config
                )
            except Exception:
                result["build_s"] = time.perf_counter() - start
                raise
        result.update(build_s=build_s, lowering_cached=cached)
        sim_start = time.perf_counter()
        run_result = run(program, task.config, numerics=task.numerics)
        result["simulate_s"] = time.perf_counter() - sim_start
        summary = run_result.summary
        if task.numerics:
            check = task.workload.check()
            if check is not None:
                summary.record_numerics(check(run_result.outputs))
        result["metrics"] = extract(summary.to_dict(), task.metrics)
        if task.trace_dir:
            from hwsim.outputs_guard import claim_folder
            from hwsim.trace.outputs import write_run_outputs

            with claim_folder(task.trace_dir, within=task.trace_root) as folder:
                write_run_outputs(run_result.trace, folder, summary=summary, plots=False)
            result["trace_dir"] = task.trace_dir
        result["status"] = "ok"
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        # a user error needs no traceback; a bug does, and so does the user's own code raising
        # (a WorkloadError whose cause is the user's exception: pyfile.user_code_failed)
        cause = exc.__cause__
        if not isinstance(exc, HwsimError) or not isinstance(cause, HwsimError | None):
            result["traceback"] = traceback.format_exc()
    result["wall_s"] = time.perf_counter() - start
    return result


# ---- parent side --------------------------------------------------------------------------------


def default_db(plan: SweepPlan) -> Path:
    """``traces/sweeps/<spec name>.sqlite`` under the current directory."""
    from hwsim.trace.outputs import TRACES_DIR

    return TRACES_DIR / "sweeps" / f"{plan.spec.name}.sqlite"


def run_sweep(
    plan: SweepPlan,
    db: str | Path | None = None,
    *,
    jobs: int | None = None,
    backend: str = "loky",
    address: str | None = None,
    retry_failed: bool = False,
    progress: bool = True,
    lowering: Lowering = "worker",
    lease_s: float = DEFAULT_LEASE_S,
) -> SweepOutcome:
    """Run every (config, workload) of ``plan`` not yet finished in ``db``; see the module doc.

    Other runners may work on ``db`` at the same time: each run is claimed for ``lease_s``
    seconds, renewed while this runner lives (``hwsim.sweep.leases``), and this call returns when
    every run of the plan is recorded, by this runner or another.
    """
    require("joblib", "sweep")
    if backend not in BACKENDS:
        raise SweepError(f"unknown backend '{backend}'; valid: {', '.join(BACKENDS)}")
    db_path = Path(db) if db is not None else default_db(plan)
    if jobs is not None and jobs < 1:
        raise SweepError(f"--jobs must be at least 1, got {jobs}")
    check_runnable(plan.workloads)  # FILE.py workloads are imported now that runs execute
    counts = {"ok": 0, "failed": 0, "lowerings": 0, "elsewhere": 0}
    start = time.perf_counter()
    with ResultStore(db_path) as store:
        store.prepare(plan, capped_jobs(jobs, plan.runs, address)[0], backend)
        keys = [(p.config_hash, w.key) for w in plan.workloads for p in plan.points]
        seen = store.todo(keys, plan.spec.numerics, retry_failed)
        tasks = _tasks(plan, db_path, seen)
        skipped = plan.runs - len(tasks)
        workers, capped = capped_jobs(jobs, len(tasks), address)
        if capped and progress:
            print(capped, file=sys.stderr, flush=True)
        outcome = "completed"
        try:
            if tasks:
                where = f"({skipped} already in {db_path})"
                with database_errors(db_path), Leases(db_path, lease_s) as leases:
                    fan = FanOut(
                        plan,
                        store,
                        leases,
                        seen,
                        counts,
                        work=run_task,
                        progress=progress,
                        lowering=lowering,
                    )
                    fan.execute(tasks, where, backend, workers, address)
        except KeyboardInterrupt:
            outcome = "interrupted"
            if progress:
                done = counts["ok"] + counts["failed"]
                print(
                    f"interrupted: the {done} runs finished are saved in {db_path}; "
                    "running the same command resumes",
                    file=sys.stderr,
                )
            raise
        except Exception as exc:
            outcome = f"error: {type(exc).__name__}: {exc}"
            raise
        finally:
            store.finish(counts["ok"], counts["failed"], outcome)
    elapsed = time.perf_counter() - start
    return SweepOutcome(
        db_path,
        plan.runs,
        skipped,
        counts["ok"],
        counts["failed"],
        counts["lowerings"],
        elapsed,
        backend,
        counts["elsewhere"],
    )


def _tasks(plan: SweepPlan, db_path: Path, todo: dict[tuple[str, str], int]) -> list[Task]:
    """Runs still to do (the keys of ``todo``), workload by workload, each in the plan's point
    order (so runs sharing a lowering tend to follow each other and find it in the worker's
    cache)."""
    traces = db_path.with_name(db_path.stem + "-traces") if plan.spec.traces else None
    root = str(db_path.parent) if traces else None
    tasks = []
    for workload in plan.workloads:
        for point in plan.points:
            if (point.config_hash, workload.key) not in todo:
                continue
            trace_dir = str(traces / _slug(workload.key) / point.config_hash) if traces else None
            tasks.append(
                Task(
                    workload,
                    point.config,
                    point.config_hash,
                    point.index,
                    tuple(plan.metrics),
                    plan.spec.numerics,
                    trace_dir,
                    root,
                    os.getpid(),
                )
            )
    return tasks


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "workload"
