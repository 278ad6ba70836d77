"""TensorE timing models, registered by name; the config picks one (``tensor_engine.timing_model``).

The registry and ``closed_form`` live here; ``systolic_models`` registers the other models when
the ``hwsim.cost`` package is imported (its ``__init__``), before anything can look one up.

Contract of a model: given the config and one matmul's shape, return the TensorE cost as a
``MatmulTiming`` in TensorE cycles. A model must be a pure function of its arguments (no state kept
between calls), so the simulator may compute costs once per program and cache them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hwsim.config.schema import TensorEngineConfig
from hwsim.registry import add_unique


@dataclass(frozen=True, slots=True)
class MatmulShape:
    """One ``nc_matmul``: stationary [K, M] (weights), moving [K, N] (streamed), dst [M, N]."""

    k_rows: int  # contraction = partitions of both inputs
    m_stationary: int  # stationary free size = output partitions = PE columns used
    n_moving: int  # moving free size = output free size
    dtype: str  # input dtype name
    onezero: bool = False  # an operand is flagged as holding only 0s and 1s (is_*_onezero)
    #: contraction rows each PE row takes: 2 for an FP8 "double row" matmul (v3+ [S2]), 4 for an
    #: MX matmul (v4 [S3]); k_rows / row_packing PE rows are used.
    row_packing: int = 1


@dataclass(frozen=True, slots=True)
class MatmulTiming:
    """Cycles of one matmul on TensorE.

    ``load_stationary_cycles``: the LoadStationary (LDWEIGHTS) occupancy; it runs in the
    background of the previous MultiplyMoving, so it only costs when it is the longer one.
    ``issue_interval_cycles``: MultiplyMoving (MATMUL) occupancy; the next matmul issues after it.
    ``latency_cycles``: from issue until the PSUM result is visible to other engines.
    """

    load_stationary_cycles: int
    issue_interval_cycles: int
    latency_cycles: int


def cycles_multiplier(te: TensorEngineConfig, shape: MatmulShape) -> int:
    """Passes one matmul makes through the array: ``cycles_multiplier_by_dtype`` (fp32 4x the
    bf16 cost [S1][S16]), divided (rounding up) by ``onezero_speedup_by_dtype`` when an operand
    is flagged all 0/1: the documented 2x for fp32 (HARDWARE.md §2.1 [S15][S16]), so a flagged
    fp32 matmul costs 2x bf16. Every timing model scales its cycles by this one number."""
    multiplier: int = te.cycles_multiplier_by_dtype.get(shape.dtype, 1)  # type: ignore[call-overload]
    if shape.onezero:
        speedup: int = te.onezero_speedup_by_dtype.get(shape.dtype, 1)  # type: ignore[call-overload]
        multiplier = -(-multiplier // speedup)
    return multiplier


TensorTimingModel = Callable[[TensorEngineConfig, MatmulShape], MatmulTiming]
TENSOR_TIMING_MODELS: dict[str, TensorTimingModel] = {}


def register_tensor_model(name: str) -> Callable[[TensorTimingModel], TensorTimingModel]:
    """Register a TensorE timing model under ``name``; a duplicate name is an error."""
    return lambda model: add_unique(TENSOR_TIMING_MODELS, name, model, "TensorE timing model")


@register_tensor_model("closed_form")
def closed_form(te: TensorEngineConfig, shape: MatmulShape) -> MatmulTiming:
    """The documented rules (HARDWARE.md §2.1).

    MM issue interval = max(multiplier(dtype) * min(MM_INIT_LATENCY, M_stationary),
                            multiplier(dtype) * N_moving + access_overhead) cycles.
    Without the overhead this is the documented average cost of back-to-back matmuls [S16]
    (max(N_moving, 64) for full stationary tiles [S1][S10]). The ~60-cycle overhead of starting
    an SBUF/PSUM tensor access [S1] is added to the streaming time, not to the 64-cycle floor, so
    a vector-matrix matmul still issues every ~64 cycles as [S10]'s worked example says, while a
    full 512-column matmul takes 512 + 60 cycles. This reading is ours: [S16]'s average formula
    has no overhead term, and for 64 < N the two documents disagree; the published V1 kernel
    (85% HFU on trn1, HARDWARE.md §5) supports the overhead (see bench/fidelity.py).
    LoadStationary = multiplier * ceil(M_stationary / fast_weight_load_factor) cycles [S1][S10];
    it overlaps the previous MM ("background LoadStationary"), so it never exceeds the MM here.
    Latency = issue interval + the array's result latency (fill/drain, a config parameter).
    ``multiplier`` is ``cycles_multiplier`` (dtype, and the 0/1 fast path).
    Row packing (FP8 double row, MX) does not enter: K never does, and a packed matmul of
    K = 128 x packing takes the time of a BF16 one with K = 128 [S2][S3] (HARDWARE.md §2.1).
    """
    multiplier = cycles_multiplier(te, shape)
    floor_cycles = multiplier * min(te.min_ii_cycles, shape.m_stationary)
    mm_cycles = max(floor_cycles, multiplier * shape.n_moving + te.access_overhead_cycles)
    load_cycles = multiplier * -(-shape.m_stationary // te.fast_weight_load_factor)
    return MatmulTiming(load_cycles, mm_cycles, mm_cycles + te.result_latency_cycles)
