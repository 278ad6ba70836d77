"""TensorE timing models ``systolic_cycle`` (cycle-level array) and ``scalesim_ws`` (SCALE-Sim WS).

``systolic_cycle`` measures one ``nc_matmul`` on ``kernels.systolic``'s cycle-by-cycle model of a
``tensor_engine.rows`` x ``tensor_engine.cols`` weight-stationary array, Trainium-style: weights
enter from the left edge ``fast_weight_load_factor`` columns per cycle and load in the background
of the previous matmul. For a shape that fits the array (K <= rows, M <= cols), with
``mult = tensor_models.cycles_multiplier`` (``cycles_multiplier_by_dtype[dtype]``, halved for a
flagged 0/1 fp32 operand):

- LoadStationary = mult * ceil(M / fast_weight_load_factor)      (== closed_form's, exactly)
- MM issue interval = mult * N                                   (cycles row 0 accepts inputs)
- latency = issue interval + rows - 1 (fill) + M - 1 (drain)

Relation to ``closed_form`` (tested over shapes and array sizes in tests/unit/test_systolic.py):
closed_form's issue interval is ``max(systolic_cycle's, mult * min(min_ii_cycles, M))`` -- the
difference is exactly the MM_INIT_LATENCY floor, a documented instruction overhead [S1][S16] that
the array's dataflow does not produce -- and closed_form's latency adds the configured
``result_latency_cycles`` where the array model adds ``rows + M - 2``. Shapes larger than the
array are folded over K and M tiles; the issue interval then spans all folds' streams plus any
weight loads they expose. Row packing (``MatmulShape.row_packing``: FP8 "double row" 2, MX 4)
divides K before mapping it to rows.

``scalesim_ws`` reproduces SCALE-Sim's weight-stationary compute cycles (stall-free): weights are
preloaded with no overlap, each fold pays its fill and drain over the whole array. Derived from
SCALE-Sim v2 and v3 (github.com/scalesim-project/scale-sim-v2 and .../SCALE-Sim), file
``scalesim/compute/systolic_compute_ws.py``, class ``systolic_compute_ws``,
methods ``create_ifmap_demand_mat`` / ``create_filter_demand_mat`` / ``create_ofmap_demand_mat``
(each fold's demand is ``arr_row`` weight-load rows + T + ``arr_col - 1`` drain rows, skewed by
``arr_row - 1``: ``2*arr_row + arr_col + T - 2`` cycles) and ``scalesim/memory/
double_buffered_scratchpad_mem.py``, ``double_buffered_scratchpad.service_memory_requests``
(total cycles = the cycle of the last OFMAP demand row, i.e. rows - 1 when nothing stalls).
Checked against SCALE-Sim's own golden reports (scale-sim-v2 ``test/general/golden_trace_user_ws/
COMPUTE_REPORT.csv``, ``test/golden_trace/COMPUTE_REPORT.csv``; scale-sim-v3 ``test/general/
golden_trace_user_ws/COMPUTE_REPORT.csv``, ``test/general/golden_trace_calc/COMPUTE_REPORT.csv``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from hwsim.config.schema import TensorEngineConfig
from hwsim.cost.tensor_models import (
    MatmulShape,
    MatmulTiming,
    cycles_multiplier,
    register_tensor_model,
)
from hwsim.kernels.systolic import SystolicArray


def scalesim_ws_total_cycles(R: int, C: int, M: int, N: int, K: int) -> int:
    """SCALE-Sim's weight-stationary compute cycles of one GEMM with no memory stalls.

    SCALE-Sim's GEMM convention: ``C[M, N] = A[M, K] @ B[K, N]`` on an ``R`` x ``C`` array, read by
    ``topology_utils.load_arrays_gemm`` as a 1 x K filter over an M x K ifmap with N filters, so
    the WS operand matrices have ``Sr = K`` (rows: contraction), ``Sc = N`` (columns: filters) and
    ``T = M`` (streamed ifmap rows). Folds = ceil(Sr / R) * ceil(Sc / C), each
    ``2R + C + T - 2`` cycles; SCALE-Sim reports the index of the last cycle, hence the ``- 1``.
    For an ``nc_matmul`` (stationary [K, M_st], moving [K, N_mv]): ``M = N_mv``, ``N = M_st``.
    """
    for name, value in (("R", R), ("C", C), ("M", M), ("N", N), ("K", K)):
        if value < 1:
            raise ValueError(f"scalesim_ws_total_cycles: {name} must be >= 1, got {value}")
    folds = -(-K // R) * -(-N // C)
    return folds * (2 * R + C + M - 2) - 1


@dataclass(frozen=True, slots=True)
class SystolicCounts:
    """One matmul on the cycle model, single-pass cycles (before the dtype multiplier)."""

    load_cycles: int  # the first fold's weight load
    stream_cycles: int  # first input of the first fold .. last input of the last fold
    tail_cycles: int  # last input .. last output (fill + drain of the last fold)


@lru_cache(maxsize=4096)
def systolic_counts(
    rows: int, cols: int, fast_load_factor: int, k_rows: int, m_stationary: int, n_moving: int
) -> SystolicCounts:
    """Measure one matmul on the cycle model (Trainium-style: left-edge load, overlapped)."""
    array = SystolicArray(rows, cols, fast_load_factor, load_edge="left", overlap_load=True)
    run = array.matmul_timing(k_rows, m_stationary, n_moving)
    first, last = run.folds[0], run.folds[-1]
    return SystolicCounts(
        load_cycles=first.load_cycles,
        stream_cycles=last.last_input - first.first_input + 1,
        tail_cycles=run.last_output_cycle - last.last_input,
    )


def _dtype_factors(te: TensorEngineConfig, shape: MatmulShape) -> tuple[int, int]:
    """(passes through the array, contraction rows per PE row): ``cycles_multiplier`` (dtype
    and the 0/1 fast path, as closed_form) and the shape's row packing."""
    return cycles_multiplier(te, shape), shape.row_packing


@register_tensor_model("systolic_cycle")
def systolic_cycle(te: TensorEngineConfig, shape: MatmulShape) -> MatmulTiming:
    """Costs measured on the cycle-by-cycle systolic array model (see the module docstring)."""
    multiplier, packing = _dtype_factors(te, shape)
    counts = systolic_counts(
        te.rows,
        te.cols,
        te.fast_weight_load_factor,
        -(-shape.k_rows // packing),
        shape.m_stationary,
        shape.n_moving,
    )
    # The tensor-access start overhead [S1] is outside the array; added as closed_form adds it.
    issue = multiplier * counts.stream_cycles + te.access_overhead_cycles
    return MatmulTiming(multiplier * counts.load_cycles, issue, issue + counts.tail_cycles)


@register_tensor_model("scalesim_ws")
def scalesim_ws(te: TensorEngineConfig, shape: MatmulShape) -> MatmulTiming:
    """SCALE-Sim's WS count for this matmul as one GEMM; no background weight load.

    The weight preload is inside SCALE-Sim's count, so it is part of the issue interval here and
    ``load_stationary_cycles`` is 0 (nothing for the engine to overlap). The result is visible
    when the count ends. Multiplier and packing as in ``systolic_cycle`` (both 1 for bf16).
    """
    multiplier, packing = _dtype_factors(te, shape)
    cycles = multiplier * scalesim_ws_total_cycles(
        te.rows,
        te.cols,
        M=shape.n_moving,
        N=shape.m_stationary,
        K=-(-shape.k_rows // packing),
    )
    return MatmulTiming(0, cycles, cycles)
