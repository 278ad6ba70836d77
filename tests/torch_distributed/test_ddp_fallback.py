"""The fallback policy under DDP: DDP's DDPOptimizer splits the graph at its gradient buckets,
compiles each piece and runs it on fake tensors inside the same compiler call; dynamo turns a
FakeTensor exception from that call into a silent graph break. Nothing the bridge does may take
a graph off the simulator without the policy seeing it."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import fx, nn
from torch._subclasses.fake_tensor import DynamicOutputShapeException
from torch.nn.parallel import DistributedDataParallel as DDP

import hwsim.bridge
import hwsim.bridge.dynamo
from hwsim.bridge.distributed import api
from hwsim.bridge.distributed.threads import run_threads
from hwsim.bridge.errors import FallbackError
from hwsim.bridge.graph_break_guard import guarded, refuse_silent_graph_breaks
from hwsim.bridge.options import BridgeOptions


class _Buckets(nn.Module):
    """About 1.4 MB of parameters: two DDP buckets (1 MB is DDP's first), so DDPOptimizer
    splits the graph."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(128, 512), nn.Linear(512, 512), nn.Linear(512, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(torch.tanh(self.b(torch.tanh(self.a(x)))))


class _Nonzero(_Buckets):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = super().forward(x)
        return h.sum() * torch.nonzero(h > 0).shape[0]


def _ddp_step(base: nn.Module, x: torch.Tensor, fallback: str, ranks: int = 2) -> list:
    def step(rank: int) -> tuple[dict[str, torch.Tensor], dict, object]:
        model = copy.deepcopy(base)
        options = {"fallback": fallback, "auto_cast": "none"}
        compiled = torch.compile(DDP(model, bucket_cap_mb=1), backend="hwsim", options=options)
        compiled(x[rank : rank + 1]).square().mean().backward()
        grads = {k: p.grad for k, p in model.named_parameters()}
        return grads, api.report()["total"], hwsim.bridge.last_report()

    return run_threads(step, ranks)


def test_ddp_buckets_run_on_the_simulator_with_the_eager_check_on():
    """Each bucket's compiled piece, checked against eager (the default), used to be run on
    fake tensors by DDPOptimizer; the check's comparison raised a FakeTensor exception there,
    dynamo broke the graph, and every rank ran the model on the CPU with no error under
    fallback='error' (its report: 0 graphs)."""
    torch.manual_seed(0)
    base = _Buckets()
    x = torch.randn(2, 128, generator=torch.Generator().manual_seed(1))
    reference = copy.deepcopy(base)
    reference(x).square().mean().backward()
    for grads, total, report in _ddp_step(base, x, "error"):
        assert total["graphs"] >= 4 and total["compute_ns"] > 0  # >= 2 buckets, fw and bw
        assert not report.fallbacks() and report.numerics_ok
        assert not [r for r in report.graph_breaks if "Backend compiler" in r]
        for name, p in reference.named_parameters():
            torch.testing.assert_close(grads[name], p.grad, rtol=1e-5, atol=1e-6)


def test_a_data_dependent_op_under_ddp_is_refused_under_error():
    torch.manual_seed(0)
    x = torch.randn(2, 128)
    with pytest.raises(Exception, match=r"fallback='error': aten\.nonzero"):
        _ddp_step(_Nonzero(), x, "error")


def test_a_data_dependent_op_under_ddp_is_in_the_report_under_cpu():
    """The break's op is in the report of each rank that compiled the graph it broke. Rank
    threads share dynamo's compiled code, so which ranks compiled it (one, or each of them when
    they reach the compile together) varies from run to run, and ``last_report()`` is the
    process's latest, not the calling rank's: the test reads every report this step made."""
    torch.manual_seed(0)
    x = torch.randn(2, 128)
    before = {id(report) for report in hwsim.bridge.dynamo.reports()}  # alive: ids unique
    ranks = _ddp_step(_Nonzero(), x, "cpu")
    made = [report for report in hwsim.bridge.dynamo.reports() if id(report) not in before]
    for _, total, _ in ranks:
        assert total["graphs"] > 0
    cpu_ops = [record.op for report in made for record in report.fallbacks()]
    assert set(cpu_ops) == {"aten.nonzero.default"}
    assert 1 <= len(cpu_ops) <= len(ranks)


def _graph() -> fx.GraphModule:
    return fx.symbolic_trace(lambda x: torch.relu(x) + 1)


def _raises_like_fake_tensor(*args: object) -> None:
    raise DynamicOutputShapeException(torch.ops.aten.nonzero.default)


def test_an_exception_dynamo_would_turn_into_a_graph_break_meets_the_policy():
    """Any part of the bridge raising one of the types dynamo swallows: 'error' raises
    FallbackError (which dynamo does not swallow); 'cpu' lets dynamo break the graph and
    records the graph's ops as CPU ops."""
    gm = _graph()
    strict = BridgeOptions.parse({"fallback": "error"})
    refused = pytest.raises(FallbackError, match=r"aten\.nonzero\.default.*while compiling")
    with refused, refuse_silent_graph_breaks(gm, strict, "compiling"):
        _raises_like_fake_tensor()
    with pytest.raises(FallbackError, match="while running"):
        guarded(_raises_like_fake_tensor, gm, strict)(torch.ones(2))
    lenient = BridgeOptions.parse({"fallback": "cpu"})
    with pytest.raises(DynamicOutputShapeException):
        guarded(_raises_like_fake_tensor, gm, lenient)(torch.ones(2))
    assert sorted(r.op for r in lenient.report.fallbacks()) == ["_operator.add", "torch.relu"]
