"""The checks every generated case goes through, each a named property that could fail:

- ``build``: the case builds and simulates (a valid case must; an error is a finding);
- ``race``: the race checker and initcheck see no unordered conflict and no read of unwritten
  bytes (the builder inserts the semaphores, so a race is the builder's bug);
- ``numerics``: each output is within the dtype's tolerance of the NumPy reference;
- ``determinism``: a second build and run gives the same ticks and the same output bytes;
- ``roofline``: the run is no shorter than its floor (TensorE FLOPs at peak, HBM and DMA bytes
  at full bandwidth);
- ``monotone``: the same program is not slower on a machine with faster engine clocks, more DMA
  bandwidth or more HBM bandwidth (beyond ``MONOTONE_SLACK``);
- ``schedule``: the ``best`` schedule, which claims never to lose, is no slower than program
  order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hwsim.config import load_config
from hwsim.errors import HwsimError

#: Max |error| allowed, as a share of max(1, max |reference|), per dtype: bf16 keeps 8 bits, and
#: a value may round differently in fp32 than in the float64 reference (one ulp, 2^-8) and carry
#: through the chain; fp32 is held to the fp32 rounding of a few ops.
TOLERANCE = {"fp32": 1e-4, "bf16": 4e-2}
#: A faster machine may be this much slower before it counts (DMA queues share engines by
#: processor sharing, which is not exactly monotone).
MONOTONE_SLACK = 0.001
#: Faster machines the monotone check simulates the same program on (config overrides).
FASTER = {
    "engine clocks x2": lambda c: {
        f"{s}.clock_mhz": 2 * getattr(c, s).clock_mhz
        for s in ("tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine")
    },
    "DMA bandwidth x2": lambda c: {"dma.bandwidth_bytes_per_ns": 2 * c.dma.bandwidth_bytes_per_ns},
    "HBM bandwidth x2": lambda c: {
        "hbm.bandwidth_bytes_per_ns_per_stack": 2 * c.hbm.bandwidth_bytes_per_ns_per_stack
    },
}
CHECKS = ("build", "race", "numerics", "determinism", "roofline", "monotone", "schedule")


@dataclass(frozen=True)
class Failure:
    check: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"check": self.check, "message": self.message}


def check_case(spec: dict[str, Any], config_name: str = "trn2", seed: int = 0) -> list[Failure]:
    """Every check of the module docstring on one case; the failures found (empty: it passed).
    A failing build stops the checks that need a run."""
    from hwsim.fuzz.interpret import inputs_of, kernel_of, reference
    from hwsim.kernels import warm_up
    from hwsim.machine.simulator import run

    warm_up()
    config = load_config(config_name)
    kernel = kernel_of(spec)
    inputs = inputs_of(spec, seed)
    failures: list[Failure] = []
    try:
        first = kernel(*inputs, config=config, race_check=True, initcheck=True)
    except HwsimError as exc:
        kind = "race" if type(exc).__name__ in ("RaceError", "InitCheckError") else "build"
        return [Failure(kind, f"{type(exc).__name__}: {str(exc)[:400]}")]
    failures += _numerics(spec, first.outputs, reference(spec, inputs))
    second = kernel(*inputs, config=config)
    if second.summary.total_ticks != first.summary.total_ticks or any(
        a.tobytes() != b.tobytes() for a, b in zip(first.outputs, second.outputs, strict=True)
    ):
        failures.append(
            Failure(
                "determinism",
                f"two runs differ: {first.summary.total_ticks} vs "
                f"{second.summary.total_ticks} ticks, or in output bytes",
            )
        )
    failures += _roofline(first.summary)
    program = first.program
    assert program is not None  # a kernel call keeps its program
    for what, change in FASTER.items():
        from hwsim.advise.advice import what_if_config

        faster = what_if_config(config, change(config))
        total = float(run(program, faster, numerics=False).summary.total_ns)
        if total > float(first.summary.total_ns) * (1 + MONOTONE_SLACK):
            failures.append(
                Failure(
                    "monotone",
                    f"{what}: {total:,.1f} ns, slower than "
                    f"{float(first.summary.total_ns):,.1f} ns on the base config",
                )
            )
    best = run(
        kernel.build(*inputs, config=config, schedule="best").program, config, numerics=False
    ).summary
    if best.total_ticks > first.summary.total_ticks:
        failures.append(
            Failure(
                "schedule",
                f"schedule='best' took {best.total_ticks} ticks, program order "
                f"{first.summary.total_ticks}",
            )
        )
    return failures


def _numerics(
    spec: dict[str, Any], got: tuple[np.ndarray, ...], expected: list[np.ndarray]
) -> list[Failure]:
    out = []
    tolerance = TOLERANCE[spec["dtype"]]
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        g64 = np.asarray(g, np.float64)
        if g64.shape != e.shape:
            out.append(Failure("numerics", f"output {i}: shape {g64.shape}, expected {e.shape}"))
            continue
        finite = np.isfinite(e)
        if not np.array_equal(np.isfinite(g64), finite):
            out.append(
                Failure(
                    "numerics",
                    f"output {i}: non-finite values where the reference "
                    "has finite ones (or the reverse)",
                )
            )
            continue
        err = float(np.max(np.abs(g64[finite] - e[finite]), initial=0.0))
        scale = max(1.0, float(np.max(np.abs(e[finite]), initial=0.0)))
        if err > tolerance * scale:
            where = np.unravel_index(int(np.argmax(np.where(finite, np.abs(g64 - e), 0))), e.shape)
            out.append(
                Failure(
                    "numerics",
                    f"output {i}: max |error| {err:.4g} > {tolerance:g} x "
                    f"{scale:.4g} at {tuple(int(x) for x in where)} (got {g64[where]:.6g}, "
                    f"expected {e[where]:.6g})",
                )
            )
    return out


def _roofline(summary: Any) -> list[Failure]:
    peaks = summary.peaks
    floors = {
        "TensorE FLOPs at peak": summary.flops.tensor_flops / peaks.flops_per_s * 1e9
        if peaks.flops_per_s
        else 0.0,
        "HBM bytes at peak bandwidth": summary.hbm_bytes / peaks.hbm_bytes_per_s * 1e9
        if peaks.hbm_bytes_per_s
        else 0.0,
        "DMA bytes at all engines' bandwidth": summary.dma.bytes / peaks.dma_bytes_per_s * 1e9
        if peaks.dma_bytes_per_s
        else 0.0,
    }
    total = float(summary.total_ns)
    return [
        Failure("roofline", f"{total:,.1f} ns is below the floor of {what} ({floor:,.1f} ns)")
        for what, floor in floors.items()
        if total < floor * (1 - 1e-9)
    ]
