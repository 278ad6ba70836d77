"""The PyTorch bridge end to end: tiny GPT-2 (or Llama) forward on the simulated NeuronCore.

    .venv/bin/python bench/bridge.py [--model gpt2|llama] [--config trn2] [--trials 3]

The model runs through ``torch.compile(backend="hwsim")``, built from a ``transformers`` config
with random weights (nothing downloaded): GPT-2 with 2 layers, 128 wide, 4 heads, vocabulary 512
(Llama: the same size, 2 KV heads); batch 2 x 16 tokens, ``use_cache=False``, fallback 'error'
(every op on the simulator). Measured, each on one line:

- CPU PyTorch eager: the median wall time of the forward pass (after a warm-up call);
- first call: dynamo capture + AOTAutograd + lowering + one simulation with numerics (what a
  user waits for); target < 30 s wall;
- steady call: the median of later calls (the lowered program is cached: fill inputs, simulate
  with numerics, return the logits; the check against the CPU is off), and its ratio to eager;
- the simulated time, instructions, MFU and bottleneck of one forward pass, its HBM peak (with
  the scratch part with and without the memory plan), and the top ops by simulated time (each
  op's bound time: its busiest engine or DMA share).

Each target prints PASS or MISS; the script always exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path and this module would shadow
# the ``bridge`` package it measures: drop that entry before importing it.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import hwsim  # noqa: E402,F401  (first: one BLAS thread before numpy loads, see hwsim/__init__.py)

# isort: split
import torch  # noqa: E402
import torch._dynamo  # noqa: E402

from hwsim import bridge  # noqa: E402

TARGET_FIRST_CALL_S = 30.0


def build(name: str) -> torch.nn.Module:
    from hwsim.bridge.models import tiny_gpt2, tiny_llama

    return tiny_gpt2() if name == "gpt2" else tiny_llama()


def timed(fn, trials: int) -> tuple[float, object]:
    """(median wall seconds of ``trials`` calls, the last result)."""
    times, result = [], None
    for _ in range(trials):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("gpt2", "llama"), default="gpt2")
    parser.add_argument("--config", default="trn2")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()

    model = build(args.model)
    ids = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(1))
    options = {"config": args.config, "fallback": "error", "check": False}
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)  # warm-up: lazy initialisation is not the model
        eager_s, expected = timed(lambda: model(input_ids=ids, use_cache=False).logits, 20)
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="hwsim", options=options)
        first_s, _ = timed(lambda: compiled(input_ids=ids, use_cache=False).logits, 1)
        steady_s, got = timed(lambda: compiled(input_ids=ids, use_cache=False).logits, args.trials)
    report = bridge.last_report()
    run = report.runs[-1]
    error = float((got - expected).abs().max())  # type: ignore[operator]

    print(f"tiny {args.model} forward, batch 2 x 16 tokens, config {args.config}")
    print(f"  CPU eager                 {eager_s * 1e3:10.2f} ms")
    print(
        f"  first call (compile+sim)  {first_s:10.2f} s    target < {TARGET_FIRST_CALL_S:.0f} s: "
        f"{verdict(first_s < TARGET_FIRST_CALL_S)}"
    )
    print(f"  steady call (simulate)    {steady_s:10.2f} s    {steady_s / eager_s:,.0f}x CPU eager")
    print(
        f"  ops on the simulator      {len(report.lowered()):10d}      on the CPU: "
        f"{len(report.fallbacks())}; max |logits - CPU| {error:.2e}"
    )
    print(
        f"  simulated time            {run['total_ns'] / 1e3:10.2f} µs   "
        f"{run['instructions']} instructions, MFU {run['mfu_pct']:.2f} %"
    )
    print(f"  bottleneck                {run['bottleneck']}")
    print(
        f"  HBM peak                  {run['hbm_peak_bytes'] / 1e6:10.2f} MB   scratch "
        f"{run['hbm_scratch_peak_bytes'] / 1e6:.2f} MB with the memory plan, "
        f"{run['hbm_scratch_unplanned_bytes'] / 1e6:.2f} MB without"
    )
    print("  top ops by simulated time (bound time; span in the whole-graph schedule):")
    for record in report.top_ops(10):
        print(
            f"    {record.node:24s} {record.op:32s} {record.sim_ns / 1e3:8.2f} µs "
            f"(span {record.span_ns / 1e3:7.2f} µs, {record.instructions} instructions)"
        )


if __name__ == "__main__":
    main()
