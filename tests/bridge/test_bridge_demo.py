"""The model half of ``make demo``: tiny GPT-2 via torch.compile, no CPU ops, a run folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hwsim.bridge.demo import main


def test_demo_runs_gpt2_with_no_cpu_ops_and_writes_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "CPU ops: 0" in out
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    for name in ("trace.json", "summary.json", "timeline.png", "roofline.png"):
        assert (run / name).stat().st_size > 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["counts"]["cpu"] == 0 and report["numerics_ok"]
    assert "aten.addmm.default" in (tmp_path / "report.txt").read_text()
