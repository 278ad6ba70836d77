"""Simulator speed on the V1 program, against its targets, one line per measurement.

    .venv/bin/python bench/speed.py [--trials 3] [--skip-numerics]

V1 is ``matmul_optimized`` (the NKI tutorial's ``nki_matmul_fully_optimized_``) on lhsT [8192, 4096]
x rhs [8192, 8192] bf16 on trn1, as in bench/fidelity.py. Measured:

- timing-only: instructions simulated per wall second of ``run(..., numerics=False)`` (target
  >= 100,000; building the program is timed apart and not counted), best of ``--trials`` runs
  after a warm-up, beside a bare SimPy loop of one ``timeout`` per instruction in the same
  process. If V1 has fewer than 50,000 instructions, the same kernel at a larger N is measured too;
- numerics: ``run(..., numerics=True)`` wall time over numpy's time for the same matmul (fp32
  ``lhsT.T @ rhs`` of the same bf16 values, same process, so the same BLAS threads: hwsim sets one
  unless OPENBLAS_NUM_THREADS says otherwise), and numpy in a fresh process with its default BLAS
  threads (all cores); target <= 3x for each. The Numba caches are warmed first;
- the cycle-by-cycle systolic array model (``kernels.systolic``, as in bench/systolic_speed.py):
  simulated PE-cycles per wall second (no target).

Each target prints PASS or MISS, and a MISS says what bounds it; the script always exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import hwsim  # noqa: F401  (first: sets one BLAS thread before numpy loads, see hwsim/__init__.py)

# isort: split
import ml_dtypes
import numpy as np
import simpy

from hwsim.config import HardwareConfig, load_config
from hwsim.kernels.systolic import SystolicArray
from hwsim.lang import TensorSpec
from hwsim.library import matmul_optimized
from hwsim.machine.simulator import run
from hwsim.program import Program

TARGET_INSTRUCTIONS_PER_S = 100_000
TARGET_NUMERICS_RATIO = 3.0
MIN_INSTRUCTIONS = 50_000
CONFIG = "trn1"
V1_MKN = (4096, 8192, 8192)  # out[M, N] = lhsT[K, M].T @ rhs[K, N]


def build_v1(m: int, k: int, n: int, config: HardwareConfig, data: bool) -> Program:
    """The V1 kernel's program at [M, K, N], with seeded bf16 inputs if ``data``."""
    if data:
        lhs_t, rhs = _inputs(m, k, n)
        return matmul_optimized.build(lhs_t, rhs, config=config).program
    lhs_t_spec, rhs_spec = TensorSpec((k, m), "bf16"), TensorSpec((k, n), "bf16")
    return matmul_optimized.build(lhs_t_spec, rhs_spec, config=config).program


def _inputs(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    lhs_t = rng.standard_normal((k, m), dtype=np.float32).astype(ml_dtypes.bfloat16)
    rhs = rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
    return lhs_t, rhs


def best_of(trials: int, fn: Callable[[], object]) -> tuple[float, float]:
    """(best, median) wall seconds of ``trials`` calls."""
    times = []
    for _ in range(trials):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def bare_simpy_seconds(events: int) -> float:
    """One SimPy process yielding ``events`` one-tick timeouts: the floor of one event each."""
    env = simpy.Environment()

    def loop():
        for _ in range(events):
            yield env.timeout(1)

    env.process(loop())
    start = time.perf_counter()
    env.run()
    return time.perf_counter() - start


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def timing_only(program: Program, config: HardwareConfig, trials: int, label: str) -> None:
    """Instructions per wall second of a timing-only run, beside the bare SimPy loop."""
    warm = run(program, config, numerics=False, summarize=False)  # first-use imports and caches
    count = program.instruction_count
    best, median = best_of(trials, lambda: run(program, config, numerics=False, summarize=False))
    bare = min(bare_simpy_seconds(count) for _ in range(trials))
    rate, bare_rate = count / best, count / bare
    ok = rate >= TARGET_INSTRUCTIONS_PER_S
    print(
        f"timing-only, {label}: {count:,} instructions in {best * 1e3:.0f} ms (median "
        f"{median * 1e3:.0f} ms) -> {rate:,.0f} instructions/s   target >= "
        f"{TARGET_INSTRUCTIONS_PER_S:,}   {verdict(ok)}"
    )
    print(
        f"  bare SimPy loop, one timeout per instruction, same process: {bare_rate:,.0f} events/s"
        f" ({bare / count * 1e6:.2f} us each); simulator / bare = {rate / bare_rate:.3f}"
    )
    if not ok:
        pieces = len(warm.trace.dma)
        print(
            f"  bound: {best / count * 1e6:.1f} us per instruction, for {count:,} instructions "
            f"and {pieces:,} DMA pieces (one SimPy event each at {bare / count * 1e6:.2f} us) plus "
            "the Python work per instruction (legality/cost lookup, semaphores, trace records)"
        )


def numerics(config: HardwareConfig, m: int, k: int, n: int, trials: int) -> None:
    """Wall time with numerics over numpy's time for the same matmul, twice: numpy in this process
    (the BLAS threads hwsim runs with) and numpy in a fresh process with its default threads."""
    small = build_v1(256, 512, 1024, config, data=True)
    run(small, config, numerics=True, summarize=False)  # warms the Numba caches
    program = build_v1(m, k, n, config, data=True)
    start = time.perf_counter()
    result = run(program, config, numerics=True, summarize=False)
    sim_s = time.perf_counter() - start
    lhs_t, rhs = _inputs(m, k, n)
    a, b = lhs_t.astype(np.float32), rhs.astype(np.float32)
    numpy_s, _ = best_of(trials, lambda: a.T @ b)
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    print(
        f"numerics, [{m}, {k}] x [{k}, {n}] bf16 ({program.instruction_count:,} instructions): "
        f"{sim_s:.2f} s"
    )
    out = result.outputs["out"].astype(np.float32)
    reference = a.T @ b
    error = float(np.max(np.abs(out - reference)) / np.max(np.abs(reference)))
    print(f"  output max |error| / max |C| against numpy: {error:.1e} (bf16 output)")
    del result, out, reference
    default_s = _numpy_default_threads_seconds(m, k, n, trials)
    misses = 0
    for what_numpy, seconds in (
        (f"numpy fp32 matmul, this process (OPENBLAS_NUM_THREADS={threads})", numpy_s),
        (f"numpy fp32 matmul, default BLAS threads ({os.cpu_count()} cores)", default_s),
    ):
        ok = sim_s / seconds <= TARGET_NUMERICS_RATIO
        misses += not ok
        print(
            f"  vs {what_numpy}: {seconds:.2f} s -> {sim_s / seconds:.2f}x   target <= "
            f"{TARGET_NUMERICS_RATIO:g}x   {verdict(ok)}"
        )
    if misses:
        _numerics_bound(program, sim_s, default_s)


def _numerics_bound(program: Program, sim_s: float, numpy_s: float) -> None:
    tiles = sum(
        1 for core in program.cores for _, _, i in core.instructions() if i.OPCODE == "nc_matmul"
    )
    sgemm_s = tiles * _tile_sgemm_seconds()
    print(
        f"  bound: the {tiles:,} tile sgemms ([128, 128] x [128, 512], this process's BLAS "
        f"threads) alone take ~{sgemm_s:.2f} s = {sgemm_s / numpy_s:.2f}x numpy's one big "
        f"multi-threaded sgemm; the rest (PSUM accumulation and copies, bf16 widening, DMA "
        f"copies, VectorE/ScalarE ops, the simulation) adds ~{max(0.0, sim_s - sgemm_s):.2f} s"
    )


def _numpy_default_threads_seconds(m: int, k: int, n: int, trials: int) -> float:
    """numpy's fp32 [K, M]^T x [K, N] (best of ``trials``) in a fresh process that leaves the BLAS
    threads at their default."""
    code = (
        "import time, numpy as np\n"
        "r = np.random.default_rng(0)\n"
        f"a = r.standard_normal(({k}, {m}), dtype=np.float32)\n"
        f"b = r.standard_normal(({k}, {n}), dtype=np.float32)\n"
        "a.T @ b\n"
        "best = float('inf')\n"
        f"for _ in range({trials}):\n"
        "    t = time.perf_counter(); a.T @ b; best = min(best, time.perf_counter() - t)\n"
        "print(best)\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return float(done.stdout.strip())


def _tile_sgemm_seconds() -> float:
    """Wall seconds of one [128, 128]^T x [128, 512] fp32 matmul (best of 200)."""
    rng = np.random.default_rng(0)
    stationary = rng.standard_normal((128, 128), dtype=np.float32)
    moving = rng.standard_normal((128, 512), dtype=np.float32)
    out = np.empty((128, 512), np.float32)
    np.matmul(stationary.T, moving, out=out)
    best, _ = best_of(200, lambda: np.matmul(stationary.T, moving, out=out))
    return best


def systolic(trials: int, repeats: int = 32) -> None:
    """PE-cycles per wall second of the cycle-level array model (bench/systolic_speed.py's case:
    128 x 128 array, [128, 128] x [128, 512] repeated, weights loaded 4x fast)."""
    rng = np.random.default_rng(0)
    stationary = rng.integers(-4, 5, size=(128, 128)).astype(np.float32)
    moving = rng.integers(-4, 5, size=(128, 512)).astype(np.float32)
    array = SystolicArray(128, 128, fast_load_factor=4)
    result = array.matmul(stationary, moving, repeats)  # warm-up and JIT compilation
    best, _ = best_of(trials, lambda: array.matmul(stationary, moving, repeats))
    print(
        f"systolic model, 128x128 array, {repeats} x [128,128]x[128,512] with numerics: "
        f"{result.total_cycles:,} cycles in {best * 1e3:.0f} ms -> "
        f"{result.pe_cycles / best / 1e6:,.0f} M PE-cycles/s (no target)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3, help="timed runs; the best is reported")
    parser.add_argument("--skip-numerics", action="store_true")
    args = parser.parse_args()
    config = load_config(CONFIG)
    m, k, n = V1_MKN

    start = time.perf_counter()
    program = build_v1(m, k, n, config, data=False)
    build_s = time.perf_counter() - start
    print(
        f"V1 = matmul_optimized lhsT [{k}, {m}] x rhs [{k}, {n}] bf16 on {CONFIG}: "
        f"{program.instruction_count:,} instructions, built in {build_s:.2f} s (not counted)"
    )
    timing_only(program, config, args.trials, "V1")
    if program.instruction_count < MIN_INSTRUCTIONS:
        scale = -(-MIN_INSTRUCTIONS // program.instruction_count)
        bigger = build_v1(m, k, n * scale, config, data=False)
        timing_only(bigger, config, args.trials, f"V1 kernel at N={n * scale} (>= 50,000)")
    del program
    if not args.skip_numerics:
        numerics(config, m, k, n, args.trials)
    systolic(args.trials)


if __name__ == "__main__":
    main()
