"""Rank processes for tests/torch_distributed: started by torch.multiprocessing.spawn, they meet
over the c10d store (a FileStore) and write what they saw to ``out/rank<r>.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import hwsim.bridge  # noqa: F401  (registers the backend)
from hwsim.bridge.distributed import api
from hwsim.bridge.distributed.clock import current_clock


class TinyMlp(nn.Module):
    """A model class of the user's: dynamo traces its forward under DDP (torch.nn's own
    modules reached through DDP it skips)."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.tanh(self.up(x)))


class ReduceInGraph(nn.Module):
    """An all-reduce inside a compiled graph (a _c10d_functional node)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import torch.distributed._functional_collectives as funcol

        return funcol.all_reduce(x * 2.0, "sum", dist.group.WORLD) + 1.0


def tiny_batch() -> torch.Tensor:
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(3))


def rank_main(rank: int, world_size: int, store_path: str, out: str) -> None:
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group("hwsim", store=store, rank=rank, world_size=world_size)
    try:
        clock = current_clock()
        clock.graph_ran("before", "forward", 500.0 * rank)
        summed = torch.arange(4.0) * (rank + 1)
        dist.all_reduce(summed)
        gathered = torch.zeros(world_size, dtype=torch.int64)
        dist.all_gather_into_tensor(gathered, torch.tensor([rank * 7]))
        fabric = type(dist.distributed_c10d._get_default_group().fabric).__name__
        ticks = [(c.arrival_tick, c.start_tick, c.end_tick) for c in clock.collectives]
        before = api.report()["total"]
        # a compiled DDP step: its graphs must reach the bridge in a rank process too
        torch.manual_seed(0)
        model = TinyMlp()
        options = {"fallback": "error", "auto_cast": "none"}
        compiled = torch.compile(DDP(model), backend="hwsim", options=options)
        share = tiny_batch().chunk(world_size)[rank]
        compiled(share).square().mean().backward()
        after = api.report()["total"]
        # a collective inside a compiled graph meets the other process's over the store
        in_graph = torch.compile(ReduceInGraph(), backend="hwsim", options=options)
        with torch.no_grad():
            reduced = in_graph(torch.full((4, 8), float(rank + 1)))
        last = clock.collectives[-1]
        Path(out, f"rank{rank}.json").write_text(
            json.dumps({"sum": summed.tolist(), "gathered": gathered.tolist(),
                        "fabric": fabric, "ticks": ticks, "report": before, "ddp": after,
                        "in_graph": reduced.tolist(), "in_graph_collective": [
                            last.kind, last.start_tick, last.end_tick,
                            [(c.start_tick, c.end_tick) for c in clock.computes][-1]],
                        "grads": {k: p.grad.tolist() for k, p in model.named_parameters()}})
        )  # fmt: skip
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit("run by tests/torch_distributed/test_processes.py")
