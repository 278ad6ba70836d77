"""Simulator speed against issue 16's targets, each printed next to its target with PASS or MISS.

    .venv/bin/python bench/speed.py [--trials 3] [--size v1|tiny] [--large] [--skip-numerics]
                                    [--json]

V1 is ``matmul_optimized`` (the NKI tutorial's ``nki_matmul_fully_optimized_``) on lhsT [8192, 4096]
x rhs [8192, 8192] bf16 on trn1 (38,656 instructions), as in bench/fidelity.py. ``--size tiny``
measures the same kernel on [512, 256] x [512, 1024] (for tests of this script: its figures are
not the targets' and its verdicts mean nothing). Measured, cold (the first call in this process)
and warm (best of ``--trials`` calls after it):

- build: instructions per wall second of ``matmul_optimized.build`` from tensor specs (target
  >= 100,000/s); beside it, for comparison only, the same build with ``lang.repeat`` running
  its body every time (the rate of a kernel without batched emission);
- timing-only simulation: timed items (instructions plus DMA pieces, every record of the trace)
  per wall second of ``run(..., numerics=False, summarize=False)``, beside a bare SimPy loop of one
  ``timeout`` per timed item in the same process (target: simulator / bare >= 0.5);
- summary: ``summarize(trace)`` of that run over the simulation's time (target <= 0.5);
- trace writing: the Perfetto/Chrome JSON trace of that run (``write_chrome_events``, streamed to
  the null device, so the disk is not measured) in events per wall second and over the
  simulation's time (no target: a figure to watch; its memory is bounded by a slow test);
- numerics: ``run(..., numerics=True)`` wall time over numpy's fp32 ``lhsT.T @ rhs`` of the same
  bf16 values in this process, so at the same BLAS thread count (hwsim sets one unless
  OPENBLAS_NUM_THREADS says otherwise; target <= 3x). The Numba caches are warmed first.
  Beside it, the same run with initcheck (reads of never-written memory; on by default in the
  kernel front doors) over the run without it: what the default costs (no target);
- ``--large``: the same kernel at a larger N giving >= 1,000,000 instructions (tiny: >= 5,000),
  built, simulated timing-only and summarised in a fresh process: end-to-end wall time (target
  < 30 s) and that process's own peak RSS (``own_peak_rss_mb``; target < 1,500 MB); then its
  trace written as above (its time beside, not in, the end-to-end figure).

Timing targets hold on an idle machine; when the load average exceeds the core count the script
says so, and a MISS may then be the load. ``--json`` prints one JSON object instead of the
lines (the ``million_instr_*`` keys are null without ``--large``). The script always exits 0.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import hwsim  # noqa: F401  (first: sets one BLAS thread before numpy loads, see hwsim/__init__.py)

# isort: split
import ml_dtypes
import numpy as np
import simpy

from hwsim import lang
from hwsim.config import HardwareConfig, load_config
from hwsim.lang import TensorSpec
from hwsim.library import matmul_optimized
from hwsim.machine.simulator import run
from hwsim.program import Program
from hwsim.trace.chrome import write_chrome_events
from hwsim.trace.stats import summarize

CONFIG = "trn1"
#: out[M, N] = lhsT[K, M].T @ rhs[K, N]; per size: the measured shape and the --large program's
#: minimum instruction count (reached by scaling N).
SIZES = {
    "v1": ((4096, 8192, 8192), 1_000_000),
    "tiny": ((256, 512, 1024), 5_000),
}
TARGET_BUILD_INSTRUCTIONS_PER_S = 100_000
TARGET_SIM_OVER_BARE = 0.5
TARGET_SUMMARY_OVER_SIM = 0.5
TARGET_NUMERICS_OVER_NUMPY = 3.0
TARGET_LARGE_END_TO_END_S = 30.0
TARGET_LARGE_PEAK_RSS_MB = 1500.0


@dataclass
class Timed:
    """Wall seconds of the first call (cold) and the best of the calls after it (warm)."""

    cold_s: float
    warm_s: float


def timed(trials: int, fn: Callable[[], object]) -> tuple[Timed, object]:
    """Call ``fn`` once cold, then ``trials`` times; the times and the last call's result.

    Each call starts from a collected heap: otherwise a full collection the previous step left
    pending (a build defers them) lands in whichever timed call comes next, and the ratios of
    two measures (simulation / bare SimPy) moved by up to 30% between otherwise equal runs.
    The previous call's result is dropped first, so each call starts from the heap one call
    finds (not with the previous program alive beside the one being built)."""
    gc.collect()
    start = time.perf_counter()
    result = fn()
    cold = time.perf_counter() - start
    best = cold  # no warm calls: the cold one is all there is
    for _ in range(trials):
        result = None
        gc.collect()
        start = time.perf_counter()
        result = fn()
        elapsed = time.perf_counter() - start
        best = elapsed if _ == 0 else min(best, elapsed)
    return Timed(cold, best), result


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


def bare_simpy_seconds(events: int) -> float:
    """One SimPy process yielding ``events`` one-tick timeouts: the floor of one event each."""
    env = simpy.Environment()

    def loop():
        for _ in range(events):
            yield env.timeout(1)

    env.process(loop())
    gc.collect()  # as ``timed`` does for the simulation
    start = time.perf_counter()
    env.run()
    return time.perf_counter() - start


def measure_build(shape: tuple[int, int, int], config: HardwareConfig, trials: int) -> dict:
    times, program = timed(trials, lambda: build_v1(*shape, config, data=False))
    count = program.instruction_count  # type: ignore[attr-defined]
    with blocks_run_every_time():
        plain, _ = timed(trials, lambda: build_v1(*shape, config, data=False))
    return {
        "program": program,
        "instructions": count,
        "build_cold_s": times.cold_s,
        "build_warm_s": times.warm_s,
        "build_instructions_per_s": count / times.warm_s,
        "build_cold_instructions_per_s": count / times.cold_s,
        "build_without_repeat_instructions_per_s": count / plain.warm_s,
    }


@contextmanager
def blocks_run_every_time() -> Iterator[None]:
    """``lang.repeat`` runs its body every time: the build as a kernel that does not use it
    (every ISA call made, or copied when equal to an earlier one) would go. For this figure
    only: the programs are the same (tests/lang/test_replay.py)."""
    kept = lang.repeat

    def run_body(body: Callable[[], None], *_: Any, **__: Any) -> None:
        body()

    lang.repeat = run_body  # type: ignore[assignment]  (the library calls ``lang.repeat``)
    try:
        yield
    finally:
        lang.repeat = kept  # type: ignore[assignment]


def write_trace_to_null(trace: Any, summary: Any) -> int:
    """The run's JSON trace streamed to the null device; the number of events written."""
    with open(os.devnull, "w") as out:
        return write_chrome_events(trace, out, summary=summary)


def measure_sim(program: Program, config: HardwareConfig, trials: int) -> dict:
    """Timing-only simulation, its summary and its trace, cold and warm, beside the bare SimPy
    loop."""
    sim_times, result = timed(trials, lambda: run(program, config, numerics=False, summarize=False))
    trace = result.trace  # type: ignore[attr-defined]
    summary_times, summary = timed(trials, lambda: summarize(trace))
    write_times, events = timed(trials, lambda: write_trace_to_null(trace, summary))
    items = len(trace.instructions) + len(trace.dma)
    bare_s = min(bare_simpy_seconds(items) for _ in range(max(trials, 1)))
    sim_rate, bare_rate = items / sim_times.warm_s, items / bare_s
    return {
        "sim_items": items,
        "sim_dma_pieces": len(trace.dma),
        "sim_cold_s": sim_times.cold_s,
        "sim_warm_s": sim_times.warm_s,
        "sim_items_per_s": sim_rate,
        "sim_cold_items_per_s": items / sim_times.cold_s,
        "sim_instructions_per_s": program.instruction_count / sim_times.warm_s,
        "bare_simpy_events_per_s": bare_rate,
        "sim_over_bare": sim_rate / bare_rate,
        "summary_cold_s": summary_times.cold_s,
        "summary_warm_s": summary_times.warm_s,
        "summary_over_sim": summary_times.warm_s / sim_times.warm_s,
        "summary_cold_over_sim": summary_times.cold_s / sim_times.cold_s,
        "trace_events": events,
        "trace_write_warm_s": write_times.warm_s,
        "trace_write_cold_s": write_times.cold_s,
        "trace_events_per_s": cast(int, events) / write_times.warm_s,
        "trace_write_over_sim": write_times.warm_s / sim_times.warm_s,
    }


def measure_numerics(shape: tuple[int, int, int], config: HardwareConfig, trials: int) -> dict:
    """Numerics run over numpy's same matmul in this process (the same BLAS threads)."""
    m, k, n = shape
    small = build_v1(128, 128, 512, config, data=True)
    run(small, config, numerics=True, summarize=False)  # warms the Numba caches
    program = build_v1(m, k, n, config, data=True)
    times, result = timed(  # one warm call: a V1 numerics run takes seconds
        min(trials, 1),
        lambda: run(program, config, numerics=True, summarize=False, initcheck=False),
    )
    checked, _ = timed(  # initcheck: on by default in the kernel front doors
        min(trials, 1),
        lambda: run(program, config, numerics=True, summarize=False, initcheck=True),
    )
    lhs_t, rhs = _inputs(m, k, n)
    a, b = lhs_t.astype(np.float32), rhs.astype(np.float32)
    numpy_times, reference = timed(trials, lambda: a.T @ b)
    out = result.outputs["out"].astype(np.float32)  # type: ignore[attr-defined]
    ref = np.asarray(reference)
    error = float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))
    return {
        "numerics_cold_s": times.cold_s,
        "numerics_warm_s": times.warm_s,
        "numpy_s": numpy_times.warm_s,
        "numerics_over_numpy": times.warm_s / numpy_times.warm_s,
        "initcheck_warm_s": checked.warm_s,
        "initcheck_cost": checked.warm_s / times.warm_s,
        "numerics_rel_error": error,
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
    }


def own_peak_rss_mb() -> float:
    """This process's peak resident memory in MB: Linux's VmHWM, the high-water mark of the
    memory this program has mapped since it started.

    Not ``getrusage(RUSAGE_SELF).ru_maxrss``: a child started by ``subprocess`` (vfork, then
    exec) inherits its parent's peak in it, so the large run reported the parent's numerics
    peak (~1.6 GB) as its own (~1.2 GB). Where there is no /proc (macOS), ru_maxrss it is, in
    its unit there (bytes), with that caveat."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 / 1024 if sys.platform == "darwin" else peak / 1024


_LARGE_CODE = """
import json, sys, time
sys.path.insert(0, {bench_dir!r})
import speed
from hwsim.config import load_config
config = load_config(speed.CONFIG)
m, k, n = {shape!r}
start = time.perf_counter()
program = speed.build_v1(m, k, n, config, data=False)
built = time.perf_counter()
result = speed.run(program, config, numerics=False, summarize=False)
simulated = time.perf_counter()
summary = speed.summarize(result.trace)
done = time.perf_counter()
peak_rss_mb = speed.own_peak_rss_mb()
events = speed.write_trace_to_null(result.trace, summary)
written = time.perf_counter()
print(json.dumps({{
    "instructions": program.instruction_count,
    "build_s": built - start, "sim_s": simulated - built, "summary_s": done - simulated,
    "end_to_end_s": done - start,
    "peak_rss_mb": peak_rss_mb,
    "trace_events": events, "trace_s": written - done,
    "trace_peak_rss_mb": speed.own_peak_rss_mb(),
}}))
"""


def measure_large(size: str, first: int, config: HardwareConfig) -> dict:
    """The V1 kernel scaled in N to the size's minimum instruction count, in a fresh process
    (so its peak RSS is its own, ``own_peak_rss_mb``): end-to-end time and peak RSS.

    The count grows linearly in whole multiples of N (one more N block's loads, matmuls and
    stores each), so the multiple comes from the counts at N and 2N."""
    (m, k, n), minimum = SIZES[size]
    per_multiple = build_v1(m, k, 2 * n, config, data=False).instruction_count - first
    multiple = max(1, -(-(minimum - (first - per_multiple)) // per_multiple))
    shape = (m, k, n * multiple)
    code = _LARGE_CODE.format(bench_dir=str(Path(__file__).parent), shape=shape)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "large_shape": list(shape),
        "large_instructions": found["instructions"],
        "large_build_s": found["build_s"],
        "large_sim_s": found["sim_s"],
        "large_summary_s": found["summary_s"],
        "million_instr_end_to_end_s": found["end_to_end_s"],
        "million_instr_peak_rss_mb": found["peak_rss_mb"],
        "large_trace_events": found["trace_events"],
        "large_trace_s": found["trace_s"],
        "large_trace_peak_rss_mb": found["trace_peak_rss_mb"],
    }


def load_note() -> tuple[float, int, bool]:
    """(1-minute load average, cores, whether the machine is loaded: load above the cores)."""
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    return load, cores, load > cores


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def print_report(r: dict[str, Any], size: str) -> None:
    m, k, n = r["shape"]
    print(
        f"{size}: matmul_optimized lhsT [{k}, {m}] x rhs [{k}, {n}] bf16 on {CONFIG}: "
        f"{r['instructions']:,} instructions, {r['sim_items']:,} timed items "
        f"({r['sim_dma_pieces']:,} DMA pieces); cold = first call, warm = best of {r['trials']}"
    )
    rows: list[tuple[str, str, str, bool | None]] = [  # None: a figure with no target
        (
            "build",
            f"{r['build_instructions_per_s']:,.0f} instructions/s warm ({r['build_warm_s']:.2f} s;"
            f" cold {r['build_cold_s']:.2f} s = {r['build_cold_instructions_per_s']:,.0f}/s)",
            f">= {TARGET_BUILD_INSTRUCTIONS_PER_S:,}/s",
            r["build_instructions_per_s"] >= TARGET_BUILD_INSTRUCTIONS_PER_S,
        ),
        (
            "build, lang.repeat off (for comparison: a kernel without batched emission)",
            f"{r['build_without_repeat_instructions_per_s']:,.0f} instructions/s warm",
            "",
            None,
        ),
        (
            "timing-only simulation",
            f"{r['sim_items_per_s']:,.0f} items/s warm ({r['sim_warm_s']:.2f} s, "
            f"{r['sim_instructions_per_s']:,.0f} instructions/s; cold {r['sim_cold_s']:.2f} s) "
            f"/ bare SimPy {r['bare_simpy_events_per_s']:,.0f} events/s = "
            f"{r['sim_over_bare']:.3f}",
            f">= {TARGET_SIM_OVER_BARE:g} of bare",
            r["sim_over_bare"] >= TARGET_SIM_OVER_BARE,
        ),
        (
            "summary",
            f"{r['summary_warm_s']:.2f} s warm / simulation {r['sim_warm_s']:.2f} s = "
            f"{r['summary_over_sim']:.2f} (cold {r['summary_cold_over_sim']:.2f})",
            f"<= {TARGET_SUMMARY_OVER_SIM:g}x",
            r["summary_over_sim"] <= TARGET_SUMMARY_OVER_SIM,
        ),
        (
            "trace writing (JSON, to the null device)",
            f"{r['trace_events_per_s']:,.0f} events/s warm ({r['trace_events']:,} events in "
            f"{r['trace_write_warm_s']:.2f} s; cold {r['trace_write_cold_s']:.2f} s) = "
            f"{r['trace_write_over_sim']:.2f}x the simulation",
            "",
            None,
        ),
    ]
    if r["numerics_over_numpy"] is not None:
        rows.append(
            (
                "numerics",
                f"{r['numerics_warm_s']:.2f} s / numpy {r['numpy_s']:.2f} s (same process, "
                f"OPENBLAS_NUM_THREADS={r['blas_threads']}) = {r['numerics_over_numpy']:.2f}x; "
                f"max |error| / max |C| {r['numerics_rel_error']:.1e}",
                f"<= {TARGET_NUMERICS_OVER_NUMPY:g}x",
                r["numerics_over_numpy"] <= TARGET_NUMERICS_OVER_NUMPY,
            )
        )
        rows.append(
            (
                "numerics with initcheck (on by default in hwsim run, hwsim nki and kernel "
                "calls; --no-initcheck / initcheck=False turn it off)",
                f"{r['initcheck_warm_s']:.2f} s = {r['initcheck_cost']:.2f}x the run without it",
                "",
                None,
            )
        )
    if r["million_instr_end_to_end_s"] is not None:
        rows += [
            (
                f"large ({r['large_instructions']:,} instructions), end to end",
                f"{r['million_instr_end_to_end_s']:.1f} s (build {r['large_build_s']:.1f}, "
                f"simulate {r['large_sim_s']:.1f}, summary {r['large_summary_s']:.1f})",
                f"< {TARGET_LARGE_END_TO_END_S:g} s",
                r["million_instr_end_to_end_s"] < TARGET_LARGE_END_TO_END_S,
            ),
            (
                "large, peak RSS",
                f"{r['million_instr_peak_rss_mb']:,.0f} MB",
                f"< {TARGET_LARGE_PEAK_RSS_MB:,.0f} MB",
                r["million_instr_peak_rss_mb"] < TARGET_LARGE_PEAK_RSS_MB,
            ),
            (
                "large, its JSON trace written after (not in the end-to-end time)",
                f"{r['large_trace_events']:,} events in {r['large_trace_s']:.1f} s, peak RSS "
                f"then {r['large_trace_peak_rss_mb']:,.0f} MB",
                "",
                None,
            ),
        ]
    for what, figure, target, ok in rows:
        if ok is None:
            print(f"  {what}: {figure}")
        else:
            print(f"  {what}: {figure}   target {target}   {verdict(ok)}")
    if r["machine_loaded"]:
        print(
            f"  note: the machine is loaded (load average {r['load_average']:.1f} on "
            f"{r['cpu_count']} cores, before and after): a MISS of a time target may be the load"
        )
    if size != "v1":
        print(f"  note: size {size} is for tests of this script; the targets are V1's")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    config = load_config(CONFIG)
    shape, _ = SIZES[args.size]
    load_before, cores, _ = load_note()
    built = measure_build(shape, config, args.trials)
    program = built.pop("program")
    report: dict[str, Any] = {"size": args.size, "shape": list(shape), "trials": args.trials}
    report |= built
    report |= measure_sim(program, config, args.trials)
    del program
    report |= {"numerics_over_numpy": None}
    if not args.skip_numerics:
        report |= measure_numerics(shape, config, args.trials)
    report |= {"million_instr_end_to_end_s": None, "million_instr_peak_rss_mb": None}
    if args.large:
        report |= measure_large(args.size, report["instructions"], config)
    load_after = os.getloadavg()[0]
    load = max(load_before, load_after)
    report |= {"load_average": load, "cpu_count": cores, "machine_loaded": load > cores}
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3, help="warm calls; the best is reported")
    parser.add_argument("--size", choices=sorted(SIZES), default="v1")
    parser.add_argument("--large", action="store_true", help="also the >= 1M-instruction run")
    parser.add_argument("--skip-numerics", action="store_true")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    args = parser.parse_args(argv)
    report = measure(args)
    if args.json:
        print(json.dumps(report))
    else:
        print_report(report, args.size)


if __name__ == "__main__":
    main()
