"""hwsim.bridge.analyze: the op-support table before anything runs; the package's lazy exports."""

from __future__ import annotations

import io

import torch
from rich.console import Console
from torch import nn

from hwsim import bridge


def test_analyze_mlp_all_supported_nothing_simulated():
    model = nn.Sequential(nn.Linear(7, 130), nn.GELU(), nn.Linear(130, 5), nn.Softmax(-1))
    console = Console(file=io.StringIO(), width=120)
    report = bridge.analyze(model, torch.randn(3, 7), console=console)
    assert report.fallbacks() == [] and report.runs == []
    assert [r.op for r in report.lowered()][-1] == "aten._softmax.default"
    assert "op support" in console.file.getvalue()


def test_analyze_names_reasons():
    report = bridge.analyze(
        lambda x: torch.lgamma(x).double() + x.kthvalue(2, -1, keepdim=True).indices,
        torch.randn(3, 7),
        show=False,
    )
    reasons = {r.op: r.reason for r in report.fallbacks()}
    assert reasons == {
        "aten.lgamma.default": "no lowering",
        "aten.kthvalue.default": "no lowering",
        "aten._to_copy.default": "dtype",  # fp64 has no device representation
        "aten.add.Tensor": "dtype",
    }


def test_lazy_exports():
    assert bridge.HwsimMode.__name__ == "HwsimMode"
    assert callable(bridge.analyze) and callable(bridge.last_report)
