"""``Report.add`` is the one way into a report: each typed record lands in its own list."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from hwsim.bridge.precision import TOLERANCES, compare
from hwsim.bridge.report import OpRecord, OutputRecord, Report
from hwsim.bridge.report_records import (
    CompileSeen,
    ComputeDtypes,
    GraphOnCpu,
    GraphRow,
    HostTimes,
    OutputCheck,
    PipelineRow,
    RunRow,
    TimelineRow,
)


def _report() -> Report:
    return Report("compile", "trn2", {"compute": "fp32", "accumulate": "fp32"}, "cpu")


def _output(name: str, error: float) -> OutputRecord:
    stats = compare(torch.ones(2) + error, torch.ones(2), TOLERANCES["fp32"])
    return OutputRecord(name, (2,), "torch.float32", "fp32", stats)


def test_each_record_lands_in_its_own_list_as_the_row_the_report_saves() -> None:
    report = _report()
    op = OpRecord("addmm", "aten.addmm.default", "simulator")
    report.add(op, RunRow("graph0", {"total_ns": 5.0}), GraphRow("graph0", "forward", 3, 2, 1, 2))
    report.add(PipelineRow("graph0", {"passes": "all"}, {"free_elements": 512}))
    report.add(TimelineRow("graph0", 1, 10.0, 20.0))
    assert report.ops == [op]
    assert report.runs == [{"graph": "graph0", "total_ns": 5.0}]
    assert report.graphs == [
        {
            "graph": "graph0",
            "kind": "forward",
            "nodes": 3,
            "simulator": 2,
            "cpu": 1,
            "partitions": 2,
        }
    ]
    assert report.pipelines == [
        {"graph": "graph0", "passes": "all", "autotune": {"free_elements": 512}}
    ]
    assert report.timelines == [
        {"graph": "graph0", "call": 1, "simulated_ns": 10.0, "cpu_host_ns": 20.0}
    ]


def test_a_later_check_of_an_output_keeps_the_worse_unless_told_to_keep_both() -> None:
    report = _report()
    bad, good = _output("out0", 1e-2), _output("out0", 0.0)
    report.add(OutputCheck(bad, "graph"), OutputCheck(good, "graph"))
    assert report.outputs == [bad]
    report.add(OutputCheck(good, "eager"), OutputCheck(bad, "eager"))
    assert report.eager_outputs == [bad]
    report.add(OutputCheck(good, "gradient", worst=False), OutputCheck(good, "gradient", False))
    assert report.gradients == [good, good]


def test_compiles_add_their_ids_and_graph_breaks() -> None:
    report = _report()
    report.add(CompileSeen((0, 0), {"data-dependent": 1}), CompileSeen(None, {"data-dependent": 2}))
    report.add(CompileSeen((0, 1)))
    assert report.compile_ids == [(0, 0), (0, 1)] and report.recompiles == 1
    assert report.graph_breaks == {"data-dependent": 3}


def test_a_record_of_no_known_kind_is_refused() -> None:
    with pytest.raises(TypeError, match="a Report records no dict"):
        _report().add({"graph": "graph0"})  # type: ignore[arg-type]


def test_what_becomes_of_recorded_ops_reaches_them_through_add() -> None:
    report = _report()
    mm = OpRecord("mm", "aten.mm.default", "simulator")
    relu = OpRecord("relu", "aten.relu.default", "simulator")
    report.add(mm, relu)
    records = {"mm": mm, "relu": relu}
    report.add(ComputeDtypes(records, {"mm": "bf16", "not_recorded": "bf16"}))
    assert (mm.compute_dtype, relu.compute_dtype) == ("bf16", "")
    report.add(GraphOnCpu([mm, relu], "shape", "its subgraph graph0 failed to lower: K > 4096"))
    assert [(r.status, r.reason) for r in report.fallbacks()] == [("cpu", "shape")] * 2
    assert relu.detail == "its subgraph graph0 failed to lower: K > 4096"
    report.add(HostTimes(records, {"relu": 1500.0}), HostTimes(records, {"relu": 900.0}))
    assert (mm.host_ns, relu.host_ns) == (0.0, 900.0)  # the last call's
    assert report.ops == [mm, relu]


#: Fields of an op record the report sets once the record is in it (through ``add``).
REPORT_OWNED = {"status", "reason", "detail", "sim_ns", "span_ns", "instructions"}
REPORT_OWNED |= {"compute_dtype", "host_ns"}


def test_no_bridge_module_but_the_report_sets_a_recorded_ops_fields() -> None:
    """Building the report in one place: a part of the bridge hands the report a typed record
    of what happened to its ops, and never assigns their fields itself."""
    bridge = Path(__file__).resolve().parents[2] / "bridge"
    found = []
    for path in sorted(bridge.rglob("*.py")):
        if path.name == "report.py" and path.parent == bridge:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                for leaf in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if (
                        isinstance(leaf, ast.Attribute)
                        and leaf.attr in REPORT_OWNED
                        and not (isinstance(leaf.value, ast.Name) and leaf.value.id == "self")
                    ):
                        found.append(f"{path.relative_to(bridge.parent)}:{node.lineno} {leaf.attr}")
    assert found == []
