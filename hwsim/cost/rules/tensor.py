"""Cost rules of the TensorE instructions: ``nc_matmul`` and ``nc_matmul_mx`` on the configured
TensorE timing model (``hwsim.cost.tensor_models``, by name: ``tensor_engine.timing_model``), and
``nc_transpose`` on TensorE or VectorE (HARDWARE.md §2.1, §3 [S1][S16])."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hwsim import kernels
from hwsim.cost.rules.registry import cost_rule
from hwsim.cost.streaming import streaming_cycles
from hwsim.cost.tensor_models import TENSOR_TIMING_MODELS, MatmulShape
from hwsim.cost.values import Cost
from hwsim.isa.mx_ops import NcMatmulMx
from hwsim.isa.tensor_ops import NcMatmul, NcTranspose

if TYPE_CHECKING:
    from hwsim.cost.model import CostModel


def matmul_shape(instruction: NcMatmul) -> MatmulShape:
    """What a matmul's timing depends on: its (K, M, N), input dtype, 0/1 flag and packing."""
    k, m, n = instruction.dims()
    return MatmulShape(
        k,
        m,
        n,
        instruction.stationary.dtype.name,
        instruction.is_stationary_onezero or instruction.is_moving_onezero,
        instruction.packing(),
    )


def mx_matmul_shape(instruction: NcMatmulMx) -> MatmulShape:
    """An MX matmul: 4 contraction rows packed per partition (v4 [S3])."""
    return MatmulShape(
        kernels.MX_LANES * instruction.stationary.partitions,
        instruction.stationary.free_elements,
        instruction.moving.free_elements,
        instruction.stationary.dtype.name,
        row_packing=kernels.MX_LANES,
    )


def matmul_cost(model: CostModel, shape: MatmulShape) -> Cost:
    """The cost of one matmul of ``shape`` on the configured TensorE timing model.

    A matmul accumulating onto the previous one's result (the next K tile of a group) issues
    right behind it: accumulation is near-memory in PSUM as results stream out, and
    back-to-back accumulating matmuls run at the documented max(N, 64) [S1][S16]; only other
    engines wait for the result latency.
    """
    te = model.config.tensor_engine
    timing = TENSOR_TIMING_MODELS[te.timing_model](te, shape)
    issue = max(timing.issue_interval_cycles, timing.load_stationary_cycles)
    ticks = model.cycles("tensor", issue)
    return Cost(ticks, model.cycles("tensor", timing.latency_cycles), chain_ticks=ticks)


@cost_rule(NcMatmul)
def nc_matmul(model: CostModel, instruction: NcMatmul) -> Cost:
    return matmul_cost(model, matmul_shape(instruction))


@cost_rule(NcMatmulMx)
def nc_matmul_mx(model: CostModel, instruction: NcMatmulMx) -> Cost:
    return matmul_cost(model, mx_matmul_shape(instruction))


@cost_rule(NcTranspose)
def nc_transpose(model: CostModel, instruction: NcTranspose) -> Cost:
    p, f = instruction.src.partitions, instruction.src.free_elements
    if instruction.engine == "tensor":
        te = model.config.tensor_engine
        # [S16] max(P, min(64, F)) plus the tensor-access overhead, as for matmuls [S1]
        cycles = max(p, min(te.min_ii_cycles, f)) + te.access_overhead_cycles
        latency = cycles + te.result_latency_cycles
        return Cost(model.cycles("tensor", cycles), model.cycles("tensor", latency))
    # max(MIN_II, N) [S16], N streamed in and out as every VectorE operand
    work = streaming_cycles(model, "vector", (instruction.src,), (instruction.dst,))
    return model.compute("vector", work)
