"""options={"autotune": True}: tile plans and pass choices tuned per graph, cached by graph hash."""

from __future__ import annotations

import pytest
import torch

from hwsim.bridge.autotune import parse_autotune
from hwsim.bridge.dynamo import last_report


def elementwise(x, y):
    return torch.tanh(x * 2.0 + y).relu() - y


def compile_and_run(options):
    torch._dynamo.reset()
    x, y = torch.randn(128, 512), torch.randn(128, 512)
    compiled = torch.compile(elementwise, backend="hwsim", options=dict(options))
    out = compiled(x, y)
    torch.testing.assert_close(out, elementwise(x, y), rtol=1e-4, atol=1e-4)
    report = last_report()
    pipeline = report.pipelines[-1]
    return pipeline.get("autotune"), report.runs[-1]["total_ns"]


@pytest.mark.slow
def test_autotune_runs_the_fastest_candidate_and_caches_it_by_graph_hash(tmp_path):
    db = tmp_path / "autotune.sqlite"
    options = {"config": "trn2", "fallback": "error", "autotune": {"trials": 3, "db": str(db)}}
    tuned, total_ns = compile_and_run(options)
    assert tuned["candidates"] >= 3 and tuned["simulated"] == tuned["candidates"]
    assert tuned["best_ns"] <= tuned["start_ns"]
    assert total_ns == pytest.approx(tuned["best_ns"])  # the run is the winner's program
    again, _ = compile_and_run(options)
    assert again["graph_hash"] == tuned["graph_hash"] and again["simulated"] == 0
    untuned, plain_ns = compile_and_run({"config": "trn2", "fallback": "error"})
    assert untuned is None and plain_ns == pytest.approx(tuned["start_ns"])


def test_autotune_option_values_are_checked():
    assert parse_autotune(False) is None and parse_autotune(True)["trials"] == 12
    with pytest.raises(ValueError, match="valid: True, False, or a dict"):
        parse_autotune({"trails": 3})
    with pytest.raises(ValueError, match=r"1\.\.1000"):
        parse_autotune({"trials": 0})
