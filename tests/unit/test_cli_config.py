"""The ``hwsim config`` and ``hwsim demo`` commands, and the one-line error contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hwsim.cli.config_cmd import json_schema_text
from hwsim.cli.main import main
from hwsim.config import PRESET_NAMES


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _hash(stdout: str) -> str:
    (line,) = [line for line in stdout.splitlines() if line.startswith("# hash: ")]
    return line.removeprefix("# hash: ")


def test_show_with_override_changes_value_and_hash(capsys: pytest.CaptureFixture[str]) -> None:
    code, plain, _ = _run(capsys, "config", "show", "trn2")
    assert code == 0
    assert "  rows: 128\n" in plain
    code, changed, err = _run(capsys, "config", "show", "trn2", "--set", "tensor_engine.rows=64")
    assert code == 0
    assert err == ""
    assert "  rows: 64\n" in changed
    assert "tensor_engine.rows=64" in changed.splitlines()[0]
    assert _hash(changed) != _hash(plain)


def test_show_output_is_a_loadable_config(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = _run(capsys, "config", "show", "tiny")
    assert code == 0
    path = tmp_path / "tiny-copy.yaml"
    path.write_text(out)
    code, again, _ = _run(capsys, "config", "show", str(path))
    assert code == 0
    assert _hash(again) == _hash(out)


def _assert_one_line_error(code: int, out: str, err: str, *parts: str) -> None:
    assert code != 0
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("hwsim: error: ")
    for part in parts:
        assert part in lines[0]
    assert "Traceback" not in err


def test_unknown_key_is_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "config", "show", "trn2", "--set", "tensor_engine.rowz=64")
    _assert_one_line_error(code, out, err, "tensor_engine.rowz", "did you mean 'rows'")


@pytest.mark.parametrize(
    ("argv", "parts"),
    [
        (["config", "show", "trn4"], ["trn4: not a preset", "did you mean 'trn3'"]),
        (["config", "show", "missing.yaml"], ["missing.yaml: config file not found"]),
        (["config", "show", "trn2", "--set", "tensor_engine.rows"], ["expected section.field"]),
        (["config", "show", "trn2", "--set", "tensor_engine.rows=0"], ["1 <= value <= 1024"]),
        (["config", "check", "--config", "tiny", "--set", "tensor_engine.rows=64"], ["exceeds"]),
        (["demo", "--config", "trn9"], ["trn9: not a preset"]),
    ],
)
def test_user_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], parts: list[str]
) -> None:
    _assert_one_line_error(*_run(capsys, *argv), *parts)


def test_debug_flag_shows_the_exception(capsys: pytest.CaptureFixture[str]) -> None:
    from hwsim.errors import ConfigError

    with pytest.raises(ConfigError, match="did you mean 'rows'"):
        main(["--debug", "config", "show", "trn2", "--set", "tensor_engine.rowz=64"])


def test_list_shows_the_four_presets(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "config", "list")
    assert code == 0
    listed = [line.split()[0] for line in out.splitlines()]
    assert sorted(listed) == sorted(PRESET_NAMES)


def test_check_prints_hash(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "config", "check", "--config", "trn1")
    assert code == 0
    assert out.startswith("trn1: ok, hash ")


def test_schema_to_stdout_and_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = _run(capsys, "config", "schema")
    assert code == 0
    assert out == json_schema_text()
    assert json.loads(out)["title"] == "hwsim hardware config"
    target = tmp_path / "schema.json"
    code, out, _ = _run(capsys, "config", "schema", "-o", str(target))
    assert code == 0
    assert target.read_text() == json_schema_text()


def test_config_peaks_prints_the_peak_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "config", "peaks", "trn2")
    assert code == 0
    assert err == ""
    assert "trn2" in out
    assert "TensorE peak" in out
    assert "78.64" in out  # bf16 TFLOPS per core, HARDWARE.md §2.1
    assert "4800 MHz" in out  # time base
    assert "368 GB/s" in out  # DMA aggregate per core, §2.5


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_config_peaks_on_every_preset(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code, out, _ = _run(capsys, "config", "peaks", name)
    assert code == 0
    assert f"{name}: NeuronCore-" in out


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_demo_simulates_checks_and_writes_a_run_on_every_preset(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    out_dir = tmp_path / name
    code, out, _ = _run(
        capsys,
        "demo",
        "--config",
        name,
        "--workload",
        "gemm:64x128x256:bf16",
        "--out",
        str(out_dir),
    )
    assert code == 0
    assert "numerics: OK" in out and "Bottleneck:" in out
    for name in (
        "trace.json",
        "summary.json",
        "timeline.png",
        "util.png",
        "memory.png",
        "roofline.png",
    ):
        assert (out_dir / name).stat().st_size > 0


def test_cli_subprocess_error_is_one_line() -> None:
    # What the installed ``hwsim`` script runs. (``python -m hwsim.cli.main`` would add a runpy
    # RuntimeWarning line, because the package ``hwsim.cli`` imports its ``main`` module first.)
    entry = "import sys; from hwsim.cli import main; sys.exit(main())"
    result = subprocess.run(
        [sys.executable, "-c", entry, "config", "show", "trn2", "--set", "tensor_engine.rowz=64"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "tensor_engine.rowz" in lines[0]
    assert "did you mean 'rows'" in lines[0]
