"""Saved programs (``FILE.hwprog``) without torch: ``hwsim run`` on many configs, the
compatibility rule, the numerics check against stored expected outputs, and sweeps."""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hwsim import lang
from hwsim.config import load_config
from hwsim.errors import IncompatibleProgramError
from hwsim.lang import isa
from hwsim.sweep import load_results, load_sweep, run_sweep
from hwsim.workloads.gemm import GemmSpec, build_gemm, reference
from hwsim.workloads.registry import NumericsVerdict, combined_verdict
from hwsim.workloads.saved import (
    EXPECTED_OUTPUTS,
    LOWERED_FOR,
    check_compatible,
    check_outputs,
    compare_arrays,
    load_program,
    lowered_for,
    save_program,
)
from tests.sweep.helpers import write_spec

cli = importlib.import_module("hwsim.cli.main")
SPEC = GemmSpec.parse("gemm:32x64x512")  # needs 3200 B of each SBUF partition, 3 DMA queues


def _save(path: Path, scale: float = 1.0) -> Path:
    """A gemm lowered for ``tiny`` and saved as ``hwsim export`` saves a model (meta included);
    ``scale`` != 1 stores wrong expected outputs."""
    config = load_config("tiny")
    program = build_gemm(SPEC, config)
    program.meta[LOWERED_FOR] = lowered_for(program, config)
    expected = (reference(SPEC) * scale).astype(np.float32).reshape(-1)
    program.meta[EXPECTED_OUTPUTS] = {"c": {"values": expected, "rtol": 1.6e-2, "atol": 1e-2}}
    return save_program(program, path)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save(tmp_path_factory.mktemp("saved") / "gemm.hwprog")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    code = cli.main(["run", *argv, "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


def test_timing_fields_may_differ_and_numerics_hold(
    saved: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, base, _ = _run(capsys, str(saved), "--config", "tiny")
    slow_dma = "dma.bandwidth_bytes_per_ns=1"
    code_slow, slow, _ = _run(capsys, str(saved), "--config", "tiny", "--set", slow_dma)
    assert code == code_slow == 0
    assert base["numerics_ok"] and slow["numerics_ok"]
    assert base["max_abs_err"] == slow["max_abs_err"]  # numerics do not depend on timing
    assert slow["total_ns"] > base["total_ns"]


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("tensor_engine.rows=16", "tensor_engine.rows=16 (lowered for 32)"),
        ("psum.banks=8", "psum.banks=8 (lowered for 4)"),
        ("sbuf.bytes_per_partition=2048", "sbuf.bytes_per_partition=2048 (the program needs 3200)"),
        ("dma.queues_per_engine=2", "dma.queues_per_engine=2 (the program needs 3)"),
    ],
)
def test_a_geometry_change_is_one_clear_line(
    saved: Path, capsys: pytest.CaptureFixture[str], override: str, named: str
) -> None:
    code, _, err = _run(capsys, str(saved), "--config", "tiny", "--set", override)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("hwsim: error: ")
    assert named in err and "lowered for tiny" in err and "re-export the model" in err


def test_wrong_expected_outputs_are_a_mismatch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, summary, _ = _run(capsys, str(_save(tmp_path / "bad.hwprog", 1.5)), "--config", "tiny")
    assert code == 1 and summary["numerics_ok"] is False and summary["max_abs_err"] > 1


def test_meta_of_a_run_holds_no_arrays(saved: Path, tmp_path: Path) -> None:
    assert cli.main(["run", str(saved), "--config", "tiny", "--out", str(tmp_path / "o")]) == 0
    text = (tmp_path / "o" / "trace.json").read_text()
    assert LOWERED_FOR in text and EXPECTED_OUTPUTS not in text


@lang.kernel
def _copy_on_scalar(x):
    """A ScalarE tensor_copy: legal on NeuronCore-v3, not on v2."""
    out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out")
    tile = lang.load(x)
    copied = lang.ndarray(x.shape, x.dtype)
    isa.tensor_copy(copied, tile, engine="scalar")
    lang.store(out, copied)
    return out


def test_an_instruction_another_generation_forbids_says_re_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = load_config("tiny")
    program = _copy_on_scalar.build(np.ones((4, 8), np.float32), config=config).program
    program.meta[LOWERED_FOR] = lowered_for(program, config)
    path = save_program(program, tmp_path / "copy.hwprog")
    code, _, err = _run(capsys, str(path), "--config", "tiny", "--set", "chip.generation=v2")
    assert code == 2 and "ScalarE has no tensor_copy on NeuronCore-v2" in err
    assert "lowered for tiny, NeuronCore-v3, and this config differs: re-export" in err


def test_programs_without_export_meta_run_anywhere(tmp_path: Path) -> None:
    program = build_gemm(SPEC, load_config("tiny"))
    check_compatible(program, load_config("trn2"))  # nothing recorded, nothing refused
    path = save_program(program, tmp_path / "plain.hwprog")
    assert load_program(path).instruction_count == program.instruction_count


def test_compare_arrays_follows_the_bridge_formula() -> None:
    expected = np.array([1.0, -2.0, np.nan, np.inf, 0.0], dtype=np.float32)
    same = expected.copy()
    assert compare_arrays(same, expected, 1e-5, 1e-5) == (0.0, 0)
    # atol scales with the RMS of the finite expected values (sqrt(5 / 3) here)
    scale = math.sqrt((1 + 4 + 0) / 3)
    near = same.copy()
    near[4] = 0.9e-2 * scale
    assert compare_arrays(near, expected, 0.0, 1e-2)[1] == 0
    near[4] = 1.1e-2 * scale
    assert compare_arrays(near, expected, 0.0, 1e-2)[1] == 1
    for index in (2, 3):  # where NaN or an infinity is expected, only the same value passes
        moved = same.copy()
        moved[index] = 1.0
        assert compare_arrays(moved, expected, 1e-5, 1e-5) == (math.inf, 1)
    assert compare_arrays(same[:3], expected, 1e-5, 1e-5)[1] == 5


def test_a_sweep_over_timing_fields_lowers_nothing_and_checks_numerics(
    saved: Path, tmp_path: Path
) -> None:
    (tmp_path / "gemm.hwprog").write_bytes(saved.read_bytes())
    grid = {"dma.bandwidth_bytes_per_ns": [2, 4], "tensor_engine.rows": [32, 16]}
    spec = write_spec(
        tmp_path,
        workloads=["gemm.hwprog"],
        parameters={"grid": grid},
        numerics=True,
        metrics=["total_ns", "numerics_ok"],
    )
    outcome = run_sweep(load_sweep(spec), tmp_path / "r.sqlite", jobs=1, progress=False)
    assert (outcome.ok, outcome.failed) == (2, 2)
    rows = load_results(tmp_path / "r.sqlite")
    rows = rows.to_dict("records") if hasattr(rows, "to_dict") else rows
    ok = [r for r in rows if r["status"] == "ok"]
    assert {r["tensor_engine.rows"] for r in ok} == {32}
    assert all(r["numerics_ok"] for r in ok)
    failed = [r for r in rows if r["status"] != "ok"]
    assert all(IncompatibleProgramError.__name__ in r["error"] for r in failed)
    assert all("tensor_engine.rows=16 (lowered for 32)" in r["error"] for r in failed)


def test_running_a_saved_program_never_imports_torch(saved: Path) -> None:
    code = (
        "import sys\n"
        "from hwsim.cli.main import main\n"
        f"argv = ['run', {str(saved)!r}, '--config', 'tiny', '--json', '--timing-only']\n"
        "assert main(argv) == 0\n"
        "assert 'torch' not in sys.modules and 'hwsim.bridge' not in sys.modules, 'torch'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_verdict_names_the_bound_the_worst_element_was_held_to() -> None:
    expected = np.array([100.0, 1.0, 0.0], dtype=np.float32)
    program_outputs = {"y": expected + np.array([0.5, 0.02, 0.0], dtype=np.float32)}
    want = {"y": {"values": expected, "rtol": 1e-2, "atol": 0.0}}
    verdict = check_outputs(want, program_outputs)
    # the largest error (0.5 on 100, bound 1.0) passes; 0.02 on 1.0 (bound 0.01) does not: the
    # verdict's tolerance is the bound that was broken, not the largest bound
    assert not verdict.ok and verdict.max_abs_err == pytest.approx(0.5)
    assert verdict.tolerance == pytest.approx(0.01)
    program_outputs["y"][1] = 1.005
    verdict = check_outputs(want, program_outputs)
    assert verdict.ok and verdict.tolerance == pytest.approx(1.0)  # nearest its bound: 0.5 of 1.0


def test_verdicts_of_several_outputs_keep_the_tightest() -> None:
    loose = NumericsVerdict(max_abs_err=0.5, ok=True, tolerance=10.0)
    tight = NumericsVerdict(max_abs_err=0.009, ok=True, tolerance=0.01)
    both = combined_verdict([loose, tight])
    assert both == NumericsVerdict(0.5, True, 0.01)
    assert combined_verdict([]).ok
