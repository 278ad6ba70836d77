"""An op a graph break leaves to eager PyTorch runs on the CPU between compiled graphs, so it
never reaches the backend as a node; the fallback policy still applies to it."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch._dynamo

from hwsim import bridge
from hwsim.bridge.errors import FallbackError


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _nonzero_count(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    found = torch.nonzero(y > 1)  # output shape depends on the data: dynamo breaks the graph
    return found.float().sum() + y.sum()


def _unique_doubled(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    return torch.unique(y) * 2


def _printed(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    print("between the graphs")  # a break around Python, with no tensor op in it
    return y * 2


X = torch.tensor([0.1, 0.7, 0.9, 0.2, 3.0, -1.0, 0.6, 0.6])


@pytest.mark.parametrize(
    ("fn", "op"), [(_nonzero_count, "aten.nonzero"), (_unique_doubled, "aten._unique2")]
)
def test_error_policy_refuses_an_op_a_graph_break_runs_on_the_cpu(fn, op) -> None:
    compiled = torch.compile(fn, backend="hwsim", options={"config": "tiny", "fallback": "error"})
    with pytest.raises(Exception, match=rf"fallback='error': {op}.*graph break") as info:
        compiled(X)  # dynamo reports the backend's error as BackendCompilerFailed, ours its cause
    chain, error = [], info.value
    while error is not None:
        chain.append(error)
        error = error.__cause__ or getattr(error, "inner_exception", None)
    assert any(isinstance(e, FallbackError) for e in chain)


def test_cpu_policy_runs_it_and_records_the_break() -> None:
    compiled = torch.compile(
        _nonzero_count, backend="hwsim", options={"config": "tiny", "fallback": "cpu"}
    )
    torch.testing.assert_close(compiled(X), _nonzero_count(X))
    assert sum(bridge.last_report().graph_breaks.values()) >= 1


def test_warn_policy_warns_and_runs_it() -> None:
    compiled = torch.compile(
        _unique_doubled, backend="hwsim", options={"config": "tiny", "fallback": "warn"}
    )
    with pytest.warns(UserWarning, match="aten._unique2"):
        got = compiled(X)
    torch.testing.assert_close(got, _unique_doubled(X))


def test_a_break_with_no_tensor_op_in_it_is_not_a_cpu_op(capsys) -> None:
    compiled = torch.compile(
        _printed, backend="hwsim", options={"config": "tiny", "fallback": "error"}
    )
    torch.testing.assert_close(compiled(X), _printed(X))
    assert "between the graphs" in capsys.readouterr().out


class _Quantizable(torch.nn.Module):
    """User code around two linears: quantized, each becomes a call dynamo cannot trace (its
    packed weights are a ScriptObject), so it runs eagerly between the compiled graphs."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)) * 2)


def _quantized() -> torch.nn.Module:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notices
        return torch.ao.quantization.quantize_dynamic(
            _Quantizable().eval(), {torch.nn.Linear}, dtype=torch.qint8
        )


def test_error_policy_refuses_a_quantized_linear_a_graph_break_runs_on_the_cpu() -> None:
    compiled = torch.compile(
        _quantized(), backend="hwsim", options={"config": "tiny", "fallback": "error"}
    )
    with pytest.raises(
        Exception, match=r"fallback='error': a call with tensor arguments.*ScriptObject"
    ):
        compiled(torch.randn(2, 16))


def test_cpu_policy_runs_a_quantized_linear_and_records_the_break() -> None:
    model, x = _quantized(), torch.randn(2, 16)
    compiled = torch.compile(model, backend="hwsim", options={"config": "tiny", "fallback": "cpu"})
    torch.testing.assert_close(compiled(x), model(x))
    breaks = bridge.last_report().graph_breaks
    assert any("Failed to convert args/kwargs to proxy" in reason for reason in breaks)
