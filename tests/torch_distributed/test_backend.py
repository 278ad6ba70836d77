"""The "hwsim" torch.distributed backend: exact collectives, ranks agreeing on simulated time,
and unmodified DDP, FSDP2 and DTensor tensor-parallel code on ranks as threads."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import torch.distributed as dist
from torch import nn

import hwsim.bridge  # noqa: F401  (registers the backend)
from hwsim.bridge.distributed import api
from hwsim.bridge.distributed.clock import current_clock
from hwsim.bridge.distributed.threads import run_threads
from hwsim.config import load_config
from hwsim.cost import CostModel
from hwsim.errors import HwsimError

COMPILE = {"fallback": "error", "auto_cast": "none"}


def test_the_backend_is_registered_for_cpu_tensors():
    assert dist.Backend.HWSIM == "hwsim"
    assert "hwsim" in dist.Backend.backend_list


def _collectives(rank: int) -> dict[str, object]:
    n = dist.get_world_size()
    clock = current_clock()
    clock.graph_ran("before", "forward", 1000.0 * rank)  # ranks arrive at different times
    summed = torch.full((3,), float(rank + 1))
    dist.all_reduce(summed)
    avg = torch.tensor([float(rank)])
    dist.all_reduce(avg, op=dist.ReduceOp.AVG)
    biggest = torch.tensor([float(-rank)])
    dist.all_reduce(biggest, op=dist.ReduceOp.MAX)
    gathered = [torch.zeros(2, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(gathered, torch.tensor([rank, 10 * rank]))
    scattered = torch.zeros(2)
    dist.reduce_scatter_tensor(scattered, torch.arange(2.0 * n) * (rank + 1))
    flat = torch.zeros(n, dtype=torch.bfloat16)
    dist.all_gather_into_tensor(flat, torch.tensor([rank + 0.5], dtype=torch.bfloat16))
    sent = torch.zeros(n)
    dist.all_to_all_single(sent, torch.arange(float(n)) + 100 * rank)
    root = torch.tensor([float(rank)])
    dist.broadcast(root, src=n - 1)
    return {
        "sum": summed.tolist(), "avg": avg.item(), "max": biggest.item(),
        "gathered": [t.tolist() for t in gathered], "scattered": scattered.tolist(),
        "flat": flat.float().tolist(), "sent": sent.tolist(), "root": root.item(),
        "collectives": list(clock.collectives), "report": api.report(),
    }  # fmt: skip


def test_collectives_are_exact_and_every_rank_agrees_on_their_ticks():
    n = 4
    results = run_threads(_collectives, n)
    for rank, got in enumerate(results):
        assert got["sum"] == [10.0] * 3 and got["avg"] == 1.5 and got["max"] == 0.0
        assert got["gathered"] == [[r, 10 * r] for r in range(n)]
        total = torch.arange(2.0 * n) * sum(range(1, n + 1))
        assert got["scattered"] == total[2 * rank : 2 * rank + 2].tolist()
        assert got["flat"] == [r + 0.5 for r in range(n)]  # bf16 moved bit-exactly
        assert got["sent"] == [rank + 100.0 * r for r in range(n)]
        assert got["root"] == n - 1
    model = CostModel.for_config(load_config("trn2"))
    first = [got["collectives"][0] for got in results]  # the all-reduce of 12 B
    arrivals = [c.arrival_tick for c in first]
    assert arrivals == [model.timebase.ns_to_ticks(1000.0 * r) for r in range(n)]
    cost = model.collectives.of("all_reduce", 12, (0, 1, 2, 3))
    for c in first:  # it starts at the slowest arrival and lasts the modelled cost
        assert c.start_tick == max(arrivals)
        assert c.end_tick == c.start_tick + model.timebase.ns_to_ticks(cost.duration_ns)
        assert c.link_bytes == cost.link_bytes
    for got in results:  # every later collective too: the same ticks on every rank
        ticks = [(c.start_tick, c.end_tick) for c in got["collectives"]]
        assert ticks == [(c.start_tick, c.end_tick) for c in results[0]["collectives"]]
    slowest = results[n - 1]["report"]["total"]
    assert slowest["waiting_ns"] == 0.0 and results[0]["report"]["total"]["waiting_ns"] > 0


def _mismatched(rank: int) -> None:
    if rank == 0:
        dist.all_reduce(torch.ones(4))
    else:
        dist.all_gather_into_tensor(torch.zeros(2), torch.ones(1))


def test_ranks_running_different_collectives_get_a_clear_error():
    with pytest.raises(HwsimError, match="every rank must run the same collective"):
        run_threads(_mismatched, 2, timeout_s=30)


class _Mlp(nn.Module):
    """A model of the user's (dynamo traces user code; torch.nn's own containers it skips)."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.tanh(self.up(x)))


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return _Mlp()


def test_ddp_step_on_compiled_ranks_gives_eager_gradients_and_times_the_all_reduce(tmp_path):
    """Unmodified DDP under torch.compile(backend="hwsim"), fallback 'error': every rank's
    forward and backward graphs run on its simulated core; the gradients are the full batch's
    eager gradients; the all-reduce is on each rank's timeline after its backward."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    base, n = _mlp(), 2
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    reference = copy.deepcopy(base)
    reference(x).square().mean().backward()

    def step(rank: int) -> tuple[dict[str, torch.Tensor], dict[str, object], object]:
        model = copy.deepcopy(base)
        compiled = torch.compile(DDP(model), backend="hwsim", options=COMPILE)
        compiled(x[2 * rank : 2 * rank + 2]).square().mean().backward()
        return {k: p.grad for k, p in model.named_parameters()}, api.report(), current_clock()

    results = run_threads(step, n)
    assert DDP._active_ddp_module is None  # later compiles in this process are not DDP's
    for grads, _, _ in results:
        for name, p in reference.named_parameters():
            torch.testing.assert_close(grads[name], p.grad, rtol=1e-5, atol=1e-6)
    for _, report, clock in results:
        phases = [c.phase for c in clock.computes]
        assert "forward" in phases and "backward" in phases
        [reduce] = [c for c in clock.collectives if c.kind == "all_reduce"]
        last_backward = max(c.end_tick for c in clock.computes if c.phase == "backward")
        assert reduce.arrival_tick >= last_backward  # issued when the gradients were ready
        assert reduce.nbytes == sum(p.numel() * 4 for p in base.parameters())
        total = report["total"]
        assert total["compute_ns"] > 0 and total["exposed_ns"] > 0
        # exact in ticks; these are ns floats, so equal to the last bit only up to rounding
        split = total["exposed_ns"] + total["overlapped_ns"]
        assert split == pytest.approx(total["communication_ns"], rel=1e-12, abs=0)
        assert total["link_bytes"]["intra_chip"] > 0
    from hwsim.bridge.distributed import write_trace

    path = write_trace([clock for _, _, clock in results], tmp_path / "ranks.json")
    events = json.loads(path.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names == {"NeuronCore 0 (rank 0)", "NeuronCore 1 (rank 1)"}
    reduces = [e for e in events if e.get("ph") == "X" and e["name"] == "all_reduce"]
    assert len({e["pid"] for e in reduces}) == n
    flows = [e for e in events if e.get("cat") == "collective" and e["ph"] in "sf"]
    assert {e["ph"] for e in flows} == {"s", "f"}


class _Unit(nn.Module):
    """An FSDP2 unit of the user's (dynamo skips torch.nn's own modules as frames it starts in)."""

    def __init__(self, inputs: int, outputs: int) -> None:
        super().__init__()
        self.linear = nn.Linear(inputs, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


class _Units(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = _Unit(16, 32), _Unit(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.up(x))


def test_fsdp2_with_compiled_blocks_gives_eager_gradients_on_four_ranks():
    """fully_shard'ed blocks compiled with the bridge (fallback 'error'): their forward and
    backward graphs run on each rank's simulated core between FSDP2's all-gathers and
    reduce-scatters, and the gradients are the full batch's eager gradients."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    base, n = _Units(), 4
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    reference = copy.deepcopy(base)
    reference(x).square().mean().backward()

    def step(rank: int) -> tuple[dict[str, torch.Tensor], object]:
        model = copy.deepcopy(base)
        mesh = init_device_mesh("cpu", (n,))
        for block in (model.up, model.down):
            fully_shard(block, mesh=mesh)
            block.compile(backend="hwsim", options=COMPILE)
        fully_shard(model, mesh=mesh)
        model(x[2 * rank : 2 * rank + 2]).square().mean().backward()
        return {k: p.grad.full_tensor() for k, p in model.named_parameters()}, current_clock()

    results = run_threads(step, n)
    for grads, clock in results:
        for name, p in reference.named_parameters():
            torch.testing.assert_close(grads[name], p.grad, rtol=1e-5, atol=1e-6)
        kinds = {c.kind for c in clock.collectives}
        assert {"all_gather", "reduce_scatter"} <= kinds
        phases = [c.phase for c in clock.computes]
        assert phases.count("forward") == 2 and phases.count("backward") == 2  # timed compute


def _llama_block() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=4,
        num_hidden_layers=1, vocab_size=128,
    )  # fmt: skip
    torch.manual_seed(0)
    layer = LlamaDecoderLayer(config, 0).eval()
    x = torch.randn(1, 8, 64, generator=torch.Generator().manual_seed(1))
    cos, sin = LlamaRotaryEmbedding(config)(x, torch.arange(8)[None])
    return layer, (x, cos, sin)


class _Block(nn.Module):
    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        out = self.layer(x, position_embeddings=(cos, sin), attention_mask=None)
        return out[0] if isinstance(out, tuple) else out


_TP_PLAN = {
    "self_attn.q_proj": "col", "self_attn.k_proj": "col", "self_attn.v_proj": "col",
    "self_attn.o_proj": "row", "mlp.gate_proj": "col", "mlp.up_proj": "col",
    "mlp.down_proj": "row",
}  # fmt: skip


def _tensor_parallel(compile_options: dict[str, str] | None) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    layer, inputs = _llama_block()
    with torch.no_grad():
        want = _Block(layer)(*inputs)
    n = 4

    def run(rank: int) -> tuple[torch.Tensor, object]:
        mine = copy.deepcopy(layer)
        plan = {
            k: ColwiseParallel() if v == "col" else RowwiseParallel() for k, v in _TP_PLAN.items()
        }
        parallelize_module(mine, init_device_mesh("cpu", (n,)), plan)
        block: nn.Module = _Block(mine)
        if compile_options is not None:
            block = torch.compile(block, backend="hwsim", options=compile_options)  # type: ignore[assignment]
        with torch.no_grad():
            return block(*inputs), current_clock()

    for got, clock in run_threads(run, n):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        reduces = [c for c in clock.collectives if c.kind == "all_reduce"]
        assert len(reduces) == 2  # the row-parallel o_proj and down_proj outputs
        assert all(c.nbytes == 8 * 64 * 4 for c in reduces)
        if compile_options is not None:
            assert clock.computes  # the block's graphs ran on the rank's simulated core
            for reduce in reduces:  # each inside a simulated graph, on its collective engine
                assert any(
                    g.busy is not None and g.start_tick <= reduce.arrival_tick
                    and reduce.end_tick <= g.end_tick
                    for g in clock.computes
                )  # fmt: skip


def test_tensor_parallel_llama_block_matches_eager():
    _tensor_parallel(None)


@pytest.mark.slow  # four ranks compiling a Llama layer: about 45 s
def test_tensor_parallel_llama_block_compiled_matches_eager():
    """Compiled under fallback 'error', the DTensor collectives (_c10d_functional nodes) are
    the simulator's collective instructions inside the rank's graphs, with eager's values."""
    _tensor_parallel(COMPILE)


@pytest.mark.slow
def test_ddp_gpt2_tiny_on_eight_ranks_gives_eager_gradients_with_exposed_communication():
    """The issue's DDP target at toy size (bench/distributed.py --model small is GPT-2 small)."""
    transformers = pytest.importorskip("transformers")
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=32,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    base, n = transformers.GPT2LMHeadModel(config).train(), 8
    ids = torch.randint(0, 128, (n, 16), generator=torch.Generator().manual_seed(2))
    reference = copy.deepcopy(base)
    reference(ids, labels=ids, use_cache=False).loss.backward()

    def step(rank: int) -> tuple[dict[str, torch.Tensor], dict[str, object]]:
        model = copy.deepcopy(base)
        compiled = torch.compile(DDP(model, bucket_cap_mb=1), backend="hwsim", options=COMPILE)
        mine = ids[rank : rank + 1]
        compiled(mine, labels=mine, use_cache=False).loss.backward()
        return {k: p.grad for k, p in model.named_parameters()}, api.report()

    for grads, report in run_threads(step, n):
        for name, p in reference.named_parameters():
            torch.testing.assert_close(grads[name], p.grad, rtol=1e-4, atol=1e-6)
        total = report["total"]
        assert total["collectives"] >= 2 and total["exposed_ns"] > 0 and total["compute_ns"] > 0


def test_a_rank_whose_compiled_model_gave_no_graph_is_warned_in_its_report():
    """DDP of a torch.nn module dynamo skips (nn.Linear) hands the bridge no graph: the rank's
    compute is untimed, and its report says why instead of silently showing none."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    def step(rank: int) -> dict[str, object]:
        torch.manual_seed(0)
        compiled = torch.compile(DDP(nn.Linear(4, 4)), backend="hwsim", options=COMPILE)
        compiled(torch.randn(2, 4)).sum().backward()
        with pytest.warns(UserWarning, match="skips torch.nn's own modules"):
            return api.report()

    for report in run_threads(step, 2):
        assert report["total"]["graphs"] == 0 and report["total"]["collectives"] > 0


class _ReduceBesideCompute(nn.Module):
    """A row-parallel matmul's all-reduce and compute that does not need it (which may run
    beside it), as one compiled graph."""

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        import torch.distributed._functional_collectives as funcol

        reduced = funcol.all_reduce(x @ w, "sum", dist.group.WORLD)
        beside = torch.tanh(x) * 2.0  # before the reduced value's reader in program order
        return reduced + 1.0, beside


def test_a_collective_in_a_compiled_graph_is_exact_and_costs_what_the_cost_model_says():
    """_c10d_functional.all_reduce under fallback 'error' becomes the simulator's collective
    instruction: every rank gets the exact sum, the collective lasts exactly the cost model's
    duration on the rank's collective engine, and the graph's other compute overlaps it."""
    n = 4

    def run(rank: int) -> tuple[list[torch.Tensor], object, dict[str, object]]:
        x = torch.full((64, 64), float(rank + 1))
        compiled = torch.compile(_ReduceBesideCompute(), backend="hwsim", options=COMPILE)
        with torch.no_grad():
            outputs = compiled(x, torch.eye(64))
        return list(outputs), current_clock(), api.report()["total"]

    results = run_threads(run, n)
    model = CostModel.for_config(load_config("trn2"))
    cost = model.collectives.of("all_reduce", 64 * 64 * 4, tuple(range(n)))
    ticks = {(c.start_tick, c.end_tick) for _, clock, _ in results for c in clock.collectives}
    assert len(ticks) == 1  # every rank: the same start and end
    for rank, (outputs, clock, total) in enumerate(results):
        torch.testing.assert_close(outputs[0], torch.full((64, 64), 11.0))  # 1+2+3+4, +1
        beside = torch.tanh(torch.tensor(rank + 1.0)).expand(64, 64) * 2
        torch.testing.assert_close(outputs[1], beside)
        [reduce] = clock.collectives
        [graph] = clock.computes
        assert reduce.kind == "all_reduce" and reduce.nbytes == 64 * 64 * 4
        assert reduce.end_tick - reduce.start_tick == model.timebase.ns_to_ticks(cost.duration_ns)
        assert graph.start_tick <= reduce.arrival_tick and reduce.end_tick <= graph.end_tick
        assert reduce.link_bytes == cost.link_bytes
        assert total["collectives"] == 1 and total["graphs"] == 1
        assert total["overlapped_ns"] > 0  # tanh ran beside the all-reduce
        # exact in ticks; these are ns floats, so equal to the last bit only up to rounding
        split = total["exposed_ns"] + total["overlapped_ns"]
        assert split == pytest.approx(total["communication_ns"], rel=1e-12, abs=0)
