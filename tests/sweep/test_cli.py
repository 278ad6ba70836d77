"""``hwsim sweep`` on the command line: run, dry run, export, plot, and its one-line errors."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from hwsim.cli import sweep_cmd
from hwsim.errors import HwsimError
from tests.sweep.helpers import write_spec


def _sweep(*argv: str) -> int:
    """Parse and run ``hwsim sweep ARGV`` (the command registered on a parser of its own)."""
    parser = argparse.ArgumentParser(prog="hwsim")
    sweep_cmd.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["sweep", *argv])
    return int(args.handler(args) or 0)


def test_run_then_export_then_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec, db = write_spec(tmp_path), tmp_path / "r.sqlite"
    assert _sweep(str(spec), "--db", str(db), "--jobs", "1", "--quiet") == 0
    out = capsys.readouterr().out
    assert "4 configs x 1 workloads = 4 runs" in out
    assert "4 runs in" in out and "4 ok, 0 failed; 0 already done" in out
    assert _sweep(str(spec), "--db", str(db), "-j", "1", "-q") == 0
    again = capsys.readouterr().out
    assert "0 runs in" in again and "4 already done" in again
    assert _sweep("export", str(db), "-o", str(tmp_path / "r.csv")) == 0
    assert len((tmp_path / "r.csv").read_text().splitlines()) == 5
    png = tmp_path / "line.png"
    args = ["plot", str(db), "--kind", "line", "--x", "dma.engines", "--metric", "total_ns"]
    assert _sweep(*args, "-o", str(png)) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_dry_run_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.sqlite"
    assert _sweep(str(write_spec(tmp_path)), "--db", str(db), "--dry-run") == 0
    assert "= 4 runs" in capsys.readouterr().out
    assert not db.exists()


def test_list_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    assert _sweep("--list-metrics") == 0
    out = capsys.readouterr().out.splitlines()
    assert "total_ns  (default)" in out and "engines.tensor.busy_pct  (default)" in out
    assert "max_abs_err  (with numerics: true)" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "name a sweep spec"),
        (("export", "r.sqlite"), "give -o"),
        (
            ("plot", "r.sqlite", "--kind", "heatmap", "--x", "a"),
            "--kind heatmap needs --y, --metric",
        ),
        (
            ("plot", "r.sqlite", "--kind", "pareto", "--x", "a", "--y", "b", "--metric", "c"),
            "--kind pareto does not take --metric",
        ),
        (("export", "r.sqlite", "--jobs", "2", "-o", "x.csv"), "--jobs: only for running a spec"),
        (("spec.yaml", "--kind", "line"), "--kind / -o are for"),
    ],
)
def test_usage_errors(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(HwsimError, match=message):
        _sweep(*argv)
