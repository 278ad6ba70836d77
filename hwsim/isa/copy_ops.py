"""``tensor_copy`` (with dtype conversion, on VectorE, ScalarE or GpSimdE) and VectorE's
``tensor_copy_predicated`` (bit for bit, where a predicate says).

tensor_copy: cost max(MIN_II, N) [S16] (one input stream, ``hwsim.cost.streaming``); VectorE
performance mode on v3+ (HARDWARE.md §2.2 [S2]): 4x when input and output are both in SBUF,
both 16-bit floats, innermost dim contiguous; 2x when one of the SBUF/contiguity conditions
fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from hwsim import kernels
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import Instruction, MachineSpec, register
from hwsim.isa.compute_base import (
    ComputeInstruction,
    Scalar,
    read_bits,
    scalar_bits,
    write_bits,
)
from hwsim.isa.operands import READ, WRITE, maybe_operand, operand

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState


def same_shape(instruction: Instruction, a: AccessPattern, b: AccessPattern, names: str) -> None:
    if a.partitions != b.partitions or a.free_elements != b.free_elements:
        instruction.fail(
            f"{names}: shapes {a.shape} and {b.shape} differ "
            "(partitions and elements per partition must match)"
        )


def check_two_inputs(
    instruction: Instruction, src0: AccessPattern, src1: AccessPattern, dst: AccessPattern,
    source: str,
) -> None:  # fmt: skip
    """Two inputs streamed side by side into ``dst``: all three shaped alike, and at most one
    input in PSUM (``source``: the ISA page that states the rule for this instruction)."""
    same_shape(instruction, src0, src1, "src0/src1")
    same_shape(instruction, src0, dst, "src0/dst")
    if src0.memory is MemorySpace.PSUM and src1.memory is MemorySpace.PSUM:
        instruction.fail(
            f"src0 and src1 are both in PSUM; at most one input may be in PSUM [{source}]"
        )


@register("tensor_copy", engines=("vector", "scalar", "gpsimd"), profiler="TENSOR_COPY")
@dataclass(frozen=True, kw_only=True)
class TensorCopy(Instruction):
    """dst = src, converting to dst's dtype (RNE); bit-exact when the dtypes match."""

    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        same_shape(self, self.src, self.dst, "src/dst")
        if self.engine == "scalar" and spec.config.chip.generation == "v2":
            self.fail("ScalarE has no tensor_copy on NeuronCore-v2; use activation(copy) [S15]")

    def execute(self, state: CoreState) -> None:
        state.write(self.dst, state.read(self.src).reshape(self.dst.shape))


#: tensor_copy_predicated's predicate dtypes [S15].
COPY_PREDICATE_DTYPES = ("uint8", "uint16", "uint32")


@register("tensor_copy_predicated", engines=("vector",), profiler="COPY_PREDICATED")
@dataclass(frozen=True, kw_only=True)
class TensorCopyPredicated(ComputeInstruction):
    """dst = src where predicate (uint8/16/32) is nonzero (zero if ``reverse_pred``); dst's other
    elements keep their bits [S15]. src is a tile of dst's shape and dtype (copied bit for bit)
    or an immediate (rounded to dst's dtype); src and predicate not both in PSUM.

    Cost [S16]: max(MIN_II, N) when one of src and predicate is in PSUM, max(MIN_II, 2N) when
    both are in SBUF: the streaming model's two inputs (``hwsim.cost.streaming``; on v3+ the
    wider SBUF read path makes both-SBUF fp32 N too, as for tensor_tensor). An immediate src is
    no stream. For initcheck it writes only the elements it copies.
    """

    NKI_ARGS = "dst, src, predicate, reverse_pred"

    dst: AccessPattern = operand(WRITE)
    src: Scalar = maybe_operand(READ)
    predicate: AccessPattern = operand(READ)
    reverse_pred: bool = False

    def initcheck_writes(self, state: CoreState) -> tuple[tuple[AccessPattern, Any], ...]:
        chosen = (read_bits(state, self.predicate) != 0) != self.reverse_pred
        return ((self.dst, chosen.reshape(self.dst.shape)),)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        same_shape(self, self.predicate, self.dst, "predicate/dst")
        self.check_dtype("predicate", self.predicate, COPY_PREDICATE_DTYPES)
        if isinstance(self.src, AccessPattern):
            same_shape(self, self.src, self.dst, "src/dst")
            if self.src.dtype != self.dst.dtype:
                self.fail(
                    f"src is {self.src.dtype.name} and dst {self.dst.dtype.name}; they must "
                    "share a dtype [S15]"
                )
            if self.src.memory is self.predicate.memory is MemorySpace.PSUM:
                self.fail("src and predicate are both in PSUM; at most one may be [S15]")

    def execute(self, state: CoreState) -> None:
        old = read_bits(state, self.dst)
        if isinstance(self.src, AccessPattern):
            src = read_bits(state, self.src)
        else:
            src = np.full_like(old, scalar_bits(self.src, self.dst))
        pred = read_bits(state, self.predicate)
        write_bits(state, self.dst, kernels.copy_predicated(old, src, pred, self.reverse_pred))
