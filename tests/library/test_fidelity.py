"""The fidelity bench (bench/fidelity.py) and its calibration (bench/calibrate.py): the cases are
the published kernels with their published figures, the presets hold what the calibration
derives from documented figures, and the cases run (the matmuls at full size as slow tests)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from hwsim.config import load_config

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name: str):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"bench_{name}"] = module
    spec.loader.exec_module(module)
    return module


def test_every_calibration_case_is_a_vendored_published_kernel_with_its_figures():
    cases = load("calibration_cases").calibration_cases()
    assert list(cases) == ["V1a", "V1b", "V1c", "V1", "V18", "K2-v2", "K2-v5"]
    names = [c.name for c in cases.values()]
    assert "matmul-trn2-tiled" in names and "matmul-trn2-blocked" in names
    published = {k: c.figures[0].published for k, c in cases.items()}
    assert published == {
        "V1a": 51.80,
        "V1b": 42.96,
        "V1c": 22.07,
        "V1": 6.97,
        "V18": 1416.0,
        "K2-v2": 39.89,
        "K2-v5": 28.30,
    }
    assert {c.config for c in cases.values()} == {"trn1", "trn2"}  # one preset per generation
    module = load("calibration_cases")
    for path in (module.TUTORIAL_FILE, module.DMA_EXAMPLE_FILE, module.OPTIMIZATION_DIR):
        assert path.exists() and any((parent / "SOURCE.md").exists() for parent in path.parents)


def test_the_trn2_curve_from_the_dma_figure_is_what_the_presets_hold():
    calibrate = load("calibrate")
    # heights of the [S12] figure's points: 2 KiB and 4 KiB per partition over 32 KiB
    assert calibrate.figure_efficiency(2048) == pytest.approx(340 / 418)
    assert calibrate.figure_efficiency(4096) == pytest.approx(403.5 / 418)
    # extended below 2 KiB log-linearly: the prior of the 512 B point without K2-v2
    e2, e4 = 340 / 418, 403.5 / 418
    assert calibrate.figure_extrapolated(512) == pytest.approx(e2 - 2 * (e4 - e2))
    for preset in ("trn2", "trn3"):
        curve = {int(k): v for k, v in load_config(preset).dma.descriptor_efficiency.items()}
        assert curve[2048] == round(e2, 3) and curve[4096] == round(e4, 3) and curve[8192] == 1.0
        assert 0 < curve[512] <= curve[2048]  # "256 B - 2 KiB improving" [S11]


def test_the_presets_hold_the_calibrated_values_with_their_comments():
    calibrate = load("calibrate")
    trn1 = load_config("trn1").dma.descriptor_efficiency
    trn2 = load_config("trn2")
    values = {
        "trn1.small_descriptor_efficiency": trn1[256],
        "trn2.small_descriptor_efficiency": trn2.dma.descriptor_efficiency[512],
        "trn2.tensor_access_overhead": float(trn2.tensor_engine.access_overhead_cycles),
        "trn2.vector_fixed_overhead": float(trn2.vector_engine.fixed_overhead_cycles),
    }
    assert calibrate.stale(values) == []  # trn3 carries trn2's values, trn1's curve is flat
    root = Path(__file__).resolve().parents[2] / "configs"
    for preset in ("trn1", "trn2", "trn3"):
        text = (root / f"{preset}.yaml").read_text()
        assert "calibrated" in text
        rewritten = text
        for path, value in calibrate.preset_overrides(values)[preset].items():
            rewritten = calibrate._set_yaml(rewritten, path, value, calibrate.COMMENTS[preset])
        assert rewritten == text  # what --write would write is what is there, comments included


def test_least_squares_lands_on_an_affine_figure_in_one_step():
    calibrate = load("calibrate")

    class Fake:
        """A figure whose time is affine in 1/efficiency, as a DMA-bound kernel's is."""

        cases: ClassVar[dict[str, None]] = {"X": None}

        def figure(self, case, figure, values):
            return 10.0 + 30.0 / values["p"]

        def published(self, case, figure):
            return 10.0 + 30.0 / 0.5

    p = calibrate.Parameter(
        "p",
        "trn1",
        "a curve point",
        (("X", "x"),),
        0.3,
        "a prior",
        calibrate._inverse,
        calibrate._inverse,
        lambda v: {},
        lambda v: round(v, 3),
        (0.05, 1.0),
    )
    lines: list[str] = []
    assert calibrate._least_squares(Fake(), p, [("X", "x")], {"p": 0.3}, lines) == 0.5
    assert len(lines) == 1 and "+0.00%" in lines[0]
    assert math.isclose(calibrate._inverse(calibrate._inverse(0.25)), 0.25)


def test_each_case_prints_its_critical_path_by_kernel_line_summing_to_its_run_time():
    """V18's three instructions: the load (Sync triggers it, then its transfer), the exp on
    ScalarE, the store (GpSimd, then its transfer); the critical path's links are those five,
    each named by opcode, kernel line and what it is, and their shares sum to the end tick."""
    fidelity = load("fidelity")
    case = load("calibration_cases").calibration_cases()["V18"]
    result, program, _ = case.simulate("verbatim", load_config(case.config))
    path = dict(fidelity.critical_path_by_line(result, program))
    assert sum(path.values()) == result.trace.end_tick
    file = "tensor_exp_kernel_isa.py"
    assert set(path) == {
        f"dma_copy {file}:18 (sync)",
        f"dma_copy {file}:18 (transfer)",
        f"activation {file}:21 (scalar)",
        f"dma_copy {file}:24 (gpsimd)",
        f"dma_copy {file}:24 (transfer)",
    }
    lines, failed = fidelity.run_case(case)
    assert failed == 0
    shown = lines[lines.index("        verbatim critical path, by kernel line:") + 1 :]
    assert [line.split("  ", 1)[1].strip() for line in (x.strip() for x in shown)] == [
        what for what, _ in fidelity.critical_path_by_line(result, program)
    ]
    assert all(line.strip().split()[1] == "us" for line in shown)  # a run under 1 ms


def test_a_critical_path_link_is_named_by_opcode_kernel_line_and_spill_kind():
    name = load("fidelity").link_name
    assert (
        name("k:block_all.py:115", "dma_copy", "transfer") == "dma_copy block_all.py:115 (transfer)"
    )
    assert (
        name("k:block_all.py:132", "nc_matmul", "tensor") == "nc_matmul block_all.py:132 (tensor)"
    )
    # the planner's DMAs: the kind and the tile's allocation line, not the tile (one per tile)
    for kind in ("spill", "reload", "reread", "refill"):
        tag = f"matrix_multiply_kernel:{kind}:sbuf1255 (block_all.py:73)"
        assert name(tag, "dma_copy", "sync") == f"dma_copy {kind} block_all.py:73 (sync)"


@pytest.mark.slow
def test_the_presets_hold_what_calibrate_derives_from_the_cases():
    """Solved again from the calibration cases by bench/calibrate.py's procedure, every
    calibrated value equals what the presets hold: a change to the model that moves a solution
    fails here until ``bench/calibrate.py --write`` is run (the fast test above only checks
    that the presets agree with each other and with their comments)."""
    calibrate = load("calibrate")
    cases = load("calibration_cases").calibration_cases()
    solution = calibrate.solve(calibrate.Evaluator(cases, log=lambda _: None))
    assert calibrate.stale(solution.values) == [], "\n".join(solution.derivation)


@pytest.mark.slow
@pytest.mark.parametrize("key", ["V1a", "V1b", "V1c", "V1", "K2-v2", "K2-v5"])
def test_the_matmul_cases_run_verbatim_within_ten_percent(key):
    fidelity = load("fidelity")
    case = load("calibration_cases").calibration_cases()[key]
    lines, failed = fidelity.run_case(case)
    assert failed == 0, "\n".join(lines)
    assert any(line.startswith(f"{case.name}:twin") for line in lines)
