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

from hwsim.fuzz.checks import check_case
from hwsim.fuzz.shrink import reproduction, shrink
from hwsim.fuzz.spec import NumpyDraw, generate
from hwsim.fuzz.store import FuzzStore

#: Cases handed to the workers at a time, per worker (results are stored per batch).
BATCH_PER_WORKER = 4


def run_case(seed: int, index: int, config: str, shrink_failures: bool = True) -> dict[str, Any]:
    """Generate, check and (if it fails) shrink case ``index`` of ``seed``; runs in a worker."""
    start = time.perf_counter()
    spec = generate(NumpyDraw(seed, index))
    failures = check_case(spec, config)
    shrunk = None
    if failures and shrink_failures:
        kinds = {f.check for f in failures}

        def still_fails(candidate: dict[str, Any]) -> bool:
            return kinds <= {f.check for f in check_case(candidate, config)}

        shrunk, _ = shrink(spec, still_fails)
    return {
        "index": index,
        "spec": spec,
        "status": "fail" if failures else "pass",
        "failures": [f.to_dict() for f in failures],
        "shrunk": shrunk,
        "wall_s": round(time.perf_counter() - start, 3),
    }


def fuzz(
    cases: int,
    seed: int = 0,
    config: str = "trn2",
    *,
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
    store = FuzzStore(db)
    clock = time.perf_counter()
    try:
        todo = [i for i in range(cases) if i not in store.done(seed, config)]
        with open_backend(backend, jobs, address) as opened:
            size = max(1, opened.workers * BATCH_PER_WORKER)
            for start in range(0, len(todo), size):
                batch = todo[start : start + size]
                for result in _run_batch(seed, batch, config, opened.workers):
                    store.put(seed, config, result)
                    if on_case is not None:
                        on_case(result)
        results = store.results(seed, config, cases)
    finally:
        store.close()
    failed = [r for r in results if r["status"] == "fail"]
    files = _write_reproductions(failed, seed, config, out, force) if out and failed else []
    by_check = Counter(f["check"] for r in failed for f in r["failures"])
    return {
        "seed": seed,
        "config": config,
        "cases": len(results),
        "ran": len(todo),
        "passed": len(results) - len(failed),
        "failed": len(failed),
        "failures_by_check": dict(by_check),
        "failures": [
            {"index": r["index"], "failures": r["failures"], "shrunk": r["shrunk"]} for r in failed
        ],
        "reproductions": [str(p) for p in files],
        "wall_s": round(time.perf_counter() - clock, 1),
    }


def _run_batch(seed: int, batch: list[int], config: str, workers: int) -> list[dict[str, Any]]:
    if workers <= 1 or len(batch) <= 1:
        return [run_case(seed, i, config) for i in batch]
    import joblib

    return list(joblib.Parallel()(joblib.delayed(run_case)(seed, i, config) for i in batch))


def _write_reproductions(
    failed: list[dict[str, Any]], seed: int, config: str, out: str | Path, force: bool
) -> list[Path]:
    from hwsim.outputs_guard import claim_folder

    paths = []
    with claim_folder(out, force=force) as folder:
        for r in failed:
            name = f"case_{seed}_{r['index']}.py"
            text = reproduction(r["shrunk"] or r["spec"], r["failures"],
                                f"seed {seed}, case {r['index']}", config)  # fmt: skip
            paths.append(folder.write_text(name, text))
    return paths
