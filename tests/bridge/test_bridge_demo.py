"""The model half of ``make demo``: tiny GPT-2 via torch.compile, no CPU ops, a run folder."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hwsim.bridge.demo import main


def test_demo_runs_gpt2_with_no_cpu_ops_and_writes_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "CPU ops: 0" in out
    # the error beside the tolerance the check judged it at
    assert re.search(r"max abs error \S+ \(tolerance rtol \S+, atol \S+ in \w+\); CPU ops", out), (
        out
    )
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    for name in ("trace.json", "summary.json", "timeline.png", "roofline.png"):
        assert (run / name).stat().st_size > 0
    last = out.rstrip().splitlines()[-1]  # the demo ends by saying what to open next
    assert last.startswith(f"next: look at {run}/timeline.png") and f"{run}/trace.json" in last
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["counts"]["cpu"] == 0 and report["numerics_ok"]
    assert "aten.addmm.default" in (tmp_path / "report.txt").read_text()
    # The before/after line: every pass off, then the run above (all on), and their ratio.
    line = re.search(
        r"([\d.]+) µs with every pass off -> ([\d.]+) µs with all on \(([\d.]+)x\)", out
    )
    assert line is not None, out
    before, after, ratio = (float(g) for g in line.groups())
    # times print to 3 significant figures (hwsim.units): within half a unit of the last figure
    assert after == pytest.approx(report["total_sim_ns"] / 1000, rel=5e-3)
    assert before > after and ratio == pytest.approx(before / after, rel=1e-2)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["floor_ns"] > 0 and summary["over_floor"] > 1
