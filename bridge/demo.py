"""The model half of the main job: tiny GPT-2 through ``torch.compile(backend="hwsim")`` on trn2.

    .venv/bin/python -m bridge.demo [--config trn2] [--out DIR]

Builds GPT-2 (2 layers, 128 wide, 4 heads, vocabulary 512) from a ``transformers`` config with
random weights (nothing is downloaded), compiles it with every op required on the simulator
(fallback 'error'), runs one forward pass of 2 x 16 tokens, compares the logits with CPU PyTorch,
prints the bridge report, and writes the run's trace, tables and plots.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import hwsim  # noqa: F401  (first: one BLAS thread before numpy loads)

# isort: split
import torch

from hwsim.bridge.models import tiny_gpt2, tokens
from hwsim.units import time_text


def main(argv: list[str] | None = None) -> int:
    from hwsim.bridge.dynamo import last_report
    from hwsim.cli.main import add_out_argument
    from hwsim.trace.outputs import default_run_dir

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="trn2")
    add_out_argument(parser, "output folder (default: a new one under traces/)", type=Path)
    parser.add_argument(
        "--force", action="store_true", help="write into a non-empty --out that is not a run folder"
    )
    args = parser.parse_args(argv)
    out = args.out or default_run_dir(f"demo-gpt2-{args.config}")
    model = tiny_gpt2()
    ids = tokens(2, 16)
    options = {"config": args.config, "fallback": "error", "trace": str(out), "force": args.force}
    compiled = torch.compile(model, backend="hwsim", options=options, dynamic=False)
    print(f"hwsim demo: tiny GPT-2 forward (2 x 16 tokens) via torch.compile on {args.config}\n")
    start = time.perf_counter()
    with torch.no_grad():
        logits = compiled(ids, use_cache=False).logits
        expected = model(ids, use_cache=False).logits
    wall_s = time.perf_counter() - start
    report = last_report()
    report.print()
    error = float((logits - expected).abs().max())
    ok = report.numerics_ok and not report.fallbacks()
    judged = _tolerance_text(report, tuple(logits.shape))
    print(
        f"\nlogits vs CPU PyTorch: max abs error {error:.2e}{judged}; "
        f"CPU ops: {len(report.fallbacks())}"
    )
    print(f"simulated {time_text(report.total_sim_ns)} of NeuronCore time in {wall_s:.1f} s")
    print(_before_after(model, ids, args.config, report.total_sim_ns))
    print(f"wrote {out}/ (one run folder per compiled graph: trace.json, tables/, *.png)")
    first = min((p.parent for p in Path(out).glob("*/trace.json")), default=None)
    if first is not None:
        print(
            f"next: look at {first}/timeline.png, or drag {first}/trace.json into "
            "https://ui.perfetto.dev to browse every instruction; report.txt has the tables"
        )
    return 0 if ok else 1


def _before_after(model: torch.nn.Module, ids: torch.Tensor, config: str, after_ns: float) -> str:
    """The graph compiler's effect on this model: the same compile with every pass off
    (``options={"passes": "none"}``, timing only), against the run above (all passes on)."""
    from hwsim.bridge.dynamo import last_report

    options: dict[str, Any] = {
        "config": config,
        "fallback": "error",
        "passes": "none",
        "check": False,
    }
    torch._dynamo.reset()  # compile afresh: not the graphs cached for the options above
    unoptimized = torch.compile(model, backend="hwsim", options=options, dynamic=False)
    with torch.no_grad():
        unoptimized(ids, use_cache=False)
    before_ns = last_report().total_sim_ns
    return (
        f"graph passes (bridge.passes): {time_text(before_ns)} with every pass off -> "
        f"{time_text(after_ns)} with all on ({before_ns / max(after_ns, 1e-9):.2f}x)"
    )


def _tolerance_text(report: Any, shape: tuple[int, ...]) -> str:
    """The tolerance the bridge's check judged an output of ``shape`` at (its dtype's), to print
    beside the error: `` (tolerance rtol 0.0156, atol 1e-05 in bf16)``; empty if unchecked."""
    records = [*report.eager_outputs, *report.outputs]
    record = next((r for r in records if tuple(r.shape) == shape), None)
    if record is None:
        return ""
    stats = record.stats
    return f" (tolerance rtol {stats.rtol:.3g}, atol {stats.atol:.3g} in {record.computed_in})"


if __name__ == "__main__":
    raise SystemExit(main())
