"""A DDP training step of GPT-2 on N simulated NeuronCores through the "hwsim" backend.

    .venv/bin/python bench/distributed.py [--model tiny|small] [--ranks 8] [--config trn2]
                                          [--bucket-mb 25] [--seq 64]

Unmodified DDP code (``DDP(model)``, then ``torch.compile(ddp, backend="hwsim")``, fallback
'error') runs on ``ranks`` threads of this process, each rank a simulated core, each with its own
sequence. Prints the gradients' largest difference from eager's full-batch gradients (target:
within fp32 tolerance), then per rank the step's compute, communication, overlapped and exposed
communication and bytes per link, and the wall time.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, default="tiny")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--config", default="trn2")
    parser.add_argument("--bucket-mb", type=float, default=25.0)
    parser.add_argument("--seq", type=int, default=64)
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
    reference = copy.deepcopy(base)
    reference(ids, labels=ids, use_cache=False).loss.backward()

    def rank_step(rank: int) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        model = copy.deepcopy(base)
        ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
        step = torch.compile(
            ddp, backend="hwsim", options={"fallback": "error", "auto_cast": "none"}
        )
        mine = ids[rank : rank + 1]
        step(mine, labels=mine, use_cache=False).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}, api.report()

    start = time.perf_counter()
    results = run_threads(rank_step, args.ranks)
    wall_s = time.perf_counter() - start
    worst = max(
        (grads[name] - p.grad).abs().max().item()
        for name, p in reference.named_parameters()
        for grads, _ in results
    )
    verdict = "ok" if worst <= TOLERANCE else "FAIL"
    print(f"GPT-2 {args.model}, DDP over {args.ranks} ranks on {args.config}, seq {args.seq}")
    print(f"gradients vs eager: max |diff| {worst:.3g} (target <= {TOLERANCE:g}) {verdict}")
    print(f"{'rank':>4} {'compute us':>11} {'comm us':>9} {'overlap us':>10} {'exposed us':>10} "
          f"{'colls':>5}  bytes per link")  # fmt: skip
    for _, report in results:
        total = report["total"]
        print(
            f"{report['rank']:>4} {total['compute_ns'] / 1e3:>11.1f} "
            f"{total['communication_ns'] / 1e3:>9.1f} {total['overlapped_ns'] / 1e3:>10.1f} "
            f"{total['exposed_ns'] / 1e3:>10.1f} {total['collectives']:>5}  {total['link_bytes']}"
        )
    print(f"wall time {wall_s:.1f} s")


if __name__ == "__main__":
    main()
