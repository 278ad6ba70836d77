"""Simulation cost of many cores: N cores running the same program cost at most N times one
core's wall time.

    .venv/bin/python bench/chip_scaling.py [--config trn2] [--cores 1 2 4 8] [--rows 4096]

Each core loads row tiles of a [rows, 512] fp32 tensor, applies 4 ScalarE activations and stores
them (one SPMD program merged from per-core builds, ``hwsim.chip.spmd``; the cores share the
chip's HBM stacks). Printed per core count: the simulated time, the wall and CPU time of the
simulation (best of 3, numerics on) and the CPU time's ratio to one core's; target: ratio <= N.
The verdict takes CPU time: a simulation is one thread, so on an idle machine its CPU time is its
wall time, and on a shared one CPU time is what the other processes do not inflate.
"""

from __future__ import annotations

import argparse
import time

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
        print(f"{cores:>2} cores: simulated {simulated / 1e3:8.1f} us, wall {wall:6.2f} s, "
              f"CPU {cpu:6.2f} s, {ratio:4.2f}x one core's CPU (target <= {cores}x) "
              f"{verdict}")  # fmt: skip


if __name__ == "__main__":
    main()
