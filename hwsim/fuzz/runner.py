"""``fuzz``: generate cases 0..N-1 of a seed, check each, shrink the failures, keep everything.

Cases run in batches on the sweep backends (local processes, Dask or Ray); each worker
generates its case from (seed, index), so nothing but numbers crosses to it. A failing case is
shrunk in the worker to one that fails the same checks, and the ready-to-run reproduction of
each failure is written into ``out`` (a run folder claimed through the output guard).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hwsim.fuzz.kinds import DEFAULT_MIX, load_kind, parse_mix
from hwsim.fuzz.shrink import shrink
from hwsim.fuzz.spec import NumpyDraw
from hwsim.fuzz.store import FuzzStore

#: Cases handed to the workers at a time, per worker (results are stored per batch).
BATCH_PER_WORKER = 4


def run_case(
    seed: int, index: int, config: str, kind_name: str = "kernel", shrink_failures: bool = True
) -> dict[str, Any]:
    """Generate, check and (if it fails) shrink case ``index`` of ``seed``; runs in a worker."""
    start, cpu = time.perf_counter(), time.process_time()
    kind = load_kind(kind_name)
    spec = kind.generate(NumpyDraw(seed, index))
    failures = check_case(kind, spec, config)
    shrunk = None
    if failures and shrink_failures:
        checks = {f.check for f in failures}

        def still_fails(candidate: dict[str, Any]) -> bool:
            return checks <= {f.check for f in check_case(kind, candidate, config)}

        shrunk, _ = shrink(
            spec, still_fails, kind.shrink_attempts, smaller=kind.smaller, valid=kind.check_spec
        )
    return {
        "index": index,
        "kind": kind.name,
        "spec": spec,
        "status": "fail" if failures else "pass",
        "failures": [f.to_dict() for f in failures],
        "shrunk": shrunk,
        "wall_s": round(time.perf_counter() - start, 3),
        "cpu_s": round(time.process_time() - cpu, 3),
    }


def check_case(kind: Any, spec: dict[str, Any], config: str) -> list[Any]:
    """The kind's checks (looked up here, so tests can plant a failure in one place)."""
    return kind.check_case(spec, config)


def fuzz(
    cases: int,
    seed: int = 0,
    config: str = "trn2",
    *,
    mix: str = DEFAULT_MIX,
    jobs: int = 1,
    backend: str = "loky",
    address: str | None = None,
    db: str | Path | None = None,
    out: str | Path | None = None,
    force: bool = False,
    on_case: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run cases 0..cases-1 of ``seed`` on ``config`` (see the module docstring)."""
    from hwsim.sweep.backends import open_backend

    if out is not None:  # a refused folder fails before anything runs
        from hwsim.outputs_guard import check_output_folder

        check_output_folder(out, force=force)
    cycle = parse_mix(mix)
    store = FuzzStore(db)
    clock = time.perf_counter()
    try:
        todo = [i for i in range(cases) if i not in store.done(seed, config)]
        with open_backend(backend, jobs, address) as opened:
            size = max(1, opened.workers * BATCH_PER_WORKER)
            for start in range(0, len(todo), size):
                batch = todo[start : start + size]
                kinds = [cycle[i % len(cycle)] for i in batch]
                for result in _run_batch(seed, batch, kinds, config, opened.workers):
                    store.put(seed, config, result)
                    if on_case is not None:
                        on_case(result)
        results = store.results(seed, config, cases)
    finally:
        store.close()
    failed = [r for r in results if r["status"] == "fail"]
    files = _write_reproductions(failed, seed, config, out, force) if out and failed else []
    by_check = Counter(f"{r['kind']} {f['check']}" for r in failed for f in r["failures"])
    return {
        "seed": seed,
        "config": config,
        "cases": len(results),
        "ran": len(todo),
        "kinds": dict(Counter(r["kind"] for r in results)),
        "passed": len(results) - len(failed),
        "failed": len(failed),
        "failures_by_check": dict(by_check),
        "failures": [
            {
                "index": r["index"],
                "kind": r["kind"],
                "failures": r["failures"],
                "shrunk": r["shrunk"],
            }
            for r in failed
        ],
        "reproductions": [str(p) for p in files],
        "wall_s": round(time.perf_counter() - clock, 1),
        # CPU seconds of the cases themselves (also those run before a resume): what the run
        # costs on an idle machine, whatever the load was
        "case_cpu_s": round(sum(r["cpu_s"] for r in results), 1),
    }


def _run_batch(
    seed: int, batch: list[int], kinds: list[str], config: str, workers: int
) -> list[dict[str, Any]]:
    if workers <= 1 or len(batch) <= 1:
        return [run_case(seed, i, config, k) for i, k in zip(batch, kinds, strict=True)]
    import joblib

    work = (joblib.delayed(run_case)(seed, i, config, k) for i, k in zip(batch, kinds, strict=True))
    return list(joblib.Parallel()(work))


def _write_reproductions(
    failed: list[dict[str, Any]], seed: int, config: str, out: str | Path, force: bool
) -> list[Path]:
    from hwsim.outputs_guard import claim_folder

    paths = []
    with claim_folder(out, force=force) as folder:
        for r in failed:
            name = f"case_{seed}_{r['index']}.py"
            kind = load_kind(r["kind"])
            text = kind.reproduction(
                r["shrunk"] or r["spec"],
                r["failures"],
                f"{kind.name} case {r['index']} of seed {seed}",
                config,
            )
            paths.append(folder.write_text(name, text))
    return paths
