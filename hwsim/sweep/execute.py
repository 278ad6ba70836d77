"""Running a sweep plan: skip finished rows, fan runs out through joblib, record each as it ends.

The parent validates the plan (``hwsim.sweep.spec``), opens the results database, warms the
Numba cache once (so workers load compiled kernels rather than each compiling them), and hands
joblib one small ``Task`` per run. A worker builds the workload's program through its own
``ProgramCache`` (lowered once per distinct lowering-relevant config, see
``hwsim.sweep.lowering``), simulates it, and returns a small dict of metrics; traces are written
to disk by the worker only when the spec asks. The parent writes each result in its own
transaction as it arrives, so nothing finished is lost to Ctrl-C or a dead worker.

``lowering='parent'`` instead builds in the parent and sends each task its program (measured
slower: see ``bench/sweep.py``; kept for backends whose workers cannot build).
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from hwsim.config.schema import HardwareConfig
from hwsim.errors import HwsimError
from hwsim.program import Program
from hwsim.sweep.backends import BACKENDS, default_jobs, open_backend, require
from hwsim.sweep.errors import SweepError
from hwsim.sweep.lowering import ProgramCache
from hwsim.sweep.metrics import extract
from hwsim.sweep.progress import SweepProgress
from hwsim.sweep.spec import SweepPlan
from hwsim.sweep.store import ResultStore
from hwsim.sweep.workloads import SweepWorkload

Lowering = Literal["worker", "parent"]
#: Tasks joblib keeps queued ahead of the workers (per worker).
PREFETCH_PER_WORKER = 2
#: In-flight runs named when a worker dies.
SUSPECTS_SHOWN = 3
#: What joblib's backends raise when a worker process dies (loky, Dask, Ray).
_WORKER_DEATHS = frozenset(
    {"TerminatedWorkerError", "BrokenProcessPool", "KilledWorker", "WorkerCrashedError"}
)


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

    @property
    def ran(self) -> int:
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
                err, ok = check(run_result.outputs)
                summary["max_abs_err"], summary["numerics_ok"] = float(err), bool(ok)
        result["metrics"] = extract(summary, task.metrics)
        if task.trace_dir:
            from hwsim.trace.outputs import write_run_outputs

            write_run_outputs(run_result.trace, task.trace_dir, summary=summary, plots=False)
            result["trace_dir"] = task.trace_dir
        result["status"] = "ok"
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, HwsimError):  # a user error needs no traceback; a bug does
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
) -> SweepOutcome:
    """Run every (config, workload) of ``plan`` not yet finished in ``db``; see the module doc."""
    require("joblib", "sweep")
    if backend not in BACKENDS:
        raise SweepError(f"unknown backend '{backend}'; valid: {', '.join(BACKENDS)}")
    db_path = Path(db) if db is not None else default_db(plan)
    jobs = jobs or default_jobs()
    if jobs < 1:
        raise SweepError(f"--jobs must be at least 1, got {jobs}")
    counts = {"ok": 0, "failed": 0, "lowerings": 0}
    start = time.perf_counter()
    with ResultStore(db_path) as store:
        store.prepare(plan, jobs, backend)
        tasks = _tasks(plan, db_path, store.finished(plan.spec.numerics, retry_failed))
        skipped = plan.runs - len(tasks)
        outcome = "completed"
        try:
            if tasks:
                where = f"({skipped} already in {db_path})"
                run = _Run(plan, store, counts, progress, lowering)
                run.execute(tasks, where, backend, jobs, address)
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
    )


def _tasks(plan: SweepPlan, db_path: Path, done: set[tuple[str, str]]) -> list[Task]:
    """Runs still to do, workload by workload, each in the plan's point order (so runs sharing
    a lowering tend to follow each other and find it in the worker's cache)."""
    traces = db_path.with_name(db_path.stem + "-traces") if plan.spec.traces else None
    tasks = []
    for workload in plan.workloads:
        for point in plan.points:
            if (point.config_hash, workload.key) in done:
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
                    os.getpid(),
                )
            )
    return tasks


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "workload"


class _Run:
    """One invocation's fan-out: feeds joblib the tasks, records each result as it arrives."""

    def __init__(
        self,
        plan: SweepPlan,
        store: ResultStore,
        counts: dict[str, int],
        progress: bool,
        lowering: Lowering,
    ) -> None:
        self.plan, self.store, self.counts = plan, store, counts
        self.progress, self.lowering = progress, lowering
        self.params = {p.config_hash: p.params for p in plan.points}
        self.in_flight: dict[tuple[str, str], Task] = {}

    def execute(
        self, tasks: list[Task], where: str, backend: str, jobs: int, address: str | None
    ) -> None:
        from hwsim.kernels import warm_up

        warm_up()  # compile or load every kernel once, before workers start
        title = f"sweep {self.plan.spec.name}"
        with open_backend(backend, jobs, address) as place:
            if self.progress:
                print(
                    f"{title}: {len(tasks)} runs {where} on {place.description}",
                    file=sys.stderr,
                    flush=True,
                )
            with SweepProgress(len(tasks), title, enabled=self.progress) as bar:
                self._collect(tasks, bar)

    def _feed(self, tasks: list[Task]) -> Iterator[Any]:
        joblib = require("joblib", "sweep")
        parent_cache = ProgramCache() if self.lowering == "parent" else None
        for task in tasks:
            if parent_cache is not None:
                task = _with_program(task, parent_cache, self.counts)
            self.in_flight[task.key] = task
            yield joblib.delayed(run_task)(task)

    def _collect(self, tasks: list[Task], bar: SweepProgress) -> None:
        joblib = require("joblib", "sweep")
        parallel = joblib.Parallel(
            return_as="generator_unordered", pre_dispatch=f"{PREFETCH_PER_WORKER}*n_jobs"
        )
        try:
            for result in parallel(self._feed(tasks)):
                self.in_flight.pop((result["config_hash"], result["workload"]), None)
                self.store.record(result, self.params[result["config_hash"]])
                ok = result["status"] == "ok"
                self.counts["ok" if ok else "failed"] += 1
                if self.lowering == "worker" and result.get("lowering_cached") is False:
                    self.counts["lowerings"] += 1
                bar.advance(ok)
        except Exception as exc:
            if type(exc).__name__ in _WORKER_DEATHS:
                raise SweepError(self._worker_died(exc)) from exc
            raise

    def _worker_died(self, exc: Exception) -> str:
        suspects = [f"{t.workload.key} on config {t.config_hash}" for t in self.in_flight.values()]
        shown = "; ".join(suspects[:SUSPECTS_SHOWN])
        more = (
            f" (+{len(suspects) - SUSPECTS_SHOWN} queued)" if len(suspects) > SUSPECTS_SHOWN else ""
        )
        done = self.counts["ok"] + self.counts["failed"]
        return (
            f"a worker process died ({type(exc).__name__}); the {done} runs finished so far are "
            f"saved in {self.store.path}, and running the same command resumes. "
            f"Runs in flight: {shown}{more}"
        )


def _with_program(task: Task, cache: ProgramCache, counts: dict[str, int]) -> Task:
    """The task carrying its program, built in the parent (input values dropped if timing-only).

    A build error is left for the worker to reproduce and record."""
    try:
        program, cached, _ = cache.get(
            task.lowering_key, lambda c: task.workload.build(c, task.numerics), task.config
        )
    except Exception:
        return task
    counts["lowerings"] += 0 if cached else 1
    if not task.numerics:
        program = dataclasses.replace(
            program,
            hbm={
                name: dataclasses.replace(decl, values=None) for name, decl in program.hbm.items()
            },
        )
    return dataclasses.replace(task, program=program)
