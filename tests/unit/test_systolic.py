"""The cycle-level systolic array (kernels.systolic) and the TensorE models built on it."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from hwsim.config import load_config
from hwsim.config.schema import HardwareConfig
from hwsim.cost.systolic_models import scalesim_ws_total_cycles
from hwsim.cost.tensor_models import TENSOR_TIMING_MODELS, MatmulShape
from hwsim.kernels.systolic import SystolicArray

SIZES = (1, 7, 32, 64, 100, 128)
MOVING_SIZES = (1, 64, 128, 512)
ARRAYS = ((128, 128), (32, 32), (64, 128), (128, 64), (256, 256), (16, 8))


def _ints(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    return rng.integers(-4, 5, size=shape).astype(np.float32)


def _config(rows: int, cols: int, model: str) -> HardwareConfig:
    partitions = max(128, rows, cols)
    return load_config(
        "trn2",
        {
            "tensor_engine.rows": rows,
            "tensor_engine.cols": cols,
            "tensor_engine.stationary_free_max": min(128, cols),
            "tensor_engine.timing_model": model,
            "sbuf.partitions": partitions,
            "psum.partitions": partitions,
        },
    )


# ---- numerics -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "m", "n", "rows", "cols", "factor", "edge", "overlap", "repeats"),
    [
        (1, 1, 1, 1, 1, 1, "left", True, 1),
        (4, 3, 5, 4, 4, 1, "left", True, 1),
        (7, 5, 9, 4, 3, 1, "left", True, 1),  # folds over K (2 tiles) and M (2 tiles)
        (100, 130, 33, 32, 32, 4, "left", True, 2),  # ragged K and M tiles, repeated
        (100, 130, 33, 32, 32, 2, "top", False, 1),  # SCALE-Sim-style loading
        (128, 128, 512, 128, 128, 4, "left", True, 1),
        (5, 5, 1, 16, 8, 64, "top", True, 3),  # load factor larger than the array
    ],
)
def test_product_equals_numpy_dot(
    k: int,
    m: int,
    n: int,
    rows: int,
    cols: int,
    factor: int,
    edge: str,
    overlap: bool,
    repeats: int,
) -> None:
    rng = np.random.default_rng(k * 1000 + m * 10 + n)
    stationary, moving = _ints(rng, (k, m)), _ints(rng, (k, n))
    array = SystolicArray(rows, cols, factor, edge, overlap)  # type: ignore[arg-type]
    run = array.matmul(stationary, moving, repeats)
    assert run.result is not None
    assert run.result.shape == (m, n)
    assert np.array_equal(run.result, repeats * np.dot(stationary.T, moving))


def test_operand_errors_name_the_problem() -> None:
    array = SystolicArray(4, 4)
    with pytest.raises(ValueError, match=r"share K .*\(4, 3\).*\(5, 2\)"):
        array.matmul(np.zeros((4, 3), np.float32), np.zeros((5, 2), np.float32))
    with pytest.raises(TypeError, match="stationary must be float32"):
        array.matmul(np.zeros((4, 3)), np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match="N must be >= 1, got 0"):
        array.matmul_timing(4, 4, 0)
    with pytest.raises(ValueError, match="load_edge must be one of"):
        SystolicArray(4, 4, load_edge="bottom")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rows must be >= 1"):
        SystolicArray(0, 4)


# ---- cycle counts -------------------------------------------------------------------------------


def test_single_matmul_exact_cycles() -> None:
    # 4x4 array, stationary [4, 3], moving [4, 5], weights from the left at 1 column per cycle.
    (fold,) = SystolicArray(4, 4).matmul_timing(4, 3, 5).folds
    assert (fold.load_start, fold.load_end) == (0, 2)  # 3 columns
    assert fold.first_input == 3
    assert fold.first_output == 3 + 3  # through 4 rows
    assert fold.last_input == 3 + 4
    assert fold.last_output == 3 + 4 + 3 + 2  # last column, 2 columns right of column 0
    assert (fold.load_cycles, fold.fill_cycles, fold.stream_cycles, fold.drain_cycles) == (
        3,
        3,
        5,
        2,
    )


def test_compute_and_timing_only_runs_agree() -> None:
    rng = np.random.default_rng(1)
    for k, m, n, factor, edge, overlap in [
        (70, 20, 9, 4, "left", True),
        (70, 20, 9, 1, "top", False),
        (7, 100, 64, 2, "left", False),
    ]:
        array = SystolicArray(32, 16, factor, edge, overlap)  # type: ignore[arg-type]
        run = array.matmul(_ints(rng, (k, m)), _ints(rng, (k, n)))
        assert array.matmul_timing(k, m, n).folds == run.folds


@pytest.mark.parametrize(("rows", "cols"), ARRAYS)
@pytest.mark.parametrize(
    ("edge", "overlap", "factor"), [("left", True, 4), ("left", False, 1), ("top", False, 1)]
)
def test_schedule_matches_its_closed_form(
    rows: int, cols: int, edge: str, overlap: bool, factor: int
) -> None:
    array = SystolicArray(rows, cols, factor, edge, overlap)  # type: ignore[arg-type]
    for k, m, n in itertools.product(SIZES, SIZES, MOVING_SIZES):
        run = array.matmul_timing(k, m, n)
        assert run.folds == array.reference_schedule(k, m, n), (k, m, n)
        assert len(run.folds) == math.ceil(k / rows) * math.ceil(m / cols)
        for fold in run.folds:
            span = fold.m_cols if edge == "left" else fold.k_rows
            assert fold.load_cycles == math.ceil(span / factor)
            assert fold.fill_cycles == rows - 1
            assert fold.stream_cycles == n
            assert fold.drain_cycles == fold.m_cols - 1


def test_overlapped_load_hides_behind_the_previous_matmul() -> None:
    # Back-to-back equal matmuls: one every max(N, ceil(M / f)) cycles, as the docs state [S1].
    for n, m in [(512, 128), (64, 128), (1, 128), (16, 100)]:
        folds = SystolicArray(128, 128, fast_load_factor=4).matmul_timing(128, m, n, 4).folds
        starts = [f.first_input for f in folds]
        assert {b - a for a, b in itertools.pairwise(starts)} == {max(n, math.ceil(m / 4))}


# ---- closed_form vs systolic_cycle --------------------------------------------------------------


@pytest.mark.parametrize(("rows", "cols"), ARRAYS)
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_closed_form_differs_from_cycle_model_by_documented_rule(
    rows: int, cols: int, dtype: str
) -> None:
    te = _config(rows, cols, "systolic_cycle").tensor_engine
    closed, cycle = TENSOR_TIMING_MODELS["closed_form"], TENSOR_TIMING_MODELS["systolic_cycle"]
    mult = te.cycles_multiplier_by_dtype[dtype]  # type: ignore[index]
    checked = 0
    for k, m, n in itertools.product(SIZES, SIZES, MOVING_SIZES):
        if k > rows or m > te.stationary_free_max:
            continue  # not one legal nc_matmul on this array
        shape = MatmulShape(k, m, n, dtype)
        cf, cy = closed(te, shape), cycle(te, shape)
        # LoadStationary: identical.
        assert cf.load_stationary_cycles == cy.load_stationary_cycles == mult * math.ceil(m / 4)
        # MM issue: the array streams N columns; closed_form adds the MM_INIT_LATENCY floor.
        assert cy.issue_interval_cycles == mult * n + te.access_overhead_cycles
        assert cf.issue_interval_cycles == max(
            cy.issue_interval_cycles, mult * min(te.min_ii_cycles, m)
        )
        # Latency beyond the issue interval: fill + drain vs the configured constant.
        assert cy.latency_cycles - cy.issue_interval_cycles == rows + m - 2
        assert cf.latency_cycles - cf.issue_interval_cycles == te.result_latency_cycles
        checked += 1
    assert checked >= 4


def test_systolic_cycle_folds_shapes_larger_than_the_array() -> None:
    te = _config(16, 8, "systolic_cycle").tensor_engine
    timing = TENSOR_TIMING_MODELS["systolic_cycle"](te, MatmulShape(100, 20, 64, "bf16"))
    folds = SystolicArray(16, 8, fast_load_factor=4).reference_schedule(100, 20, 64)
    assert len(folds) == 7 * 3
    assert timing.load_stationary_cycles == folds[0].load_cycles
    overhead = te.access_overhead_cycles  # the tensor-access start, outside the array [S1]
    assert (
        timing.issue_interval_cycles == folds[-1].last_input - folds[0].first_input + 1 + overhead
    )
    last_output = max(f.last_output for f in folds)
    assert timing.latency_cycles == last_output - folds[0].first_input + 1 + overhead


def test_fp8_double_row_packs_two_contraction_rows_per_pe_row() -> None:
    te = load_config("trn2", {"tensor_engine.timing_model": "systolic_cycle"}).tensor_engine
    model = TENSOR_TIMING_MODELS["systolic_cycle"]
    fp8 = model(te, MatmulShape(256, 128, 512, "fp8_e4m3", row_packing=2))
    assert fp8 == model(te, MatmulShape(128, 128, 512, "bf16"))
    unpacked = model(te, MatmulShape(128, 128, 512, "fp8_e4m3"))
    assert unpacked == model(te, MatmulShape(128, 128, 512, "bf16"))  # no packing: all 128 rows


# ---- SCALE-Sim ----------------------------------------------------------------------------------


def test_scalesim_formula_reproduces_scalesim_golden_reports() -> None:
    # scale-sim-v2 test/general/golden_trace_user_ws/COMPUTE_REPORT.csv (v3: the same "Compute
    # Cycles"): GEMM M=256, N=128, K=256 (topologies/GEMM_mnk/test_mnk_input.csv) on the 32x32 WS
    # array of configs/scale.cfg: 52447 total cycles of which 41248 are DRAM stalls.
    assert scalesim_ws_total_cycles(32, 32, M=256, N=128, K=256) == 52447 - 41248
    # scale-sim-v2 test/golden_trace/COMPUTE_REPORT.csv and scale-sim-v3 test/general/
    # golden_trace_calc/COMPUTE_REPORT.csv: AlexNet Conv1 (224x224x3, 11x11, 96 filters, stride 4;
    # topologies/conv_nets/alexnet_part.csv) on 32x32 WS, no stalls: 112283 cycles. As a GEMM:
    # M = 55 * 55 output pixels, N = 96 filters, K = 11 * 11 * 3.
    assert scalesim_ws_total_cycles(32, 32, M=55 * 55, N=96, K=11 * 11 * 3) == 112283


@pytest.mark.parametrize(("rows", "cols"), ARRAYS)
def test_scalesim_model_equals_formula_and_padded_cycle_model(rows: int, cols: int) -> None:
    te = _config(rows, cols, "scalesim_ws").tensor_engine
    model = TENSOR_TIMING_MODELS["scalesim_ws"]
    scalesim_like = SystolicArray(rows, cols, 1, load_edge="top", overlap_load=False)
    for k, m, n in itertools.product(SIZES, SIZES, MOVING_SIZES):
        expected = scalesim_ws_total_cycles(rows, cols, M=n, N=m, K=k)
        timing = model(te, MatmulShape(k, m, n, "bf16"))
        assert (timing.load_stationary_cycles, timing.issue_interval_cycles) == (0, expected)
        assert timing.latency_cycles == expected
        # The cycle model with SCALE-Sim's loading (top edge, 1 row per cycle, no overlap) counts
        # the same, except SCALE-Sim pads every fold to the full array (weight load over all rows,
        # drain over all columns) and reports the last cycle's index rather than a count.
        run = scalesim_like.matmul_timing(k, m, n)
        padding = sum((rows - f.k_rows) + (cols - f.m_cols) for f in run.folds)
        assert expected == run.total_cycles + padding - 1, (k, m, n)


def test_config_accepts_the_new_model_names() -> None:
    for name in ("systolic_cycle", "scalesim_ws"):
        config = load_config("trn2", {"tensor_engine.timing_model": name})
        assert config.tensor_engine.timing_model == name


@pytest.mark.parametrize("model", sorted(TENSOR_TIMING_MODELS))
def test_every_model_runs_a_flagged_fp32_matmul_at_two_bf16_passes(model: str) -> None:
    """The 0/1 fast path (is_*_onezero) halves fp32's 4 passes [S15][S16] in every timing model:
    a flagged fp32 matmul costs exactly what an unflagged one costs with a multiplier of 2."""
    te = load_config("trn2", {"tensor_engine.timing_model": model}).tensor_engine
    two_passes = load_config(
        "trn2",
        {"tensor_engine.timing_model": model, "tensor_engine.cycles_multiplier_by_dtype.fp32": 2},
    ).tensor_engine
    fn = TENSOR_TIMING_MODELS[model]
    for k, m, n in [(128, 128, 512), (64, 32, 100), (128, 1, 1)]:
        flagged = fn(te, MatmulShape(k, m, n, "fp32", onezero=True))
        assert flagged == fn(two_passes, MatmulShape(k, m, n, "fp32"))
        assert flagged != fn(te, MatmulShape(k, m, n, "fp32"))
        bf16 = MatmulShape(k, m, n, "bf16")
        assert fn(te, MatmulShape(k, m, n, "bf16", onezero=True)) == fn(te, bf16)
