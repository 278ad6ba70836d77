"""``tensor_copy``: copy with dtype conversion on VectorE, ScalarE or GpSimdE.

Cost max(MIN_II, N) [S16] (one input stream, ``hwsim.isa.streaming``); VectorE performance mode
on v3+ (HARDWARE.md §2.2 [S2]): 4x when input and output are both in SBUF, both 16-bit floats,
innermost dim contiguous; 2x when one of the SBUF/contiguity conditions fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hwsim.isa.ap import AccessPattern
from hwsim.isa.base import Cost, Instruction, MachineSpec, register
from hwsim.isa.streaming import performance_mode_factor, streaming_cycles

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState


def same_shape(instruction: Instruction, a: AccessPattern, b: AccessPattern, names: str) -> None:
    if a.partitions != b.partitions or a.free_elements != b.free_elements:
        instruction.fail(
            f"{names}: shapes {a.shape} and {b.shape} differ "
            "(partitions and elements per partition must match)"
        )


@register
@dataclass(frozen=True, kw_only=True)
class TensorCopy(Instruction):
    """dst = src, converting to dst's dtype (RNE); bit-exact when the dtypes match."""

    OPCODE = "tensor_copy"
    ENGINES = ("vector", "scalar", "gpsimd")
    PROFILER_OPCODE = "TENSOR_COPY"

    dst: AccessPattern
    src: AccessPattern

    def reads(self) -> tuple[AccessPattern, ...]:
        return (self.src,)

    def writes(self) -> tuple[AccessPattern, ...]:
        return (self.dst,)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        same_shape(self, self.src, self.dst, "src/dst")
        if self.engine == "scalar" and spec.config.chip.generation == "v2":
            self.fail("ScalarE has no tensor_copy on NeuronCore-v2; use activation(copy) [S15]")

    def cost(self, spec: MachineSpec) -> Cost:
        work = streaming_cycles(spec, self.engine, (self.src,), (self.dst,))
        work = -(-work // performance_mode_factor(spec, self.engine, (self.src, self.dst)))
        return spec.compute_cost(self.engine, work)

    def execute(self, state: CoreState) -> None:
        state.write(self.dst, state.read(self.src).reshape(self.dst.shape))
