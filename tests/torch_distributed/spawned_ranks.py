"""Rank processes for tests/torch_distributed: started by torch.multiprocessing.spawn, they meet
over the c10d store (a FileStore) and write what they saw to ``out/rank<r>.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import hwsim.bridge  # noqa: F401  (registers the backend)
from hwsim.bridge.distributed import api
from hwsim.bridge.distributed.clock import current_clock


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
        Path(out, f"rank{rank}.json").write_text(
            json.dumps({"sum": summed.tolist(), "gathered": gathered.tolist(),
                        "fabric": fabric, "ticks": ticks, "report": api.report()["total"]})
        )  # fmt: skip
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit("run by tests/torch_distributed/test_processes.py")
