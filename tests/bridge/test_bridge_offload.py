"""Eager offload: HwsimMode runs each supported op on the simulator and reports it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hwsim.bridge.errors import FallbackError
from hwsim.bridge.offload import HwsimMode


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(7, 130), nn.GELU(), nn.Linear(130, 5))


def test_mlp_eager_offload_with_report():
    model = mlp()
    x = torch.randn(3, 7)
    with torch.no_grad(), HwsimMode("trn2", fallback="error", auto_cast="none") as mode:
        got = model(x)
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    report = mode.report
    statuses = [(r.op, r.status) for r in report.ops]
    assert statuses == [
        ("aten.t.default", "view"),
        ("aten.addmm.default", "simulator"),
        ("aten.gelu.default", "simulator"),
        ("aten.t.default", "view"),
        ("aten.addmm.default", "simulator"),
    ]
    assert all(r.error["ok"] for r in report.lowered())
    assert all(r.sim_ns > 0 for r in report.lowered())
    assert report.numerics_ok and report.total_sim_ns > 0
    assert report.to_dict()["counts"] == {"simulator": 3, "cpu": 0, "view": 2}


def test_programs_are_cached_per_call_layout():
    model = mlp()
    inputs = [torch.randn(3, 7) for _ in range(3)]
    with torch.no_grad(), HwsimMode("tiny") as mode:
        for x in inputs:
            model(x)
    assert len(mode._lowered) == 3  # addmm (2 layouts) and gelu, each lowered once


def test_unsupported_op_runs_on_cpu_with_reason():
    x = torch.randn(4, 9)
    with HwsimMode("tiny", fallback="cpu") as mode:
        values = torch.kthvalue(x, 2, -1).values
        y = x.clone()
        y.add_(1)  # in place: a mutation stays on the CPU
    torch.testing.assert_close(values, torch.kthvalue(x, 2, -1).values)
    torch.testing.assert_close(y, x + 1)
    reasons = {r.op: r.reason for r in mode.report.fallbacks()}
    assert reasons == {"aten.kthvalue.default": "no lowering", "aten.add_.Tensor": "mutation"}


def test_fallback_warn_and_error():
    x = torch.randn(4, 9)
    with (
        pytest.warns(UserWarning, match=r"aten\.kthvalue\.default"),
        HwsimMode("tiny", fallback="warn"),
    ):
        torch.kthvalue(x, 2)
    with (
        pytest.raises(FallbackError, match=r"aten\.kthvalue\.default: no lowering"),
        HwsimMode("tiny", fallback="error"),
    ):
        torch.kthvalue(x, 2)


def test_bf16_ops_compare_at_bf16_tolerance():
    x = torch.randn(33, 130, dtype=torch.bfloat16)
    with HwsimMode("tiny", fallback="error") as mode:
        y = torch.softmax(x, -1) * 2
    torch.testing.assert_close(y, torch.softmax(x, -1) * 2)
    assert all(r.error["ok"] and r.error["rtol"] == 1.6e-2 for r in mode.report.lowered())
    # A bf16 result also says how far it is from what fp32 would have given (x * 2 is exact).
    errors = {r.op: r.error["vs_fp32_max_abs"] for r in mode.report.lowered()}
    assert errors["aten._softmax.default"] > 0 and errors["aten.mul.Tensor"] == 0


def test_bf16_compute_on_fp32_ops_is_judged_against_the_cpu_in_bf16():
    x = torch.randn(16, 300)
    with HwsimMode("tiny", fallback="error", auto_cast="all") as mode:
        torch.exp(x)
    [record] = mode.report.lowered()
    assert record.error["ok"] and record.error["rtol"] == 1.6e-2
    # The bf16 reference matches the simulator (both round inputs to bf16) far better than fp32.
    assert record.error["max_abs"] < record.error["vs_fp32_max_abs"] / 4


def test_trace_option_writes_the_report(tmp_path):
    import json

    x = torch.randn(4, 5)
    with HwsimMode("tiny", fallback="cpu", trace=str(tmp_path)):
        torch.relu(x).kthvalue(2)
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["counts"]["simulator"] == 1
    assert data["fallbacks"][0]["op"] == "aten.kthvalue.default"
    assert "run on the CPU" in (tmp_path / "report.txt").read_text()
