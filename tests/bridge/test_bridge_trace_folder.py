"""The bridge's ``trace=`` folder goes through the output guard: checked when the options are
parsed, claimed once per process, never written through a planted link."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hwsim import outputs_guard
from hwsim.bridge.offload import HwsimMode
from hwsim.bridge.options import BridgeOptions
from hwsim.bridge.report import Report
from hwsim.outputs_guard import MARKER, OutputError


def test_trace_refuses_the_root_and_a_foreign_folder_unless_forced(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match=r"refusing to write into / \(the filesystem root\)"):
        HwsimMode("tiny", trace="/")
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"not an hwsim run folder .*pass force=True"):
        HwsimMode("tiny", trace=str(tmp_path))
    with pytest.raises(ValueError, match="force='yes'"):
        HwsimMode("tiny", trace=str(tmp_path), force="yes")
    with HwsimMode("tiny", fallback="cpu", trace=str(tmp_path), force=True):
        torch.relu(torch.randn(4, 5))
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert json.loads((tmp_path / "report.json").read_text())["counts"]["simulator"] == 1
    assert "report.json" in (tmp_path / MARKER).read_text().splitlines()


def test_every_graph_of_a_process_shares_one_claim(tmp_path: Path) -> None:
    first = BridgeOptions.parse({"config": "tiny", "trace": str(tmp_path / "t")})
    assert first.trace is not None
    first.trace.write_text("report.json", "{}")
    second = BridgeOptions.parse({"config": "tiny", "trace": str(tmp_path / "t")})
    assert second.trace is first.trace  # not cleared again: the first graph's files stay
    assert (tmp_path / "t" / "report.json").is_file()


def test_a_planted_link_in_an_earlier_trace_folder_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    folder = tmp_path / "t"
    x = torch.randn(4, 5)
    with HwsimMode("tiny", trace=str(folder)):
        torch.relu(x)
    (folder / "report.json").unlink()
    (folder / "report.json").symlink_to(victim)
    monkeypatch.setattr(outputs_guard, "_SESSIONS", {})  # as a new process would
    with HwsimMode("tiny", trace=str(folder)):
        torch.relu(x)
    assert victim.read_text() == "precious"
    assert not (folder / "report.json").is_symlink()


def test_report_save_is_guarded(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    report = Report("eager", "tiny", {}, "cpu")
    with pytest.raises(OutputError, match="pass force=True"):
        report.save(tmp_path)
    assert report.save(tmp_path, force=True) == tmp_path
    assert (tmp_path / "report.txt").is_file() and (tmp_path / "notes.txt").read_text() == "mine"
