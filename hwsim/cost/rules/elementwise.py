"""Cost rules of the elementwise and copy instructions of VectorE, ScalarE and GpSimdE.

Each is a documented per-instruction estimate of HARDWARE.md §3 [S16] in engine cycles, with the
MIN_II floor and fixed overhead applied by ``CostModel.compute``; the N (and 2N) of the formulas
is the data-path model of ``hwsim.cost.streaming`` (operand streams over the SBUF and PSUM
interfaces, per-dtype rates and stream counts from the config). The instructions' docstrings
state each rule's source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hwsim.cost.rules.registry import cost_rule
from hwsim.cost.streaming import (
    is_contiguous,
    lane_cycles,
    performance_mode_factor,
    streaming_cycles,
)
from hwsim.isa.ap import MemorySpace
from hwsim.isa.copy_ops import TensorCopy
from hwsim.isa.dynamic_copy_ops import _DynamicCopy
from hwsim.isa.fused_ops import Exponential
from hwsim.isa.vector_ops import (
    Memset,
    Reciprocal,
    ScalarTensorTensor,
    TensorScalar,
    TensorTensor,
)
from hwsim.kernels import AluOp

if TYPE_CHECKING:
    from hwsim.cost.model import CostModel
    from hwsim.cost.values import Cost

#: Ops of the documented fast tensor_tensor case (bf16, both inputs in SBUF) [S16].
FAST_BF16_OPS = frozenset({AluOp.add, AluOp.multiply, AluOp.subtract})


def _fast_bf16_tensor_tensor(instruction: TensorTensor) -> bool:
    """The documented bf16 case of tensor_tensor: both inputs in SBUF stream at once [S16]."""
    tensors = (instruction.src0, instruction.src1, instruction.dst)
    return (
        instruction.engine == "vector"
        and all(ap.dtype.name == "bf16" and is_contiguous(ap) for ap in tensors)
        and instruction.src0.memory is instruction.src1.memory is MemorySpace.SBUF
        and AluOp(instruction.op) in FAST_BF16_OPS
    )


@cost_rule(TensorTensor)
def tensor_tensor(model: CostModel, instruction: TensorTensor) -> Cost:
    fast = _fast_bf16_tensor_tensor(instruction)
    work = streaming_cycles(
        model,
        instruction.engine,
        (instruction.src0, instruction.src1),
        (instruction.dst,),
        min_sbuf_streams=model.rules.fast_case_sbuf_streams if fast else 1,
    )
    return model.compute(instruction.engine, work)


@cost_rule(TensorScalar, TensorCopy)
def one_stream_with_performance_mode(model: CostModel, instruction: TensorScalar) -> Cost:
    """One input stream ([P, 1] scalar operands are register loads, not streams), with VectorE
    performance mode (4x/2x on v3+ for 16-bit float data and dst) [S2]."""
    engine, src, dst = instruction.engine, instruction.src, instruction.dst
    work = streaming_cycles(model, engine, (src,), (dst,))
    work = -(-work // performance_mode_factor(model, engine, (src, dst)))
    return model.compute(engine, work)


@cost_rule(ScalarTensorTensor)
def scalar_tensor_tensor(model: CostModel, instruction: ScalarTensorTensor) -> Cost:
    fast = (
        all(ap.dtype.name == "bf16" for ap in (instruction.src0, instruction.src1, instruction.dst))
        and (AluOp(instruction.op0), AluOp(instruction.op1)) == (AluOp.subtract, AluOp.multiply)
        and instruction.src0.free_elements % 2 == 0
    )
    work = streaming_cycles(
        model,
        "vector",
        (instruction.src0, instruction.src1),
        (instruction.dst,),
        psum_own_port=False,
        min_sbuf_streams=model.rules.fast_case_sbuf_streams if fast else 1,
    )
    return model.compute("vector", work)


@cost_rule(Reciprocal)
def reciprocal(model: CostModel, instruction: Reciprocal) -> Cost:
    per_element = model.rules.reciprocal_cycles_per_element
    compute = per_element * lane_cycles(model, "vector", instruction.src)
    streams = streaming_cycles(model, "vector", (instruction.src,), (instruction.dst,))
    return model.compute("vector", max(compute, streams))


@cost_rule(Memset)
def memset(model: CostModel, instruction: Memset) -> Cost:
    work = streaming_cycles(model, instruction.engine, (), (instruction.dst,))
    if instruction.value == 0 and instruction.dst.dtype.name in ("bf16", "fp16"):
        work = -(-work // model.rules.memset_zero_16bit_speedup)
    return model.compute(instruction.engine, work)


@cost_rule(_DynamicCopy)
def dynamic_copy(model: CostModel, instruction: _DynamicCopy) -> Cost:
    engine = instruction.engine
    floor = model.engine_configs[engine].min_ii_dynamic_cycles
    read, written = instruction.streams()
    work = streaming_cycles(model, engine, (read,), (written,))
    return model.compute(engine, max(floor, work))


@cost_rule(Exponential)
def exponential(model: CostModel, instruction: Exponential) -> Cost:
    scalar_cycles = streaming_cycles(model, "scalar", (instruction.src,), (instruction.dst,))
    ticks = model.cycles("scalar", scalar_cycles)
    per_cycle = model.timebase.ticks_per_cycle["vector"]
    work = -(-ticks // (model.rules.exponential_speedup * per_cycle))
    read_out = model.engine_configs["vector"].min_ii_cycles if instruction.reduce_res else 0
    return model.compute("vector", work, extra_cycles=read_out)
