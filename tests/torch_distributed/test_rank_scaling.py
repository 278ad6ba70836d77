"""What N ranks on threads of one process cost beyond N times one rank: nothing a rank could
share with the others is done once per rank."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

import hwsim.bridge  # noqa: F401  (registers the backend)
from hwsim.bridge.distributed import process_group
from hwsim.bridge.distributed.shared_reduction import entries_held
from hwsim.bridge.distributed.threads import run_threads


def _values(seed: int, n: int) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


def test_ranks_on_threads_combine_a_reduction_once_and_each_gets_the_rank_order_sum(monkeypatch):
    n, size = 4, 1000
    adds: list[str] = []

    def counted_add(total: np.ndarray, values: np.ndarray, out: np.ndarray) -> np.ndarray:
        adds.append("add")
        return np.add(total, values, out=out)

    monkeypatch.setitem(process_group._REDUCE, process_group._OPS.SUM, counted_add)

    def run(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        summed = _values(rank, size)
        dist.all_reduce(summed)
        share = torch.zeros(size // n)
        dist.reduce_scatter_tensor(share, _values(100 + rank, size))
        return summed, share

    results = run_threads(run, n)
    # one combination of the n ranks' values per collective (n - 1 adds), not one per rank
    assert len(adds) == 2 * (n - 1)
    assert entries_held() == 0
    want_sum, want_scattered = _values(0, size).numpy().copy(), _values(100, size).numpy().copy()
    for rank in range(1, n):  # fp32, rank 0 first
        want_sum += _values(rank, size).numpy()
        want_scattered += _values(100 + rank, size).numpy()
    for rank, (summed, share) in enumerate(results):
        assert np.array_equal(summed.numpy(), want_sum)
        assert np.array_equal(share.numpy(), np.split(want_scattered, n)[rank])
    assert len({summed.data_ptr() for summed, _ in results}) == n  # each rank's own tensor


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.tanh(self.up(x)))


def test_no_more_ranks_run_a_graph_at_once_than_the_gate_has_permits(monkeypatch):
    """Rank threads take a permit to run a compiled graph (its simulation and checks), so
    that ranks beyond the CPUs wait instead of each holding a graph's memory; the values
    are the same as without the gate."""
    import threading
    import time

    from hwsim.bridge import compiled
    from hwsim.bridge.distributed import rank_gate

    monkeypatch.setattr(rank_gate, "_PERMITS", threading.BoundedSemaphore(1))
    running, most = [0], [0]
    lock = threading.Lock()
    real_run = compiled.SimPartition._run

    def counted_run(self, lowered, args):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)  # long enough for another rank to arrive if it could
        try:
            return real_run(self, lowered, args)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(compiled.SimPartition, "_run", counted_run)
    torch.manual_seed(0)
    reference = _Mlp()  # the same parameters as _ddp_step's model (seeded alike)
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    reference(x).square().mean().backward()
    for grads in _ddp_step(4):
        for name, p in reference.named_parameters():
            torch.testing.assert_close(grads[name], p.grad, rtol=1e-5, atol=1e-6)
    assert most[0] == 1


def _ddp_step(world_size: int) -> list[dict[str, torch.Tensor]]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    base = _Mlp()
    x = torch.randn(2 * world_size, 16, generator=torch.Generator().manual_seed(1))

    def step(rank: int) -> dict[str, torch.Tensor]:
        model = _Mlp()
        model.load_state_dict(base.state_dict())
        options = {"fallback": "error", "auto_cast": "none"}
        ddp = torch.compile(DDP(model), backend="hwsim", options=options)
        ddp(x[2 * rank : 2 * rank + 2]).square().mean().backward()
        return {k: p.grad for k, p in model.named_parameters()}

    return run_threads(step, world_size)


def test_ranks_lower_each_graph_once_and_keep_no_run_after_it(monkeypatch):
    """Four ranks lower the programs one rank lowers, once (the ranks share them), and no
    simulation's result (trace, simulated HBM, outputs) outlives the graph's call."""
    import gc

    from hwsim.bridge.graph_lowering import programs_lowered
    from hwsim.bridge.lowering_cache import LOWERED
    from hwsim.machine.simulator import RunResult

    monkeypatch.setenv("HWSIM_LOWERING_CACHE", "off")
    lowered = []
    for world_size in (1, 4):
        LOWERED.clear()
        torch._dynamo.reset()
        before = programs_lowered()
        results = _ddp_step(world_size)
        lowered.append(programs_lowered() - before)
        assert len(results) == world_size
    assert lowered[0] > 0 and lowered[1] == lowered[0]
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o) is RunResult]
