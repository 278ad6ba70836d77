"""Per-op simulated time in the compile report: shares of the run's wall time.

Each moment some engine or DMA engine is busy is divided evenly among the ops busy then, so the
ops' times sum to the run's busy time (never more than the run, as per-engine busy times did:
4.14 ms of ops for a 3.42 ms GPT-2 run); a fused group's share is divided among its members by
each one's own cost (``own_cost_cycles``), not evenly.
"""

from __future__ import annotations

import pytest
import torch

from hwsim.bridge.op_times import OpTime, wall_shares
from hwsim.bridge.report import OpRecord, Report
from hwsim.bridge.report_records import RunOpTimes


def test_overlapping_intervals_split_their_overlap() -> None:
    shares = wall_shares([(0, 10, "a"), (5, 15, "b"), (20, 30, "a")])
    assert shares == {"a": 5 + 2.5 + 10, "b": 2.5 + 5}
    assert sum(shares.values()) == 25  # the union of busy time: 0-15 and 20-30


def test_one_owner_on_several_engines_counts_once() -> None:
    assert wall_shares([(0, 10, "a"), (0, 10, "a"), (2, 4, "a")]) == {"a": 10}


def test_empty_and_zero_length_intervals() -> None:
    assert wall_shares([]) == {}
    assert wall_shares([(3, 3, "a")]) == {}


def _timed(share_ns: float, members: tuple[str, ...] = ()) -> OpTime:
    return OpTime(start_ns=10.0, end_ns=50.0, instructions=3, members=members, share_ns=share_ns)


def test_the_report_sets_each_op_record_from_a_runs_times() -> None:
    report = Report("compile", "trn2", {}, "error")
    records = {name: OpRecord(name, "aten.op", "simulator") for name in ("mm", "a", "b", "c")}
    report.add(*records.values())
    run = RunOpTimes(
        records,
        {"mm": _timed(30.0), "fused_0": _timed(12.0, ("a", "b")), "fused_1": _timed(8.0, ("c",))},
        {"mm": 5.0, "a": 1.0, "b": 3.0, "c": 0.0},
    )
    report.add(run)
    times = {r.node: (r.sim_ns, r.span_ns, r.instructions) for r in report.ops}
    # a fused group divided by its members' own costs (1:3); a group whose members cost
    # nothing, evenly
    assert times == {
        "mm": (30.0, 40.0, 3),
        "a": (3.0, 40.0, 3),
        "b": (9.0, 40.0, 3),
        "c": (8.0, 40.0, 3),
    }
    report.add(RunOpTimes(records, {"mm": _timed(7.0)}, {"mm": 5.0}))  # a later call's times
    assert records["mm"].sim_ns == 7.0 and records["a"].sim_ns == 3.0


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up, self.down = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        return self.down(0.5 * h * (1 + torch.tanh(0.79788456 * (h + 0.044715 * h.pow(3)))))


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    from hwsim import bridge

    options = {"config": "trn2", "fallback": "error"}
    with torch.no_grad():  # inference: no saved activations among the outputs
        torch.compile(_Mlp(), backend="hwsim", options=options)(torch.randn(32, 64))
    return bridge.last_report()


def test_op_times_sum_to_at_most_the_run(report) -> None:  # type: ignore[no-untyped-def]
    total = sum(r.sim_ns for r in report.lowered())
    assert 0 < total <= report.total_sim_ns * (1 + 1e-9)
    assert total > 0.5 * report.total_sim_ns  # most of a small MLP's run is busy


def test_fused_members_get_their_own_costs(report) -> None:  # type: ignore[no-untyped-def]
    timed = [r for r in report.lowered() if r.sim_ns > 0]
    by_op = {r.op: r.sim_ns for r in timed}
    assert "aten.pow.Tensor_Scalar" in by_op and "aten.mul.Tensor" in by_op
    # pow reads one tensor and a multiply of two tensors reads two: not an even split
    two_tensor_muls = [
        r.sim_ns
        for r in timed
        if r.op == "aten.mul.Tensor" and r.sim_ns != by_op["aten.mul.Tensor"]
    ]
    distinct = {round(r.sim_ns, 6) for r in timed if r.op.startswith("aten.")}
    assert len(distinct) > 2, [(r.node, r.op, r.sim_ns) for r in timed]
    assert two_tensor_muls is not None
