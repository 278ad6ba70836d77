"""DDP or FSDP2 training steps of GPT-2 on N simulated NeuronCores through the "hwsim" backend.

    .venv/bin/python bench/distributed.py [--model tiny|small] [--ranks 8] [--config trn2]
                                          [--bucket-mb 25] [--seq 64] [--steps 2]
                                          [--shared-weights] [--fsdp2]

Unmodified DDP code (``DDP(model)``, then ``torch.compile(ddp, backend="hwsim")``, fallback
'error') runs on ``ranks`` threads of this process, each rank a simulated core, each with its own
sequence, for ``steps`` backward passes (gradients zeroed between them). ``--fsdp2`` runs FSDP2
instead: ``fully_shard`` on each GPT-2 block and on the root over a CPU device mesh, each block
compiled with ``block.compile(backend="hwsim")`` (fallback 'error'); the root's own ops (the
embeddings, the final layer norm, the LM head and the loss) run eagerly on the CPU, untimed.
Prints the last step's gradients' largest difference from eager's full-batch gradients
(FSDP2's gathered from the shards; target: within fp32 tolerance), then per rank and step the
compute, communication, overlapped and exposed communication, the step's time and bytes per
link, and the ranks' wall time with the process's peak resident memory.

DDP's first step all-reduces every gradient in one bucket after the whole backward (PyTorch
builds its size-capped buckets from the order the gradients became ready in that step), so
overlap shows from the second step on.
"""

from __future__ import annotations

import argparse
import copy
import resource
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
OPTIONS = {"fallback": "error", "auto_cast": "none"}


def _rank_copy(base: torch.nn.Module, shared: bool) -> torch.nn.Module:
    """A rank's model: a deep copy, or with ``shared`` one whose parameters are new Parameters
    on ``base``'s storage (DDP ranks start from identical parameters, and these steps only
    read them: each rank's gradients stay its own)."""
    if not shared:
        return copy.deepcopy(base)
    memo = {id(p): torch.nn.Parameter(p.detach(), p.requires_grad) for p in base.parameters()}
    return copy.deepcopy(base, memo)


def _ddp(model: torch.nn.Module, args: argparse.Namespace) -> Any:
    ddp = DistributedDataParallel(
        model, bucket_cap_mb=args.bucket_mb, init_sync=not args.shared_weights,
        gradient_as_bucket_view=args.shared_weights,
    )  # fmt: skip
    return torch.compile(ddp, backend="hwsim", options=OPTIONS)


def _fsdp2(model: torch.nn.Module, ranks: int) -> Any:
    """``model`` sharded by FSDP2 over a CPU mesh of ``ranks``, its blocks compiled."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (ranks,))
    for block in model.transformer.h:
        fully_shard(block, mesh=mesh)
        block.compile(backend="hwsim", options=OPTIONS)
    fully_shard(model, mesh=mesh)
    return model


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
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
        "DDP's buckets (gradient_as_bucket_view); FSDP2 shards them anyway",
    )  # fmt: skip
    parser.add_argument(
        "--fsdp2", action="store_true",
        help="FSDP2 (fully_shard each block and the root, blocks compiled) instead of DDP",
    )  # fmt: skip
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> tuple[float, list[dict[str, Any]], float]:
    """The last step's largest |grad - eager grad| over the ranks, each rank's report (taken
    before the gradients were gathered for the check) and the ranks' wall time, s."""
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
        step = _fsdp2(model, args.ranks) if args.fsdp2 else _ddp(model, args)
        mine = ids[rank : rank + 1]
        for _ in range(args.steps):
            model.zero_grad()
            step(mine, labels=mine, use_cache=False).loss.backward()
        report = api.report()
        worst = 0.0
        for name, p in model.named_parameters():  # every rank gathers FSDP2's shards in turn
            grad = p.grad.full_tensor() if args.fsdp2 else p.grad
            worst = max(worst, (grad - reference[name]).abs().max().item())
        return worst, report

    start = time.perf_counter()
    results = run_threads(rank_step, args.ranks)
    wall_s = time.perf_counter() - start
    return max(diff for diff, _ in results), [report for _, report in results], wall_s


def main() -> None:
    args = parse_args()
    worst, reports, wall_s = run(args)
    verdict = "ok" if worst <= TOLERANCE else "FAIL"
    mode = "FSDP2" if args.fsdp2 else "DDP"
    print(f"GPT-2 {args.model}, {mode} over {args.ranks} ranks on {args.config}, seq {args.seq}, "
          f"{args.steps} steps")  # fmt: skip
    print(f"gradients vs eager: max |diff| {worst:.3g} (target <= {TOLERANCE:g}) {verdict}")
    print(f"{'rank':>4} {'step':>4} {'compute us':>11} {'comm us':>9} {'overlap us':>10} "
          f"{'exposed us':>10} {'step us':>9} {'colls':>5}  bytes per link")  # fmt: skip
    for report in reports:
        for step_index, split in report["steps"].items():
            print(
                f"{report['rank']:>4} {step_index:>4} {split['compute_ns'] / 1e3:>11.1f} "
                f"{split['communication_ns'] / 1e3:>9.1f} {split['overlapped_ns'] / 1e3:>10.1f} "
                f"{split['exposed_ns'] / 1e3:>10.1f} {split['time_ns'] / 1e3:>9.1f} "
                f"{split['collectives']:>5}  {split['link_bytes']}"
            )
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux: kB
    print(f"wall time {wall_s:.1f} s, peak resident memory {peak_gb:.1f} GB")


if __name__ == "__main__":
    main()
