"""The report fixes of issue 14 (finding 5): tiny outputs judged relatively, a failed
matched-precision reference in the printed table, and last_report() saying when it has no
report or a stale one."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch._dynamo

from hwsim import bridge
from hwsim.bridge import dynamo
from hwsim.bridge.precision import TOLERANCES, compare
from hwsim.bridge.report import OutputRecord, Report
from hwsim.bridge.report_records import OutputCheck

FP32 = TOLERANCES["fp32"]


def test_an_output_of_tiny_magnitude_is_judged_relative_to_it():
    expected = torch.full((8,), 1e-10)
    wrong = compare(expected * 2, expected, FP32)  # 100 % off: an absolute 1e-5 passed it
    assert not wrong.ok and wrong.relative and wrong.mismatched == 8
    close = compare(expected * (1 + 1e-7), expected, FP32)
    assert close.ok and close.relative
    normal = compare(torch.ones(8) + 5e-6, torch.ones(8), FP32)  # unchanged: absolute
    assert normal.ok and not normal.relative
    zeros = compare(torch.zeros(4), torch.zeros(4), FP32)
    assert zeros.ok and not zeros.relative


def test_a_failed_matched_precision_reference_shows_in_the_printed_table():
    report = Report("compile", "trn2", {"compute": "bf16", "accumulate": "fp32"}, "cpu")
    stats = compare(torch.ones(2), torch.ones(2), TOLERANCES["bf16"])
    problem = "matched-precision reference: RuntimeError: expected bf16; judged against own dtypes"
    record = OutputRecord("graph0.out0", (2,), "torch.float32", "bf16", stats, None, problem)
    report.add(OutputCheck(record, "graph"))
    text = str(report)
    assert "REFERENCE FAILED [1]" in text
    assert "expected bf16" in text  # the reason itself, in the caption


@pytest.fixture
def fresh():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_last_report_warns_when_no_graph_reached_the_backend(monkeypatch):
    monkeypatch.setattr(dynamo, "_REPORTS", [])
    with pytest.warns(UserWarning, match="no graph has reached the hwsim backend"):
        assert bridge.last_report() is None


def test_last_report_warns_when_graphs_went_to_another_backend_since(fresh):
    x = torch.randn(4)
    torch.compile(lambda t: t.sin() + 1, backend="hwsim")(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = bridge.last_report()  # the latest compile is ours: no warning
    torch.compile(lambda t: t.cos() * 2, backend="eager")(x)
    with pytest.warns(UserWarning, match="1 graph\\(s\\) for another backend"):
        assert bridge.last_report() is report
