"""One runner's fan-out: claim each run, feed joblib, record each result as it arrives, and wait
for the runs other runners hold until they are recorded or their leases end.

Runs are claimed one at a time as joblib asks for the next task (at most
``PREFETCH_PER_WORKER`` per worker ahead), so two runners on one database interleave rather than
one taking everything. A run another runner holds is passed over; when a pass ends with such
runs left, the runner polls (``Leases.poll_s``) until each is recorded by its holder or its lease
ends and it can be claimed here. So a finished ``hwsim sweep`` leaves every run of its plan done.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from hwsim.sweep.backends import open_backend, require
from hwsim.sweep.errors import SweepError
from hwsim.sweep.lowering import ProgramCache
from hwsim.sweep.progress import SweepProgress

if TYPE_CHECKING:
    from hwsim.sweep.execute import Lowering, Task
    from hwsim.sweep.leases import Leases
    from hwsim.sweep.spec import SweepPlan
    from hwsim.sweep.store import ResultStore

#: Tasks joblib keeps queued ahead of the workers (per worker).
PREFETCH_PER_WORKER = 2
#: In-flight runs named when a worker dies.
SUSPECTS_SHOWN = 3
#: What joblib's backends raise when a worker process dies (loky, Dask, Ray).
_WORKER_DEATHS = frozenset(
    {"TerminatedWorkerError", "BrokenProcessPool", "KilledWorker", "WorkerCrashedError"}
)


class FanOut:
    """One invocation's fan-out (see the module doc). ``seen`` maps each task's key to the
    ``attempts`` its row had when this runner looked (0: no row); ``counts`` is updated in place
    (ok, failed, lowerings, elsewhere: runs another runner recorded meanwhile)."""

    def __init__(
        self,
        plan: SweepPlan,
        store: ResultStore,
        leases: Leases,
        seen: dict[tuple[str, str], int],
        counts: dict[str, int],
        *,
        work: Callable[[Task], dict[str, Any]],
        progress: bool,
        lowering: Lowering,
    ) -> None:
        self.plan, self.store, self.leases, self.seen = plan, store, leases, seen
        self.counts, self.work = counts, work
        self.progress, self.lowering = progress, lowering
        self.params = {p.config_hash: p.params for p in plan.points}
        self.in_flight: dict[tuple[str, str], Task] = {}
        self.recorded: set[tuple[str, str]] = set()
        self._claimed = 0

    def execute(
        self, tasks: list[Task], where: str, backend: str, jobs: int, address: str | None
    ) -> None:
        from hwsim.builder import warm_up as warm_up_builder
        from hwsim.kernels import warm_up

        warm_up()  # compile or load every kernel once, before workers start
        warm_up_builder()  # and the deferred builder's pass
        title = f"sweep {self.plan.spec.name}"
        with open_backend(backend, jobs, address) as place:
            self._say(f"{title}: {len(tasks)} runs {where} on {place.description}")
            with SweepProgress(len(tasks), title, enabled=self.progress) as bar:
                pending, waited = tasks, False
                while pending:
                    self._claimed = 0
                    self._collect(pending, bar)
                    pending = self._still_to_do(pending, bar)
                    if pending and not self._claimed:
                        if not waited:
                            self._say(
                                f"{title}: waiting for {len(pending)} runs other runners hold "
                                f"(a dead runner's lease ends within {self.leases.lease_s:g} s)"
                            )
                            waited = True
                        time.sleep(self.leases.poll_s)
                        self.leases.reap()

    def _say(self, line: str) -> None:
        if self.progress:
            print(line, file=sys.stderr, flush=True)

    def _feed(self, tasks: list[Task]) -> Iterator[Any]:
        joblib = require("joblib", "sweep")
        parent_cache = ProgramCache() if self.lowering == "parent" else None
        for task in tasks:
            if not self.leases.claim(task.key, self.seen[task.key]):
                continue  # another runner holds it, or has recorded it
            self._claimed += 1
            if parent_cache is not None:
                task = _with_program(task, parent_cache, self.counts)
            self.in_flight[task.key] = task
            yield joblib.delayed(self.work)(task)

    def _collect(self, tasks: list[Task], bar: SweepProgress) -> None:
        joblib = require("joblib", "sweep")
        parallel = joblib.Parallel(
            return_as="generator_unordered", pre_dispatch=f"{PREFETCH_PER_WORKER}*n_jobs"
        )
        try:
            for result in parallel(self._feed(tasks)):
                key = (result["config_hash"], result["workload"])
                self.in_flight.pop(key, None)
                recorded = self.store.record(
                    result,
                    self.params[result["config_hash"]],
                    seen_attempts=self.seen[key],
                    runner=self.leases.me,
                )
                if not recorded:  # another runner took it over (our lease lapsed) and won
                    continue
                self.recorded.add(key)
                ok = result["status"] == "ok"
                self.counts["ok" if ok else "failed"] += 1
                if self.lowering == "worker" and result.get("lowering_cached") is False:
                    self.counts["lowerings"] += 1
                bar.advance(ok)
        except Exception as exc:
            if type(exc).__name__ in _WORKER_DEATHS:
                raise SweepError(self._worker_died(exc)) from exc
            raise

    def _still_to_do(self, pending: list[Task], bar: SweepProgress) -> list[Task]:
        """The tasks nobody has recorded yet; those another runner recorded count as its."""
        rows = self.store.attempts(task.key for task in pending)
        left = []
        for task in pending:
            found = rows.get(task.key)
            if found is None or found[0] == self.seen[task.key]:
                left.append(task)
            elif task.key not in self.recorded:
                self.counts["elsewhere"] += 1
                bar.advance(found[1] == "ok")
        return left

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
