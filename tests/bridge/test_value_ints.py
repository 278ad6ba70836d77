"""Symbolic ints used as values, not sizes (``bridge.host_ints``): one program for every value,
the int fed as data and int outputs computed on the host; an int that is a size still gets a
program per value."""

from __future__ import annotations

import torch
import torch._dynamo
from torch.fx.experimental.proxy_tensor import make_fx

from hwsim import bridge
from hwsim.bridge.host_ints import value_ints

OPTIONS = {"fallback": "error", "config": "tiny"}


def setup_function():
    torch._dynamo.reset()


def _positions(x, n):
    """A sliding-window cache's pattern: positions from a count, and the count plus one."""
    return (x + torch.arange(4)) * n, n + 1


def test_an_int_used_as_a_value_needs_one_program_for_every_value():
    compiled = torch.compile(_positions, backend="hwsim", options=OPTIONS, dynamic=True)
    x = torch.randn(2, 4)
    for n in (3, 4, 9):
        got, count = compiled(x, n)
        torch.testing.assert_close(got, (x + torch.arange(4)) * n)
        assert count == n + 1
    report = bridge.last_report()
    assert len(report.graphs) == 1 and report.shape_recompiles == 0
    assert report.fallbacks() == []


def test_an_int_that_is_a_size_still_specializes():
    def head(x, n):
        return x[:n] * n

    compiled = torch.compile(head, backend="hwsim", options=OPTIONS, dynamic=True)
    x = torch.randn(6, 3)
    for n in (2, 3, 5):
        torch.testing.assert_close(compiled(x, n), x[:n] * n)
    assert bridge.last_report().shape_recompiles == 2


def test_value_ints_finds_operands_and_outputs():
    gm = make_fx(_positions, tracing_mode="symbolic")(torch.randn(2, 4), 3)
    found = value_ints(gm)
    assert found.inputs == frozenset({1}) and list(found.outputs) == [1]
    assert len(found.operands) == 1  # n, read by the multiply
    operands, outputs = found.call([torch.randn(2, 4), 7])
    assert [int(t) for t in operands] == [7] and outputs == {1: 8}
    rewritten = found.rewrite(gm)
    names = [n.name for n in rewritten.graph.nodes if n.op == "placeholder"]
    assert names[-1] == "value_int0"
