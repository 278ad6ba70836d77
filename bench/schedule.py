"""The list scheduler's effect: simulated time of the library kernels in program order and list
scheduled (``Kernel.build(schedule=...)``, ``hwsim.schedule``).

    .venv/bin/python bench/schedule.py [--config trn2 ...] [--numerics]

Per kernel and config, one line: simulated ns in program order, list scheduled, the speedup
(program / list), and the build time the scheduler adds (dependency graph, cost estimates, the
list scheduler; the fastest of ``BUILDS`` builds). Timing-only runs by default; ``--numerics``
also checks each scheduled run's outputs against the workload's NumPy reference, with the race
checker on. Prints a summary line (geometric-mean speedup, worst kernel); always exits 0.
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
    ok = workload.check(result.outputs)[1] if numerics else True
    return result.summary["total_ns"], built_s, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", action="append", help="presets (default trn1, trn2, trn3)")
    parser.add_argument("--numerics", action="store_true", help="check outputs, race checker on")
    options = parser.parse_args()
    speedups: list[tuple[float, str]] = []
    print(
        f"{'kernel':18} {'config':6} {'program ns':>11} {'list ns':>11} {'speedup':>8} "
        f"{'+build ms':>9}"
    )
    for name in options.config or ["trn1", "trn2", "trn3"]:
        config = load_config(name)
        for workload in WORKLOADS:
            program_ns, program_s, _ = measure(workload, config, "program", False)
            list_ns, list_s, ok = measure(workload, config, "list", options.numerics)
            speedup = program_ns / list_ns
            speedups.append((speedup, f"{workload.name} on {name}"))
            check = "" if not options.numerics else ("  numerics ok" if ok else "  NUMERICS FAIL")
            print(
                f"{workload.name:18} {name:6} {program_ns:11.0f} {list_ns:11.0f} "
                f"{speedup:8.3f} {1000 * (list_s - program_s):9.1f}{check}",
                flush=True,
            )
    mean = math.exp(sum(math.log(s) for s, _ in speedups) / len(speedups))
    worst = min(speedups)
    print(
        f"geometric-mean speedup {mean:.3f} over {len(speedups)} runs; "
        f"worst {worst[0]:.3f} ({worst[1]})"
    )


if __name__ == "__main__":
    main()
