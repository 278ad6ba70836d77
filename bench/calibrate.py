"""Calibration: the DMA parameters set from the calibration set (HARDWARE.md §5), and how.

    .venv/bin/python bench/calibrate.py           # solve, print the derivation and the preset lines
    .venv/bin/python bench/calibrate.py --check   # exit 1 unless the presets hold what it solves

Only two numbers come from published whole-kernel timings, both from the calibration set, both
DMA efficiencies on the saturation curve of [S11][S12] (``dma.descriptor_efficiency``,
``hwsim.cost.dma``): every other parameter comes from a documented rule or is a named
assumption (configs/*.yaml say which).

1. ``descriptor_efficiency[1024]`` from V1b and V1c (trn1): their loads are almost all rhs
   tiles [128 x 512] bf16, one 1 KiB row per descriptor, and both kernels are DMA-bound. The
   efficiency is set so that the geometric mean of their simulated / published times is 1.
2. ``descriptor_efficiency[256]`` from V1a given (1): a fifth of V1a's bytes are lhsT tiles
   [128 x 128] bf16, one 256-byte row per descriptor. Solved so V1a's error is 0, then held at
   most at the 1 KiB value: the documented curve never falls with size ([S11]: "256 B - 2 KiB
   improving"), so a solution above it is clamped and the residual printed, not hidden.

``4096: 1.0`` is the documented saturation point ([S11][S12]), not calibrated; trn2 and trn3 use
the trn1 curve (an assumption: [S11] states the curve in bytes for every generation). Each solve
is a secant iteration on the simulated time, which for a DMA-bound kernel is nearly proportional
to 1 / efficiency. The programs are built once; each step is one timing-only simulation.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from hwsim.config import HardwareConfig, load_config
from hwsim.lang import TensorSpec
from hwsim.library import matmul_block_free, matmul_hoisted, matmul_tiled
from hwsim.machine.simulator import run
from hwsim.program import Program

#: HARDWARE.md §5: lhsT [8192, 4096] and rhs [8192, 8192] bf16 on one trn1 core, published ms.
CASES = {
    "V1a": (matmul_tiled, 51.80),
    "V1b": (matmul_hoisted, 42.96),
    "V1c": (matmul_block_free, 22.07),
}
SHAPE = (8192, 4096, 8192)  # K, M, N
#: Secant steps stop when the error is below this (percent).
TOLERANCE_PCT = 0.05
PRESETS = ("trn1", "trn2", "trn3")


@dataclass
class Built:
    name: str
    program: Program
    published_ms: float


def build_cases() -> list[Built]:
    k, m, n = SHAPE
    built = []
    for name, (kernel, published) in CASES.items():
        start = time.perf_counter()
        program = kernel.build(
            TensorSpec((k, m), "bf16"), TensorSpec((k, n), "bf16"), config="trn1"
        ).program
        print(
            f"  built {name} ({kernel.name}): {program.instruction_count:,} instructions in "
            f"{time.perf_counter() - start:.1f} s"
        )
        built.append(Built(name, program, published))
    return built


def simulated_ms(case: Built, config: HardwareConfig) -> float:
    result = run(case.program, config, numerics=False, summarize=False)
    return result.trace.ticks_to_ns(result.trace.end_tick) / 1e6


def with_curve(e256: float, e1024: float) -> HardwareConfig:
    curve = {256: e256, 1024: e1024, 4096: 1.0}
    return load_config("trn1", {"dma.descriptor_efficiency": curve})


def secant(error_pct: Callable[[float], float], x0: float, x1: float, label: str) -> float:
    """A root of ``error_pct`` near x0, x1 (printed step by step)."""
    f0 = error_pct(x0)
    print(f"    {label} = {x0:.4f}: error {f0:+.2f}%")
    for _ in range(12):
        f1 = error_pct(x1)
        print(f"    {label} = {x1:.4f}: error {f1:+.2f}%")
        if abs(f1) < TOLERANCE_PCT or f1 == f0:
            return x1
        x0, x1, f0 = x1, x1 - f1 * (x1 - x0) / (f1 - f0), f1
        x1 = min(1.0, max(0.01, x1))
    return x1


def error_pct(case: Built, config: HardwareConfig) -> float:
    return 100.0 * (simulated_ms(case, config) - case.published_ms) / case.published_ms


def solve(cases: list[Built]) -> tuple[float, float, dict[str, float]]:
    by_name = {c.name: c for c in cases}
    print("step 1: descriptor_efficiency[1024] from V1b and V1c (1 KiB rhs rows)")

    def mean_error(e1024: float) -> float:
        config = with_curve(e1024, e1024)
        ratios = [1 + error_pct(by_name[n], config) / 100 for n in ("V1b", "V1c")]
        return 100.0 * (math.sqrt(ratios[0] * ratios[1]) - 1)

    e1024 = round(secant(mean_error, 0.35, 0.40, "e1024"), 3)
    print("step 2: descriptor_efficiency[256] from V1a (a fifth of its bytes in 256 B lhsT rows)")
    e256 = secant(
        lambda e: error_pct(by_name["V1a"], with_curve(e, e1024)), e1024, e1024 * 0.9, "e256"
    )
    if e256 > e1024:
        print(
            f"    {e256:.4f} would exceed the 1 KiB value: the curve does not fall with size "
            f"([S11]), held at {e1024:.3f}"
        )
        e256 = e1024
    e256 = round(e256, 3)
    config = with_curve(e256, e1024)
    errors = {c.name: error_pct(c, config) for c in cases}
    return e256, e1024, errors


def preset_curve(name: str) -> dict[int, float]:
    return {int(k): v for k, v in load_config(name).dma.descriptor_efficiency.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="fail unless the presets hold the solution"
    )
    args = parser.parse_args(argv)
    print("building the calibration kernels (trn1, timing only)")
    cases = build_cases()
    e256, e1024, errors = solve(cases)
    print("\nresult (trn1, the curve every preset uses):")
    print(f'  descriptor_efficiency: {{"256": {e256:.3f}, "1024": {e1024:.3f}, "4096": 1.0}}')
    for name, err in errors.items():
        print(f"  {name}: error {err:+.2f}% with these values")
    expected = {256: e256, 1024: e1024, 4096: 1.0}
    stale = [p for p in PRESETS if preset_curve(p) != expected]
    if stale:
        print(f"\npresets that differ from the solution: {', '.join(stale)}")
        for p in stale:
            print(f"  {p}: {preset_curve(p)}")
    else:
        print("\nevery preset holds these values")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
