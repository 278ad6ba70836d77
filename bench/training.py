"""A training step on the simulated NeuronCore: tiny GPT-2, forward + backward + AdamW.

    .venv/bin/python bench/training.py [--config trn2] [--steps 3] [--check]

The model (``bridge.training.tiny_gpt2_for_training``: 2 layers, 128 wide, 4 heads, vocabulary
512, dropout 0) and ``AdamW.step`` each go through ``torch.compile(backend="hwsim")`` with
fallback 'error' (every op of every phase on the simulator), on batch 1 x 16 tokens with
labels = ids. The same steps run eagerly on the CPU from the same weights. Printed:

- the simulated time per step of each phase (forward, backward, optimizer: the runs of the
  phase's graphs, averaged over the steps) and the nodes each phase lowered / ran on the CPU;
- wall time: the first step (capture + AOTAutograd + lowering + simulation) and a later one;
- the largest difference of any parameter from eager's after the last step, judged with the
  fp32 tolerance (PASS/MISS), apart from the elements whose gradient was nonzero but below
  ``TINY`` (their largest difference is printed; docs/training.md says why); the losses.

``--check`` also compares every graph's outputs with the CPU (slower). Always exits 0.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent  # (see bench/bridge.py: don't shadow ``bridge``)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import hwsim  # noqa: E402,F401  (first: one BLAS thread before numpy loads)

# isort: split
import torch  # noqa: E402

from hwsim.bridge.models import tokens  # noqa: E402
from hwsim.bridge.precision import TOLERANCES, compare  # noqa: E402
from hwsim.bridge.training import tiny_gpt2_for_training, train_steps  # noqa: E402

PHASES = ("forward", "backward", "optimizer")
#: Gradients below this (10 x AdamW's eps) get updates ~ lr * g / eps: judged apart.
TINY = 1e-7


def adamw(parameters):  # type: ignore[no-untyped-def]
    return torch.optim.AdamW(parameters, lr=1e-3, weight_decay=0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="trn2")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()

    model = tiny_gpt2_for_training()
    reference = copy.deepcopy(model)
    ids = tokens(1, 16, seed=2)
    options = {"config": args.config, "fallback": "error", "check": args.check}
    start = time.perf_counter()
    run = train_steps(model, adamw, ids, steps=args.steps, options=options, tiny_gradient=TINY)
    wall_s = time.perf_counter() - start
    eager = train_steps(reference, adamw, ids, steps=args.steps, compiled=False, tiny_gradient=TINY)
    report = run.report
    times = report.phase_times()

    print(f"tiny GPT-2 training step (AdamW), batch 1 x 16 tokens, config {args.config}")
    print(f"  {args.steps} steps in {wall_s:.1f} s wall (compile on the first)")
    total = 0.0
    for phase in PHASES:
        records = [r for r in report.ops if r.phase == phase]
        per_step = times.get(phase, 0.0) / args.steps
        total += per_step
        cpu = sum(r.status == "cpu" for r in records)
        print(
            f"  {phase:10s} {per_step / 1e3:10.2f} µs simulated per step   "
            f"{len(records) - cpu} nodes on the simulator, {cpu} on the CPU"
        )
    print(f"  step total {total / 1e3:10.2f} µs simulated")
    worst, name, ok, tiny_count, tiny_drift, elements = 0.0, "", True, 0, 0.0, 0
    for (n, got), (_, want) in zip(
        model.named_parameters(), reference.named_parameters(), strict=True
    ):
        tiny = run.tiny_gradients[n] | eager.tiny_gradients[n]
        kept = ~tiny
        stats = compare(got.detach()[kept], want.detach()[kept], TOLERANCES["fp32"])
        ok = ok and stats.ok
        if stats.max_abs >= worst:
            worst, name = stats.max_abs, n
        drift = (got - want).detach().abs()[tiny]
        tiny_count += int(tiny.sum())
        elements += tiny.numel()
        tiny_drift = max(tiny_drift, float(drift.max()) if drift.numel() else 0.0)
    print(
        f"  parameters vs eager after {args.steps} steps: max abs {worst:.2e} ({name}), "
        f"fp32 tolerance: {'PASS' if ok else 'MISS'}"
    )
    print(
        f"    except {tiny_count} of {elements} elements whose gradient was 0 < |g| < {TINY:g} "
        f"(AdamW's update amplifies its rounding by lr/eps): max abs {tiny_drift:.2e}"
    )
    print(f"  CPU ops: {len(report.fallbacks())} (fallback 'error')")
    print("  losses simulated " + " ".join(f"{x:.6f}" for x in run.losses))
    print("  losses eager     " + " ".join(f"{x:.6f}" for x in eager.losses))


if __name__ == "__main__":
    main()
