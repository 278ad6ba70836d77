"""Ranks in separate processes (torch.multiprocessing.spawn) meet over the c10d store."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hwsim.bridge.distributed.fabric import StoreFabric, _encode
from hwsim.errors import HwsimError
from hwsim.machine.collectives import Arrival
from tests.torch_distributed.spawned_ranks import TinyMlp, rank_main, tiny_batch


@pytest.mark.slow  # two processes importing torch and compiling a model: about 30 s
def test_spawned_rank_processes_meet_over_the_store_and_simulate_their_compiled_graphs(tmp_path):
    """Exact values and agreed ticks over the store, and a compiled DDP step whose graphs run
    on each rank's simulated core (compute timed) with the full batch's eager gradients."""
    n = 2
    mp.spawn(rank_main, args=(n, str(tmp_path / "store"), str(tmp_path)), nprocs=n, join=True)
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(n)]
    for got in seen:
        assert got["fabric"] == "StoreFabric"  # not one process: the store carried the values
        assert got["sum"] == [0.0, 3.0, 6.0, 9.0]
        assert got["gathered"] == [0, 7]
    starts_ends = [[tick[1:] for tick in got["ticks"]] for got in seen]
    assert starts_ends[0] == starts_ends[1]  # both ranks: the same start and end
    first = [got["ticks"][0] for got in seen]
    assert first[0][0] < first[1][0] == first[0][1]  # rank 1 arrived last; it set the start
    torch.manual_seed(0)
    reference = TinyMlp()
    reference(tiny_batch()).square().mean().backward()
    for got in seen:
        ddp = got["ddp"]
        assert ddp["graphs"] - got["report"]["graphs"] >= 2  # forward and backward simulated
        assert ddp["compute_ns"] > got["report"]["compute_ns"]
        assert ddp["collectives"] > got["report"]["collectives"]  # DDP's all-reduce too
        assert got["in_graph"] == [[7.0] * 8] * 4  # (1 + 2) x 2 + 1, over the store
        kind, start, end, graph = got["in_graph_collective"]
        assert kind == "all_reduce" and graph[0] <= start < end <= graph[1]  # inside the graph
        assert [start, end] == seen[0]["in_graph_collective"][1:3]  # both ranks agree
        for name, p in reference.named_parameters():
            torch.testing.assert_close(torch.tensor(got["grads"][name]), p.grad, rtol=1e-5,
                                       atol=1e-6)  # fmt: skip


def test_the_store_fabric_exchanges_arrivals_and_values_and_tidies_its_keys():
    """The store path without processes: two threads joining one collective over a HashStore."""
    store = dist.HashStore()
    fabric = StoreFabric(store, timedelta(seconds=30))
    released: dict[int, object] = {}

    def join(rank: int) -> None:
        values = np.arange(3, dtype=np.float32) + 10 * rank
        fabric.join(
            Arrival(((0, 1), 0), "all_reduce of 12 B", rank, 2, 100 * (rank + 1), 40, values,
                    lambda release: released.__setitem__(rank, release))
        )  # fmt: skip

    threads = [threading.Thread(target=join, args=(r,)) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for rank in range(2):
        release = released[rank]
        assert (release.start, release.end, release.arrivals) == (200, 240, (100, 200))
        assert [s.tolist() for s in release.sources] == [[0, 1, 2], [10, 11, 12]]
    assert store.num_keys() == 0  # the last reader deleted the collective's keys


def test_the_store_fabric_refuses_ranks_running_different_collectives():
    store = dist.HashStore()
    fabric = StoreFabric(store, timedelta(seconds=30))
    store.set("hwsim/c/0/1", _encode(0, 1, "all_gather of 4 B", None))
    with pytest.raises(HwsimError, match="rank 1 runs all_gather of 4 B"):
        fabric.join(Arrival(((0, 1), 0), "all_reduce of 4 B", 0, 2, 0, 1, None, lambda r: None))
