"""The evaluation loop's targets: the tuned tutorial matmul, and the cost of a 200-case fuzz run.

    .venv/bin/python bench/loop.py [--only tune|fuzz] [--jobs 2]

- ``tune``: ``hwsim tune matmul_tiled_blocked`` (the NKI tutorial's tiled matmul, V1a, with its
  blocking factors and buffer depth as knobs) on trn1 over 30 candidates, against the simulated
  time of the fully optimised version (``matmul_optimized``, V1) on the same problem; target:
  the best point within 10% of it. Prints the path.
- ``fuzz``: ``hwsim fuzz --cases 200 --seed 0`` with ``--jobs`` workers (the default mix, three
  kernels to one PyTorch graph); target: under 10 minutes of wall time on 2 cores. Prints the
  wall time, the cases' CPU time (what the run costs on an idle machine) and the load average,
  since a loaded machine stretches the wall time.

Each target prints PASS or MISS; the script always exits 0.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

TUNE_TARGET = 1.10
FUZZ_TARGET_S = 600.0


def tune(jobs: int) -> None:
    from hwsim.lang import TensorSpec
    from hwsim.library import matmul_optimized
    from hwsim.machine.simulator import run
    from hwsim.tune.cli import make_target, path_lines
    from hwsim.tune.search import tune as search

    built = matmul_optimized.build(
        TensorSpec((8192, 4096), "bf16"), TensorSpec((8192, 8192), "bf16"), config="trn1"
    )
    optimised_ns = run(built.program, built.config, numerics=False).summary.total_ns
    result = search(make_target("matmul_tiled_blocked", []), "trn1", trials=30, jobs=jobs)
    print("\n".join(path_lines(result)))
    best = result.best.outcome.total_ns if result.best else float("inf")
    verdict = "PASS" if best <= TUNE_TARGET * optimised_ns else "MISS"
    print(
        f"tune: best {best / 1e6:.3f} ms vs fully optimised {optimised_ns / 1e6:.3f} ms "
        f"({best / optimised_ns:.3f}x; target <= {TUNE_TARGET:.2f}x) {verdict}"
    )


def fuzz(jobs: int) -> None:
    from hwsim.fuzz.runner import fuzz as run_fuzz

    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        result = run_fuzz(200, 0, "trn2", jobs=jobs, db=os.path.join(folder, "fuzz.sqlite"))
        wall = time.perf_counter() - start
    verdict = "PASS" if wall < FUZZ_TARGET_S else "MISS"
    load = os.getloadavg()[0]
    print(
        f"fuzz: {result['cases']} cases ({result['kinds']}), {result['failed']} failed; wall "
        f"{wall:,.0f} s with {jobs} workers (target < {FUZZ_TARGET_S:.0f} s) {verdict}; the "
        f"cases' CPU time {result['case_cpu_s']:,.0f} s; load average {load:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("tune", "fuzz"))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    if args.only in (None, "tune"):
        tune(args.jobs)
    if args.only in (None, "fuzz"):
        fuzz(args.jobs)


if __name__ == "__main__":
    main()
