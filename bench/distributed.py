"""DDP training steps of GPT-2 on N simulated NeuronCores through the "hwsim" backend.

    .venv/bin/python bench/distributed.py [--model tiny|small] [--ranks 8] [--config trn2]
                                          [--bucket-mb 25] [--seq 64] [--steps 2]

Unmodified DDP code (``DDP(model)``, then ``torch.compile(ddp, backend="hwsim")``, fallback
'error') runs on ``ranks`` threads of this process, each rank a simulated core, each with its own
sequence, for ``steps`` backward passes (gradients zeroed between them). Prints the last step's
gradients' largest difference from eager's full-batch gradients (target: within fp32
tolerance), then per rank and step the compute, communication, overlapped and exposed
communication, the step's time and bytes per link, and the wall time.

DDP's first step all-reduces every gradient in one bucket after the whole backward (PyTorch
builds its size-capped buckets from the order the gradients became ready in that step), so
overlap shows from the second step on.
"""

from __future__ import annotations

import argparse
import copy
import time
from typing import Any

import torch
import transformers
from torch.nn.parallel import DistributedDataParallel

import hwsim.bridge  # noqa: F401  (registers the "hwsim" backend and the compile backend)
from hwsim.bridge.distributed import api
from hwsim.bridge.distributed.threads import run_threads

MODELS = {
    "tiny": {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 128, "n_positions": 64},
    "small": {"n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024},
}
TOLERANCE = 1e-4  # largest |grad - eager grad| accepted (fp32 sums in another order)


def _rank_copy(base: torch.nn.Module, shared: bool) -> torch.nn.Module:
    """A rank's model: a deep copy, or with ``shared`` one whose parameters are new Parameters
    on ``base``'s storage (DDP ranks start from identical parameters, and these steps only
    read them: each rank's gradients stay its own)."""
    if not shared:
        return copy.deepcopy(base)
    memo = {id(p): torch.nn.Parameter(p.detach(), p.requires_grad) for p in base.parameters()}
    return copy.deepcopy(base, memo)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, default="tiny")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--config", default="trn2")
    parser.add_argument("--bucket-mb", type=float, default=25.0)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument(
        "--shared-weights", action="store_true",
        help="rank threads read one copy of the (identical) parameters; gradients live in "
        "DDP's buckets (gradient_as_bucket_view)",
    )  # fmt: skip
    args = parser.parse_args()
    api.configure(args.config)
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        **MODELS[args.model], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
    )
    base = transformers.GPT2LMHeadModel(config).train()
    vocab = config.vocab_size
    ids = torch.randint(
        0, vocab, (args.ranks, args.seq), generator=torch.Generator().manual_seed(2)
    )
    base(ids, labels=ids, use_cache=False).loss.backward()  # eager's full-batch gradients
    reference = {n: p.grad for n, p in base.named_parameters()}
    base.zero_grad(set_to_none=True)

    def rank_step(rank: int) -> tuple[float, dict[str, Any]]:
        model = _rank_copy(base, args.shared_weights)
        ddp = DistributedDataParallel(
            model, bucket_cap_mb=args.bucket_mb, init_sync=not args.shared_weights,
            gradient_as_bucket_view=args.shared_weights,
        )  # fmt: skip
        step = torch.compile(
            ddp, backend="hwsim", options={"fallback": "error", "auto_cast": "none"}
        )
        mine = ids[rank : rank + 1]
        for _ in range(args.steps):
            model.zero_grad()
            step(mine, labels=mine, use_cache=False).loss.backward()
        grads = model.named_parameters()
        worst = max((p.grad - reference[n]).abs().max().item() for n, p in grads)
        return worst, api.report()

    start = time.perf_counter()
    results = run_threads(rank_step, args.ranks)
    wall_s = time.perf_counter() - start
    worst = max(diff for diff, _ in results)
    verdict = "ok" if worst <= TOLERANCE else "FAIL"
    print(f"GPT-2 {args.model}, DDP over {args.ranks} ranks on {args.config}, seq {args.seq}, "
          f"{args.steps} steps")  # fmt: skip
    print(f"gradients vs eager: max |diff| {worst:.3g} (target <= {TOLERANCE:g}) {verdict}")
    print(f"{'rank':>4} {'step':>4} {'compute us':>11} {'comm us':>9} {'overlap us':>10} "
          f"{'exposed us':>10} {'step us':>9} {'colls':>5}  bytes per link")  # fmt: skip
    for _, report in results:
        for step_index, split in report["steps"].items():
            print(
                f"{report['rank']:>4} {step_index:>4} {split['compute_ns'] / 1e3:>11.1f} "
                f"{split['communication_ns'] / 1e3:>9.1f} {split['overlapped_ns'] / 1e3:>10.1f} "
                f"{split['exposed_ns'] / 1e3:>10.1f} {split['time_ns'] / 1e3:>9.1f} "
                f"{split['collectives']:>5}  {split['link_bytes']}"
            )
    print(f"wall time {wall_s:.1f} s")


if __name__ == "__main__":
    main()
