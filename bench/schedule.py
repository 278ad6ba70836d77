"""The scheduler's effect: simulated time of the library kernels in program order, list scheduled
and under ``best`` (``Kernel.build(schedule=...)``, ``hwsim.schedule``).

    .venv/bin/python bench/schedule.py [--config trn2 ...] [--numerics]

Per kernel and config, one line: simulated ns in program order, list scheduled and ``best``,
the speedups (program / policy), and the build time each policy adds (dependency graph, cost
estimates, list scheduler; ``best`` also simulates each candidate; the fastest of ``BUILDS``
builds). Timing-only runs by default; ``--numerics`` also checks each scheduled run's outputs
against the workload's NumPy reference, with the race checker on. Prints a summary line per
policy (geometric-mean speedup, worst kernel); always exits 0.
"""

from __future__ import annotations

import argparse
import math
import time

import hwsim  # noqa: F401  (first: one BLAS thread before numpy loads, see hwsim/__init__.py)

# isort: split
from hwsim.config import load_config
from hwsim.library.workloads import WORKLOADS
from hwsim.machine.simulator import run

#: Builds per kernel and policy; the fastest is the build time.
BUILDS = 3


def measure(workload, config, policy: str, numerics: bool) -> tuple[float, float, bool]:
    """(simulated ns, build seconds, numerics ok) of one kernel under one policy."""
    args = workload.args(0)
    built_s = math.inf
    for _ in range(BUILDS):  # the fastest of a few: the machine may be shared
        start = time.perf_counter()
        program = workload.kernel.build(*args, config=config, schedule=policy, **workload.kwargs)
        built_s = min(built_s, time.perf_counter() - start)
    result = run(program.program, config, numerics=numerics, race_check=numerics)
    ok = workload.check(result.outputs).ok if numerics else True
    return result.summary.total_ns, built_s, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", action="append", help="presets (default trn1, trn2, trn3)")
    parser.add_argument("--numerics", action="store_true", help="check outputs, race checker on")
    options = parser.parse_args()
    speedups: dict[str, list[tuple[float, str]]] = {"list": [], "best": []}
    print(
        f"{'kernel':18} {'config':6} {'program ns':>11} {'list ns':>11} {'best ns':>11} "
        f"{'list x':>7} {'best x':>7} {'+build ms list/best':>20}"
    )
    for name in options.config or ["trn1", "trn2", "trn3"]:
        config = load_config(name)
        for workload in WORKLOADS:
            program_ns, program_s, _ = measure(workload, config, "program", False)
            row, builds, checks = [], [], []
            for policy in ("list", "best"):
                ns, built_s, ok = measure(workload, config, policy, options.numerics)
                speedups[policy].append((program_ns / ns, f"{workload.name} on {name}"))
                row.append(ns)
                builds.append(f"{1000 * (built_s - program_s):.0f}")
                checks.append(ok)
            check = "" if not options.numerics else ("  numerics ok" if all(checks) else "  FAIL")
            print(
                f"{workload.name:18} {name:6} {program_ns:11.0f} {row[0]:11.0f} {row[1]:11.0f} "
                f"{program_ns / row[0]:7.3f} {program_ns / row[1]:7.3f} "
                f"{'/'.join(builds):>20}{check}",
                flush=True,
            )
    for policy, found in speedups.items():
        mean = math.exp(sum(math.log(s) for s, _ in found) / len(found))
        worst = min(found)
        print(
            f"{policy}: geometric-mean speedup {mean:.3f} over {len(found)} runs; "
            f"worst {worst[0]:.3f} ({worst[1]})"
        )


if __name__ == "__main__":
    main()
