"""Cost rules of the VectorE and GpSimdE instructions with their own documented formula (the
one-pass ones are ``hwsim.cost.rules.streams``' table): reductions, gathers, top-k, random
numbers, MX quantisation. HARDWARE.md §3 [S16] unless the instruction's docstring says otherwise;
factors are ``RuleConstants`` fields.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

from hwsim import kernels
from hwsim.cost.rules.registry import cost_rule
from hwsim.cost.streaming import lane_cycles, streaming_cycles
from hwsim.isa.ap import AccessPattern
from hwsim.isa.gather_ops import LocalGather, NcNGather
from hwsim.isa.gpsimd_ops import TensorPartitionReduce
from hwsim.isa.index_ops import TopK
from hwsim.isa.mx_ops import QuantizeMx
from hwsim.isa.random_ops import Dropout, Rand2, Rng
from hwsim.isa.reduce_ops import BnAggr, TensorReduce
from hwsim.kernels import ReduceOp

if TYPE_CHECKING:
    from hwsim.cost.model import CostModel
    from hwsim.cost.values import Cost


@cost_rule(TensorReduce)
def tensor_reduce(model: CostModel, instruction: TensorReduce) -> Cost:
    work = streaming_cycles(model, "vector", (instruction.src,), (instruction.dst,))
    if (
        instruction.src.dtype.name == "bf16"
        and instruction.dst.dtype.name == "bf16"
        and ReduceOp(instruction.op) in (ReduceOp.add, ReduceOp.max)
    ):
        work = -(-work // model.rules.tensor_reduce_bf16_speedup)
    return model.compute("vector", work)


@cost_rule(BnAggr)
def bn_aggr(model: CostModel, instruction: BnAggr) -> Cost:
    groups_cycles = -(-lane_cycles(model, "vector", instruction.src) // kernels.BN_GROUP_WIDTH)
    compute = model.rules.bn_aggr_cycles_per_group * groups_cycles
    streams = streaming_cycles(model, "vector", (instruction.src,), (instruction.dst,))
    return model.compute("vector", max(compute, streams))


@cost_rule(TensorPartitionReduce)
def tensor_partition_reduce(model: CostModel, instruction: TensorPartitionReduce) -> Cost:
    levels = max(1, math.ceil(math.log2(instruction.src.partitions)))
    return model.compute("gpsimd", instruction.src.free_elements * levels)


@cost_rule(LocalGather)
def local_gather(model: CostModel, instruction: LocalGather) -> Cost:
    rules = model.rules
    e = instruction.num_elem_per_idx
    t = rules.local_gather_batch_indices
    lane = min(
        Fraction(rules.local_gather_path_bytes, instruction.src_buffer.dtype.itemsize), Fraction(e)
    )
    per_element = Fraction(rules.local_gather_batch_cycles + t * e, t * e) / lane
    cycles = -(-(instruction.valid_indices() * e * per_element) // 1)
    return model.compute("gpsimd", int(cycles), floor=False)


@cost_rule(NcNGather)
def nc_n_gather(model: CostModel, instruction: NcNGather) -> Cost:
    per_instruction = model.rules.n_gather_elements_per_instruction
    instructions = -(-instruction.dst.free_elements // per_instruction)
    start = model.engine_configs["gpsimd"].fixed_overhead_cycles
    work = streaming_cycles(model, "gpsimd", (instruction.indices,), (instruction.dst,))
    return model.compute("gpsimd", work, extra_cycles=(instructions - 1) * start)


@cost_rule(TopK)
def topk(model: CostModel, instruction: TopK) -> Cost:
    cycles = model.rules.topk_cycles_per_element * instruction.n + instruction.k
    return model.compute("gpsimd", cycles, floor=False, fixed=False)


def _prng(model: CostModel, engine: str, ap: AccessPattern) -> Cost:
    """max(MIN_II, ceil(N / rate)) cycles (+ the engine's fixed cost): the generators' rate."""
    rate = model.engine_configs[engine].prng_values_per_cycle_per_lane
    return model.compute(engine, -(-lane_cycles(model, engine, ap) // rate))


@cost_rule(Rng)
def rng(model: CostModel, instruction: Rng) -> Cost:
    return _prng(model, instruction.engine, instruction.dst)


@cost_rule(Rand2)
def rand2(model: CostModel, instruction: Rand2) -> Cost:
    return _prng(model, "vector", instruction.dst)


@cost_rule(Dropout)
def dropout(model: CostModel, instruction: Dropout) -> Cost:
    rate = model.engine_configs["vector"].prng_values_per_cycle_per_lane
    draws = -(-lane_cycles(model, "vector", instruction.data) // rate)
    streams = streaming_cycles(model, "vector", (instruction.data,), (instruction.dst,))
    return model.compute("vector", max(draws, streams))


@cost_rule(QuantizeMx)
def quantize_mx(model: CostModel, instruction: QuantizeMx) -> Cost:
    lanes = model.engine_configs["vector"].lanes
    passes = -(-instruction.src.partitions // lanes)
    per_cycle = model.rules.quantize_mx_elements_per_cycle
    cycles = -(-instruction.src.free_elements // per_cycle) * passes
    return model.compute("vector", cycles)
