"""Speed of the cycle-level systolic array model: simulated PE-cycles per wall second.

Runs a [K, M] x [K, N] matmul (default [128, 128] x [128, 512], bf16-like fp32 data) repeated
back to back on a rows x cols array (default 128 x 128, weights loaded 4x fast in the background),
after a warm-up run that also compiles the Numba kernels. PE-cycles = rows * cols * cycles.

    .venv/bin/python bench/systolic_speed.py [--repeats 32] [--trials 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hwsim.kernels.systolic import SystolicArray


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--cols", type=int, default=128)
    parser.add_argument("--k", type=int, default=128)
    parser.add_argument("--m", type=int, default=128)
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=32, help="matmuls per simulation")
    parser.add_argument("--trials", type=int, default=3, help="timed runs; the best is reported")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    stationary = rng.integers(-4, 5, size=(args.k, args.m)).astype(np.float32)
    moving = rng.integers(-4, 5, size=(args.k, args.n)).astype(np.float32)
    array = SystolicArray(args.rows, args.cols, fast_load_factor=4)
    shape = (args.k, args.m, args.n)

    array.matmul(stationary, moving, args.repeats)  # warm-up, and JIT compilation
    best = float("inf")
    for _ in range(args.trials):
        start = time.perf_counter()
        run = array.matmul(stationary, moving, args.repeats)
        best = min(best, time.perf_counter() - start)
    assert run.result is not None
    assert np.array_equal(run.result, args.repeats * (stationary.T @ moving))

    array.matmul_timing(*shape, args.repeats)
    start = time.perf_counter()
    array.matmul_timing(*shape, args.repeats)
    timing_s = time.perf_counter() - start

    print(
        f"array {args.rows}x{args.cols}, {args.repeats} x [{args.k},{args.m}]x[{args.k},{args.n}]: "
        f"{run.total_cycles} cycles, {run.pe_cycles:.3e} PE-cycles"
    )
    print(
        f"with numerics: {best * 1e3:.1f} ms -> {run.pe_cycles / best / 1e6:.0f} M PE-cycles/s "
        f"({run.total_cycles / best / 1e6:.2f} M array-cycles/s)"
    )
    print(
        f"timing only:   {timing_s * 1e3:.2f} ms -> {run.total_cycles / timing_s / 1e6:.2f} M "
        "array-cycles/s"
    )


if __name__ == "__main__":
    main()
