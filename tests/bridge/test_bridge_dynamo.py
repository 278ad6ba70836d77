"""torch.compile(model, backend="hwsim"): whole-graph lowering, partitioning, fallback policies."""

from __future__ import annotations

import itertools
import json
import warnings

import pytest
import torch
import torch._dynamo
from torch import nn

from hwsim import bridge
from hwsim.bridge.errors import FallbackError


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(7, 130), nn.GELU(), nn.Linear(130, 5))


def with_sort(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x).sum(-1) + torch.kthvalue(x, 2, -1).values


def test_mlp_whole_graph_on_the_simulator_matches_cpu():
    model = mlp()
    x = torch.randn(3, 7)
    compiled = torch.compile(
        model, backend="hwsim", options={"fallback": "error", "auto_cast": "none"}
    )
    with torch.no_grad():
        got = compiled(x)
        want = model(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    report = bridge.dynamo.last_report()
    assert report.fallbacks() == []
    assert {r.op for r in report.lowered()} == {
        "aten.permute.default",
        "aten.addmm.default",
        "aten.gelu.default",
    }
    assert report.graphs[0]["partitions"] == 1 and report.numerics_ok
    assert len(report.runs) == 1 and report.runs[0]["total_ns"] > 0
    top = report.top_ops()
    assert [r.sim_ns for r in top] == sorted((r.sim_ns for r in top), reverse=True)
    assert top[0].sim_ns > 0 and {r.op for r in top if r.sim_ns > 0} == {
        "aten.addmm.default",
        "aten.gelu.default",
    }
    data = json.loads(report.to_json())
    assert data["counts"] == {"simulator": 5, "cpu": 0, "view": 0}
    # nn.Linear's weight transpose (aten.t) became a permute; the nodes know their module.
    assert data["decomposed"] == {"aten.t.default": {"aten.permute.default": 2}}
    assert {r.source for r in report.ops} == {"Linear", "GELU"}
    assert "decomposed into Core ATen" in str(report)
    assert "top ops by simulated time" in str(report)


def test_training_forward_and_backward_both_run_on_the_simulator():
    model = mlp()
    x = torch.randn(3, 7)
    compiled = torch.compile(
        model, backend="hwsim", options={"fallback": "error", "auto_cast": "none"}
    )
    compiled(x).sum().backward()
    grad = model[0].weight.grad.clone()
    model.zero_grad()
    model(x).sum().backward()
    torch.testing.assert_close(grad, model[0].weight.grad, rtol=1e-5, atol=1e-5)
    report = bridge.dynamo.last_report()
    assert [g["kind"] for g in report.graphs] == ["forward", "backward"]
    assert [r["graph"] for r in report.runs] == [g["graph"] for g in report.graphs]
    backward = [r for r in report.ops if r.phase == "backward"]
    assert backward and all(r.status == "simulator" for r in backward)
    assert {r.op for r in backward} >= {"aten.mm.default", "aten.sum.dim_IntList"}
    assert {r.module for r in backward} == {"0", "1", "2"}  # the Sequential's children


def test_fallback_cpu_partitions_around_unsupported_ops():
    x = torch.randn(4, 9)
    compiled = torch.compile(with_sort, backend="hwsim", options={"fallback": "cpu"})
    torch.testing.assert_close(compiled(x), with_sort(x), rtol=1e-5, atol=1e-5)
    report = bridge.dynamo.last_report()
    [fallback] = report.fallbacks()
    assert (fallback.op, fallback.reason) == ("aten.kthvalue.default", "no lowering")
    assert report.lowered() and report.runs
    assert report.to_dict()["fallbacks"][0]["op"] == "aten.kthvalue.default"


def test_cpu_fallbacks_are_on_the_host_track_of_the_call_timeline(tmp_path):
    from hwsim.trace.chrome import iter_events
    from hwsim.trace.validate import validate_chrome_trace

    x = torch.randn(4, 9)
    options = {"fallback": "cpu", "config": "tiny", "trace": str(tmp_path)}
    compiled = torch.compile(with_sort, backend="hwsim", options=options)
    compiled(x)
    report = bridge.dynamo.last_report()
    [timeline] = report.timelines
    [sort] = report.fallbacks()
    assert sort.host_ns > 0 and timeline["cpu_host_ns"] >= sort.host_ns
    assert timeline["simulated_ns"] == pytest.approx(sum(r["total_ns"] for r in report.runs))
    [folder] = tmp_path.glob("*_call1_timeline")
    trace = folder / "trace.json"
    assert validate_chrome_trace(trace) == []
    slices = [e for e in iter_events(trace) if e.get("ph") == "X" and e.get("cat") == "host"]
    by_name = {e["name"]: e for e in slices}
    assert by_name["aten.kthvalue.default"]["args"]["reason"] == "no lowering"
    simulated = [e for e in slices if e["args"]["runs_on"] == "simulator"]
    assert simulated  # each with its engine-level trace in its own run folder
    assert all((tmp_path / f"{e['args']['run']}_call1" / "trace.json").is_file() for e in simulated)
    ends = sorted((e["ts"], e["ts"] + e["dur"]) for e in slices)
    assert all(a[1] <= b[0] + 1e-3 for a, b in itertools.pairwise(ends))  # in sequence
    assert "host time" in str(report)
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["fallbacks"][0]["op"] == "aten.kthvalue.default" and saved["timelines"]
    listed = (tmp_path / ".hwsim-run").read_text().splitlines()  # the output guard's marker
    assert "report.json" in listed and f"{folder.name}/" in listed
    assert all((tmp_path / f"{e['args']['run']}_call1" / ".hwsim-run").is_file() for e in simulated)


def test_fallback_warn_warns_per_op():
    x = torch.randn(4, 9)
    compiled = torch.compile(with_sort, backend="hwsim", options={"fallback": "warn"})
    with pytest.warns(UserWarning, match=r"aten\.kthvalue\.default: no lowering"):
        compiled(x)


def test_fallback_error_raises_naming_the_op():
    x = torch.randn(4, 9)
    compiled = torch.compile(
        with_sort, backend="hwsim", options={"fallback": "error", "auto_cast": "none"}
    )
    with pytest.raises(Exception, match=r"aten\.kthvalue\.default: no lowering") as info:
        compiled(x)
    chain, error = [], info.value
    while error is not None:
        chain.append(error)
        error = error.__cause__ or getattr(error, "inner_exception", None)
    assert any(isinstance(e, FallbackError) for e in chain)


def test_unknown_option_is_an_error():
    compiled = torch.compile(mlp(), backend="hwsim", options={"fallbak": "cpu"})
    with pytest.raises(Exception, match="did you mean 'fallback'"):
        compiled(torch.randn(3, 7))


def test_precision_option_bf16_on_fp32_model():
    model = mlp()
    x = torch.randn(3, 7)
    options = {"fallback": "error", "auto_cast": "all", "config": "tiny"}
    with torch.no_grad(), warnings.catch_warnings():
        got = torch.compile(model, backend="hwsim", options=options)(x)
        want = model(x)
    torch.testing.assert_close(got, want, rtol=5e-2, atol=5e-2)
    report = bridge.dynamo.last_report()
    assert report.precision["auto_cast"] == "all"
    [output] = report.outputs
    assert output.computed_in == "bf16" and output.stats.ok
    # Judged against the CPU in bf16; the fp32 reference is another one, reported beside it.
    assert output.vs_fp32 is not None and output.vs_fp32.max_abs != output.stats.max_abs
    assert report.to_dict()["outputs"][0]["vs_fp32"]["max_abs"] == output.vs_fp32.max_abs
    assert "vs fp32" in str(report)


def test_fp32_model_without_auto_cast_has_one_reference():
    model = mlp()
    with torch.no_grad():
        options = {"config": "tiny", "auto_cast": "none"}
        torch.compile(model, backend="hwsim", options=options)(torch.randn(3, 7))
    [output] = bridge.dynamo.last_report().outputs
    assert output.vs_fp32 is not None and output.vs_fp32.max_abs == output.stats.max_abs


def test_recompiles_are_counted():
    options = {"fallback": "error", "config": "tiny"}
    compiled = torch.compile(torch.relu, backend="hwsim", options=options, dynamic=False)
    for n in (4, 5, 6):
        compiled(torch.randn(3, n))
    dynamo = bridge.dynamo.last_report().to_dict()["dynamo"]
    assert (dynamo["graphs_compiled"], dynamo["frames"], dynamo["recompiles"]) == (3, 1, 2)
    assert dynamo["graph_breaks"] == 0


def test_graph_breaks_share_one_report():
    def fn(x):
        y = torch.relu(x) * 2
        print("graph break")
        return torch.softmax(y, -1)

    x = torch.randn(4, 9)
    options = {"fallback": "error", "config": "tiny"}
    torch.testing.assert_close(torch.compile(fn, backend="hwsim", options=options)(x), fn(x))
    report = bridge.dynamo.last_report()
    assert [g["kind"] for g in report.graphs] == ["forward", "forward"]
    dynamo = report.dynamo_summary()
    assert (dynamo["graph_breaks"], dynamo["frames"], dynamo["recompiles"]) == (1, 2, 0)
    [reason] = dynamo["break_reasons"]
    assert "print" in reason and "1 graph breaks" in str(report)
    assert {r.op for r in report.lowered()} >= {"aten.relu.default", "aten._softmax.default"}


def test_lowering_failure_sends_its_subgraph_to_the_cpu():
    # The support check passes, but a convolution whose weights do not fit the matmul's share of
    # SBUF fails while lowering: under 'cpu' the whole subgraph runs on the CPU, with the reason
    # on each of its ops.
    x, w = torch.randn(1, 3, 6, 6), torch.randn(4, 3, 3, 3)
    options = {"fallback": "cpu", "config": "tiny", "tiling": {"matmul_sbuf_share": 0.001}}

    def fn(t, k):
        return torch.nn.functional.conv2d(t * 2, k)

    compiled = torch.compile(fn, backend="hwsim", options=options)
    torch.testing.assert_close(compiled(x, w), fn(x, w))
    report = bridge.dynamo.last_report()
    assert {(r.op, r.reason) for r in report.fallbacks()} == {
        ("aten.mul.Tensor", "shape"),
        ("aten.convolution.default", "shape"),
    }
    assert report.runs == []
