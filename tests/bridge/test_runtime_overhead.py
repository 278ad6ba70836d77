"""The runtime's per-inference overhead (bridge.runtime): launch plus host copies of the
per-call inputs and the outputs; the model's constants stay in HBM and cost nothing per call."""

from __future__ import annotations

import pytest
import torch

from hwsim import bridge
from hwsim.bridge.runtime import runtime_overhead
from hwsim.config import load_config


def test_overhead_is_launch_plus_each_copy_over_the_host_link():
    trn1 = load_config("trn1")
    host = trn1.host
    got = runtime_overhead(trn1, [8192], [4096, 0])
    assert got.launch_ns == host.launch_ns
    assert got.inputs_ns == host.latency_ns + 8192 / host.bandwidth_bytes_per_ns
    assert got.outputs_ns == 2 * host.latency_ns + 4096 / host.bandwidth_bytes_per_ns
    assert got.total_ns == got.launch_ns + got.inputs_ns + got.outputs_ns
    assert (got.input_bytes, got.output_bytes) == (8192, 4096)


def test_a_compiled_models_weights_are_not_copied_per_call():
    """A Linear's weight and bias are constants (dynamo's static inputs): only x comes in,
    only y goes out, and the report shows the overhead next to the simulated time."""
    torch._dynamo.reset()
    model = torch.nn.Linear(64, 32).eval()
    compiled = torch.compile(model, backend="hwsim", options={"config": "tiny"})
    with torch.no_grad():
        compiled(torch.randn(4, 64))
    report = bridge.last_report()
    run = report.runs[-1]
    tiny = load_config("tiny")
    expected = runtime_overhead(tiny, [4 * 64 * 4], [4 * 32 * 4]).total_ns
    assert run["runtime_overhead_ns"] == pytest.approx(expected, abs=1e-9)
    assert "runtime overhead" in report.text()
