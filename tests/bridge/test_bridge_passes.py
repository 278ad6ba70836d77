"""The graph compiler's pass pipeline (bridge.passes): selection, rewrites, fusion, the floor."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from hwsim.bridge.graph_lowering import lower_graph
from hwsim.bridge.passes import PASS_NAMES, PassSelection, run_pipeline
from hwsim.bridge.passes.fusion import FusedKernel
from hwsim.bridge.precision import Precision, compare
from hwsim.config import load_config
from hwsim.isa.origin import Origin, origin_of
from hwsim.report import peaks

aten = torch.ops.aten


def _inputs(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g) for s in shapes]


def _run(fn, inputs, passes, config="trn2"):
    graph = make_fx(fn)(*inputs)
    lowered = lower_graph(graph, inputs, config=config, passes=passes)
    run = lowered.run(inputs)
    ok = compare(run.outputs, fn(*inputs), Precision().tolerance(torch.float32))
    assert ok.ok, ok
    return lowered, run


def _dma_count(run) -> int:
    return sum(1 for r in run.result.trace.instructions if "dma" in r.instruction.OPCODE)


# ---- selection ------------------------------------------------------------------------------


def test_selection_parses_all_none_dict_and_list():
    assert PassSelection.parse(None).enabled == frozenset(PASS_NAMES)
    assert PassSelection.parse("none").enabled == frozenset()
    off = PassSelection.parse({"fusion": False})
    assert "fusion" not in off and "cse" in off
    assert PassSelection.parse(["cse"]).enabled == {"cse"}
    with pytest.raises(ValueError, match=r"unknown hwsim pass .fusoin.*did you mean .fusion."):
        PassSelection.parse({"fusoin": False})
    with pytest.raises(ValueError, match="True, False"):
        PassSelection.parse({"fusion": "no"})


def test_pipeline_leaves_the_callers_graph_alone():
    graph = make_fx(lambda x: torch.relu(x * 2.0) + 1.0)(*_inputs((4, 8)))
    before = [n.name for n in graph.graph.nodes]
    fused, log = run_pipeline(graph, PassSelection.all())
    assert [n.name for n in graph.graph.nodes] == before
    assert any(isinstance(n.target, FusedKernel) for n in fused.graph.nodes)
    assert [s["pass"] for s in log.steps] == list(PASS_NAMES)


# ---- rewrites -------------------------------------------------------------------------------


def test_cse_merges_the_same_op_on_the_same_arguments():
    def fn(x):
        return torch.exp(x) + torch.exp(x)

    graph = make_fx(fn)(*_inputs((4, 8)))
    gm, log = run_pipeline(graph, PassSelection.only("cse"))
    exps = [n for n in gm.graph.nodes if n.target is aten.exp.default]
    assert len(exps) == 1 and log.steps[0]["merged"] == 1
    _run(fn, _inputs((4, 8)), ["cse"])


def test_cse_leaves_constants_made_on_the_device_where_they_are_used():
    def fn(x):
        return torch.exp(x) * torch.full((4, 8), 0.5) + torch.exp(x) * torch.full((4, 8), 0.5)

    graph = make_fx(fn)(*_inputs((4, 8)))
    gm, _ = run_pipeline(graph, PassSelection.only("cse"))
    assert len([n for n in gm.graph.nodes if n.target is aten.full.default]) == 2
    assert len([n for n in gm.graph.nodes if n.target is aten.exp.default]) == 1
    _run(fn, _inputs((4, 8)), ["cse"])


def test_views_cancel_a_double_transpose():
    def fn(x):
        return torch.relu(x.t().t())

    graph = make_fx(fn)(*_inputs((4, 8)))
    gm, _ = run_pipeline(graph, PassSelection.only("views"))
    assert not [n for n in gm.graph.nodes if n.target in (aten.t.default, aten.permute.default)]
    _run(fn, _inputs((4, 8)), ["views"])


def linear_dropout_residual(x, w, b):
    # eval dropout traces as a clone: between the matmul and the residual add
    return torch.clone(x @ w.t() + b) + x


def test_a_clone_to_the_same_layout_goes_and_the_residual_add_joins_the_matmul():
    inputs = _inputs((64, 96), (96, 96), (96,))
    graph = make_fx(linear_dropout_residual)(*inputs)
    assert [n for n in graph.graph.nodes if n.target is aten.clone.default]
    gm, _ = run_pipeline(graph, PassSelection.only("views", "fusion"))
    assert not [n for n in gm.graph.nodes if n.target is aten.clone.default]
    fused = [n.target for n in gm.graph.nodes if isinstance(n.target, FusedKernel)]
    assert len(fused) == 1 and fused[0].anchor is not None  # mm, bias add, residual add
    kept, _ = run_pipeline(graph, PassSelection.only("fusion"))
    assert [n for n in kept.graph.nodes if n.target is aten.clone.default]
    _run(linear_dropout_residual, inputs, ["views", "fusion"])


def test_a_clone_that_changes_the_layout_or_returns_an_input_stays():
    def fn(x):
        return x.t().contiguous() * 2, x.clone()  # a transposing copy; an output of an input

    graph = make_fx(fn)(*_inputs((4, 8)))
    gm, _ = run_pipeline(graph, PassSelection.only("views"))
    assert len([n for n in gm.graph.nodes if n.target is aten.clone.default]) == 2
    _run(lambda x: fn(x)[0], _inputs((4, 8)), ["views"])


def causal_scores(x):
    """A mask-building chain (arange, le, where) of a fixed size, applied to x."""
    n = x.shape[-1]
    rows = torch.arange(n).unsqueeze(1)
    cols = torch.arange(n).unsqueeze(0)
    mask = torch.where(cols <= rows, 0.0, float("-inf"))
    return torch.softmax(x + mask, dim=-1)


def test_constant_fold_turns_the_mask_chain_into_one_constant():
    inputs = _inputs((16, 16))
    graph = make_fx(causal_scores)(*inputs)
    gm, log = run_pipeline(graph, PassSelection.only("constant_fold"))
    assert log.steps[0]["constants"] == 1 and log.steps[0]["folded"] >= 3
    kinds = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert aten.arange.start_step not in kinds and aten.arange.default not in kinds
    _, run_on = _run(causal_scores, inputs, ["constant_fold"])
    _, run_off = _run(causal_scores, inputs, "none")
    assert run_on.result.summary.instructions < run_off.result.summary.instructions


# ---- fusion ---------------------------------------------------------------------------------


def chain(x, y):
    return torch.sigmoid(torch.relu(x * y + 1.0) * 2.0)


def test_elementwise_chain_is_one_pass_over_sbuf():
    """5 ops over [128, 64] fp32 (one tile): unfused, every op loads its operands and stores its
    result (6 loads, 5 stores); fused, the two inputs are loaded once and the result stored once."""
    inputs = _inputs((128, 64), (128, 64))
    lowered_on, on = _run(chain, inputs, ["fusion"])
    _, off = _run(chain, inputs, "none")
    assert _dma_count(on) == 3 and _dma_count(off) == 11
    nbytes = 128 * 64 * 4
    assert on.result.summary.hbm_bytes == 3 * nbytes
    assert off.result.summary.hbm_bytes == 11 * nbytes
    assert on.result.summary.total_ns < off.result.summary.total_ns
    origins = {origin_of(r.instruction.tag) for r in on.result.trace.instructions}
    members = ("mul", "add", "relu", "mul_1", "sigmoid")
    assert origins == {Origin("fused[mul+add+relu+mul+sigmoid]", "+".join(members), members)}
    assert lowered_on.pipeline["fusion"] == [
        {"group": ["mul", "add", "relu", "mul_1", "sigmoid"], "fused": True, "epilogue": False}
    ]


def linear_gelu_residual(x, w, b):
    return torch.nn.functional.gelu(x @ w.t() + b) + x


def test_matmul_epilogue_applies_gelu_and_residual_before_the_store():
    inputs = _inputs((64, 96), (96, 96), (96,))
    graph = make_fx(linear_gelu_residual)(*inputs)
    gm, _ = run_pipeline(graph, PassSelection.only("fusion"))
    fused = [n.target for n in gm.graph.nodes if isinstance(n.target, FusedKernel)]
    assert len(fused) == 1 and fused[0].anchor is not None
    lowered, on = _run(linear_gelu_residual, inputs, ["fusion"])
    _, off = _run(linear_gelu_residual, inputs, "none")
    assert lowered.pipeline["fusion"][0]["epilogue"] is True
    # make_fx keeps mm + add (no addmm). Unfused, [64, 96] fp32 values cross HBM 9 times: mm's
    # store, the bias add's 2 loads (the bias read broadcast) and store, gelu's load and store,
    # the residual add's 2 loads and store; fused 3: bias and x loaded per tile, one store.
    assert off.result.summary.hbm_bytes - on.result.summary.hbm_bytes == 6 * 64 * 96 * 4
    assert on.result.summary.total_ns < off.result.summary.total_ns


def test_broadcast_operand_of_a_batched_matmul_epilogue():
    """A [B, 1, S, S] mask added to bmm's [B*H, S, S] scores has no view over the latter;
    the epilogue reads it over the [B, H, S, S] result instead."""

    def fn(q, k, mask):
        scores = torch.bmm(q.reshape(8, 16, 8), k.reshape(8, 8, 16)).reshape(2, 4, 16, 16)
        return scores * 0.5 + mask

    inputs = _inputs((2, 4, 16, 8), (2, 4, 8, 16), (2, 1, 16, 16))
    lowered, _ = _run(fn, inputs, None)
    assert [n["fused"] for n in lowered.pipeline["fusion"]] == [True]


# ---- floor ----------------------------------------------------------------------------------


def test_floor_of_a_matmul_is_its_flops_or_its_bytes():
    m, k, n = 256, 512, 384
    inputs = _inputs((m, k), (k, n))
    graph = make_fx(torch.mm)(*inputs)
    lowered = lower_graph(graph, inputs, config="trn2")
    config = load_config("trn2")
    floor = lowered.floor
    assert floor is not None
    assert floor.tensor_flops == 2 * m * n * k
    assert floor.tensor_ns == pytest.approx(
        2 * m * n * k / peaks.peak_flops_per_s(config, "fp32") * 1e9
    )
    nbytes = 4 * (m * k + k * n + m * n)
    rate = min(
        peaks.hbm_bandwidth_bytes_per_ns_per_core(config),
        peaks.dma_bandwidth_bytes_per_ns_per_core(config),
    )
    assert floor.hbm_bytes == nbytes and floor.hbm_ns == pytest.approx(nbytes / rate)
    assert floor.binding == ("tensor" if floor.tensor_ns > floor.hbm_ns else "hbm")
    run = lowered.run(inputs, numerics=False)
    assert run.result.summary.floor_ns == floor.floor_ns
    assert run.result.summary.over_floor == pytest.approx(
        run.result.summary.total_ns / floor.floor_ns
    )
    assert run.result.summary.over_floor >= 1.0


def test_torch_compile_takes_the_passes_option_and_reports_them():
    from hwsim.bridge.dynamo import last_report

    x = _inputs((128, 64))[0]

    def fn(x):
        return torch.tanh(torch.relu(x) * 3.0 + 1.0)

    counts = {}
    for passes in ("none", None):
        compiled = torch.compile(
            fn, backend="hwsim", options={"fallback": "error", "passes": passes}, dynamic=False
        )
        torch.testing.assert_close(compiled(x), fn(x))
        report = last_report()
        counts[passes] = report.runs[-1]["instructions"]
        assert report.pipelines[-1]["selection"] == ("none" if passes else "all")
        assert report.runs[-1]["floor_ns"] > 0
    assert counts[None] < counts["none"]


def test_fused_chain_leaves_no_intermediate_in_hbm():
    """The memory plan's eight-op chain (test_bridge_memory_plan) with fusion: no scratch."""
    from tests.bridge.test_bridge_memory_plan import chain as eight_ops

    x = _inputs((64, 48))[0]
    lowered, _ = _run(eight_ops, [x], None)
    assert lowered.memory is not None and lowered.memory.hbm_scratch_unplanned_bytes == 0


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.fc(x)) + x


def test_export_runs_the_same_pipeline(tmp_path):
    """``hwsim export`` (export_program) lowers through the pipeline too, selectable."""
    from hwsim.bridge.export import export_program

    torch.manual_seed(0)
    model, x = _Mlp().eval(), _inputs((32, 64))[0]
    on = export_program(model, (x,), tmp_path / "on.hwprog")
    off = export_program(model, (x,), tmp_path / "off.hwprog", passes="none")
    assert on.program.meta["passes"]["selection"] == "all"
    assert on.program.meta["passes"]["fusion"][0]["epilogue"] is True
    assert off.program.meta["passes"]["steps"] == []
    assert on.check["numerics_ok"] and off.check["numerics_ok"]
    assert on.check["total_ns"] < off.check["total_ns"]


def test_a_value_used_by_several_members_stays_inside_the_group():
    """GELU's tanh form reads the matmul's result three times: all three users join the
    epilogue, so the matmul's value never reaches HBM."""

    def fn(x, w):
        h = x @ w
        return 0.5 * h * (1.0 + torch.tanh(0.79788456 * (h + 0.044715 * h * h * h)))

    inputs = _inputs((64, 32), (32, 48))
    graph = make_fx(fn)(*inputs)
    gm, _ = run_pipeline(graph, PassSelection.only("fusion"))
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert len(calls) == 1 and isinstance(calls[0].target, FusedKernel)
    assert calls[0].target.anchor is not None
    _, on = _run(fn, inputs, ["fusion"])
    # x and w in, the result out: nothing else crosses HBM.
    assert on.result.summary.hbm_bytes == 4 * (64 * 32 + 32 * 48 + 64 * 48)


def test_a_value_also_used_outside_is_not_fused_away():
    def fn(x):
        a = torch.exp(x)
        return torch.relu(a) * 2.0 + a.sum()

    inputs = _inputs((16, 32))
    graph = make_fx(fn)(*inputs)
    gm, _ = run_pipeline(graph, PassSelection.only("fusion"))
    exps = [n for n in gm.graph.nodes if n.target is aten.exp.default]
    assert len(exps) == 1  # exp stays a node: sum reads its value from HBM
    _run(fn, inputs, ["fusion"])


def test_floor_counts_prepared_weights_in_their_cast_dtype_and_gathered_rows_only():
    """A constant weight only matmuls read is stored in the matmul's auto-cast dtype (bf16: 2
    bytes an element); an embedding table is read only at the rows the gather returns. The
    floor stays under the simulated time."""
    vocab, hidden, out, tokens = 1000, 64, 128, 16

    def fn(table, weight, ids):
        return torch.mm(torch.embedding(table, ids), weight.t())

    table, weight = _inputs((vocab, hidden), (out, hidden))
    ids = torch.randint(0, vocab, (tokens,), generator=torch.Generator().manual_seed(0))
    inputs = [table, weight, ids]
    graph = make_fx(fn)(*inputs)
    names = [n.name for n in graph.graph.nodes if n.op == "placeholder"]
    precision = Precision("matmult", "bf16")
    lowered = lower_graph(graph, inputs, config="trn2", precision=precision, constants=names[:2])
    gathered = tokens * hidden * 4
    expected = gathered + out * hidden * 2 + tokens * 8 + tokens * out * 4
    assert lowered.floor is not None and lowered.floor.hbm_bytes == expected
    plain = lower_graph(graph, inputs, config="trn2", precision=precision)  # not constants
    assert plain.floor is not None
    assert plain.floor.hbm_bytes == gathered + out * hidden * 4 + tokens * 8 + tokens * out * 4
    assert lowered.run(inputs, numerics=False).result.summary.over_floor >= 1.0
