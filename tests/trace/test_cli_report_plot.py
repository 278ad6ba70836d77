"""``hwsim report`` and ``hwsim plot`` through the CLI entry point."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from synthetic_traces import pipeline_trace

from hwsim.cli import plot_cmd
from hwsim.plots import PLOT_KINDS
from hwsim.trace.outputs import write_run_outputs

cli = importlib.import_module("hwsim.cli.main")


@pytest.fixture
def hwsim():  # type: ignore[no-untyped-def]
    """``main(argv)`` of the hwsim command."""
    return cli.main


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run")
    write_run_outputs(pipeline_trace(7), out, plots=False)
    return out


def test_report_table(hwsim, run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert hwsim(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    for text in (
        "pipeline x7 on trn2",
        "TensorE",
        "MFU",
        "Critical path",
        "Bottleneck: descriptor-overhead-bound",
    ):
        assert text in out


def test_report_json_from_a_bare_trace(
    hwsim, run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert hwsim(["report", str(run_dir / "trace.json"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["engines"]["tensor"]["instructions"] == 7
    assert {"total_ns", "total_ticks", "engines", "mfu_pct", "hbm_bytes", "bottleneck"} <= set(
        summary
    )


@pytest.mark.parametrize("kind", PLOT_KINDS)
def test_plot(hwsim, run_dir: Path, tmp_path: Path, kind: str) -> None:
    out = tmp_path / f"{kind}.png"
    assert hwsim(["plot", str(run_dir / "trace.json"), "--kind", kind, "-o", str(out)]) == 0
    assert out.stat().st_size > 10_000


def test_plot_default_output_beside_the_run(hwsim, run_dir: Path) -> None:
    assert hwsim(["plot", str(run_dir), "--kind", "util"]) == 0
    assert (run_dir / "util.png").is_file()


def test_errors_are_one_line(hwsim, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert hwsim(["report", str(tmp_path / "nope")]) == 2
    assert "no such trace file or run folder" in capsys.readouterr().err
    (tmp_path / "x.json").write_text("not json")
    assert hwsim(["report", str(tmp_path / "x.json")]) == 2
    assert "not a Chrome trace JSON" in capsys.readouterr().err
    assert hwsim(["plot", str(tmp_path), "--kind", "util"]) == 2
    assert "no trace.json or summary.json" in capsys.readouterr().err


def test_kinds_match_the_plot_registry() -> None:
    assert plot_cmd.KINDS == PLOT_KINDS


def test_plot_kind_all_writes_every_figure_into_a_folder(
    hwsim, run_dir: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "figures"
    assert hwsim(["plot", str(run_dir), "--kind", "all", "--out", str(folder)]) == 0
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{k}.png" for k in PLOT_KINDS)


def test_output_flag_is_out_everywhere_and_the_old_spelling_still_parses(
    hwsim, run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "old.png"
    assert hwsim(["plot", str(run_dir), "--kind", "util", "--output", str(old)]) == 0
    assert old.is_file()
    parser = cli.build_parser(["plot"])
    with pytest.raises(SystemExit):
        parser.parse_args(["plot", "--help"])
    shown = capsys.readouterr().out
    assert "-o OUTPUT, --out OUTPUT" in shown and "--output" not in shown
    for argv in (["run", "--help"], ["demo", "--help"], ["fuzz", "--help"], ["nki", "--help"]):
        with pytest.raises(SystemExit):
            cli.build_parser(argv).parse_args(argv)
        assert "-o OUT, --out OUT" in capsys.readouterr().out, argv
