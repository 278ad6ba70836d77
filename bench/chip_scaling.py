"""Simulation cost of many cores: N cores running the same program cost at most N times one
core's wall time.

    .venv/bin/python bench/chip_scaling.py [--config trn2] [--cores 1 2 4 8] [--rows 4096]
                                           [--plot DIR]

Each core loads row tiles of a [rows, 512] fp32 tensor, applies 4 ScalarE activations and stores
them (one SPMD program merged from per-core builds, ``hwsim.chip.spmd``; the cores share the
chip's HBM stacks). Printed per core count: the simulated time, the wall and CPU time of the
simulation (best of 3, numerics on) and the CPU time's ratio to one core's; target: ratio <= N.
The verdict takes CPU time: a simulation is one thread, so on an idle machine its CPU time is its
wall time, and on a shared one CPU time is what the other processes do not inflate.

``--plot DIR`` also splits the rows over the cores (each core 1/N of them: the same work on
more cores) and writes ``DIR/scaling.png`` (simulated speed-up against cores, beside N x) and
``DIR/core_utilisation.png`` (each core's engines' busy share in the largest run).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from hwsim import lang
from hwsim.chip import spmd
from hwsim.config import load_config
from hwsim.lang import isa as nisa
from hwsim.machine.simulator import run


@lang.kernel
def rows_kernel(x):  # type: ignore[no-untyped-def]
    out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out")
    for t in range(x.shape[0] // 128):
        rows = slice(128 * t, 128 * (t + 1))
        tile = lang.load(x[rows, :])
        for _ in range(4):
            nisa.activation(tile, nisa.ActivationFunction.exp, tile)
        lang.store(out[rows, :], tile)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="trn2")
    parser.add_argument("--cores", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--plot", default=None, help="write the scaling figures to this folder")
    args = parser.parse_args()
    config = load_config(args.config)
    x = np.random.default_rng(0).standard_normal((args.rows, 512)).astype(np.float32) * 0.01
    run(rows_kernel.build(x, config=config).program, config)  # warm up the jitted kernels
    one_cpu_s = 0.0
    for cores in args.cores:
        program = spmd(lambda _: rows_kernel.build(x, config=config).program, cores)
        wall, cpu, simulated = float("inf"), float("inf"), 0.0
        for _ in range(3):
            began, began_cpu = time.perf_counter(), time.process_time()
            simulated = run(program, config).summary.total_ns
            cpu = min(cpu, time.process_time() - began_cpu)
            wall = min(wall, time.perf_counter() - began)
        one_cpu_s = one_cpu_s or cpu
        ratio = cpu / one_cpu_s
        verdict = "PASS" if ratio <= cores else "FAIL"
        print(f"{cores:>2} cores: simulated {simulated / 1e3:8.1f} µs, wall {wall:6.2f} s, "
              f"CPU {cpu:6.2f} s, {ratio:4.2f}x one core's CPU (target <= {cores}x) "
              f"{verdict}")  # fmt: skip
    if args.plot is not None:
        plot_split(x, config, args.cores, Path(args.plot))


def split_runs(x: np.ndarray, config: Any, cores: list[int]) -> list[Any]:
    """The rows of ``x`` split evenly over each core count: each run's ``RunResult``."""
    results = []
    for n in cores:
        share = x.shape[0] // n
        if share % 128 or share * n != x.shape[0]:
            raise SystemExit(f"--rows {x.shape[0]} does not split into {n} x 128-row blocks")
        program = spmd(
            lambda k, share=share: (
                rows_kernel.build(x[k * share : (k + 1) * share], config=config).program
            ),
            n,
        )
        results.append(run(program, config))
    return results


def plot_split(x: np.ndarray, config: Any, cores: list[int], folder: Path) -> None:
    from hwsim.plots.multicore_plots import plot_core_utilisation, plot_scaling

    ordered = sorted(set(cores) | {1})
    results = split_runs(x, config, ordered)
    times = [r.summary.total_ns for r in results]
    folder.mkdir(parents=True, exist_ok=True)
    for n, t in zip(ordered, times, strict=True):
        print(f"split over {n:>2} cores: simulated {t / 1e3:8.1f} µs, "
              f"speed-up {times[0] / t:5.2f}x (ideal {n}x)")  # fmt: skip
    plot_scaling(ordered, times, folder / "scaling.png", f"{x.shape[0]} rows split over N cores")
    plot_core_utilisation(results[-1].trace, folder / "core_utilisation.png",
                          f"per-core utilisation, {ordered[-1]} cores")  # fmt: skip
    print(f"wrote {folder / 'scaling.png'} and {folder / 'core_utilisation.png'}")


if __name__ == "__main__":
    main()
