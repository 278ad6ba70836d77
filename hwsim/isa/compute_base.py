"""Operand rules and helpers shared by the VectorE, ScalarE and GpSimdE instructions.

Data types follow nki.isa [S15]: arithmetic ops convert inputs to fp32 and compute in fp32;
bitvec ops (bitwise and shift ops) need integer tensors and act on the bit patterns; GpSimdE runs
arithmetic natively in 32-bit integers when every tensor is int32/uint32. The integer path keeps
the low 32 bits of each result (two's-complement wrap) before the cast to the destination dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hwsim import kernels
from hwsim.dtypes import DType, cast
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import Instruction, MachineSpec
from hwsim.isa.operands import READ, WRITE, operand
from hwsim.isa.tensor_ops import as_2d
from hwsim.kernels import AluOp, ReduceOp

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState

#: Largest free size (elements per partition) of a VectorE/ScalarE operand: "up to 64K
#: elements/partition from SBUF or 4K from PSUM" (HARDWARE.md §1.4 [S1]).
FREE_MAX_ELEMENTS = {MemorySpace.SBUF: 64 * 1024, MemorySpace.PSUM: 4 * 1024}
#: ``bn_stats_fmax``: most elements per partition one bn_stats reads (HARDWARE.md §3 [S16][S17]).
BN_STATS_FMAX = 512

#: An immediate (compile-time constant) or a per-partition [P, 1] operand.
Scalar = float | AccessPattern


def int32_family(dtype: DType) -> bool:
    return dtype.name in ("int32", "uint32")


@dataclass(frozen=True, kw_only=True)
class ComputeInstruction(Instruction):
    """Base of VectorE/ScalarE/GpSimdE compute instructions: tile-size limits and dtype rules."""

    #: Floating-point operations per element of the main input (for HFU statistics).
    FLOPS_PER_ELEMENT = 0

    def check_operand(
        self, spec: MachineSpec, name: str, ap: AccessPattern, *, is_write: bool
    ) -> None:
        super().check_operand(spec, name, ap, is_write=is_write)
        limit = FREE_MAX_ELEMENTS.get(ap.memory)
        if self.engine in ("vector", "scalar") and limit and ap.free_elements > limit:
            self.fail(
                f"operand '{name}' has {ap.free_elements} elements per partition; {self.engine} "
                f"instructions take at most {limit} from {ap.memory.value} [S1]: split the tile"
            )

    def check_scalar(self, name: str, value: Scalar, data: AccessPattern) -> None:
        """A scalar operand is an immediate or a [P, 1] tile with data's partitions."""
        if isinstance(value, AccessPattern) and (
            value.partitions != data.partitions or value.free_elements != 1
        ):
            self.fail(
                f"operand '{name}' has shape {value.shape}; a per-partition scalar must be "
                f"[{data.partitions}, 1] (one element per partition of the data)"
            )

    def check_rows(self, name: str, ap: AccessPattern, data: AccessPattern, width: int) -> None:
        """``ap`` must be [data's partitions, width] (a per-partition result row)."""
        if ap.partitions != data.partitions or ap.free_elements != width:
            self.fail(
                f"operand '{name}' has shape {ap.shape}; it must be [{data.partitions}, {width}]"
            )

    def check_dtype(self, name: str, ap: AccessPattern, allowed: tuple[str, ...]) -> None:
        """``ap``'s dtype must be one of ``allowed`` (dtype names)."""
        if ap.dtype.name not in allowed:
            self.fail(f"operand '{name}' is {ap.dtype.name}; it must be {' or '.join(allowed)}")

    def check_memory(self, name: str, ap: AccessPattern, memory: MemorySpace) -> None:
        if ap.memory is not memory:
            self.fail(f"operand '{name}' must be in {memory.value}, not {ap.memory.value}")

    def check_integer(self, why: str, operands: dict[str, Scalar]) -> None:
        """Every named operand must be integer-typed (tiles) or integral (immediates)."""
        for name, value in operands.items():
            if isinstance(value, AccessPattern):
                if value.dtype.is_float:
                    self.fail(
                        f"{why} needs integer operands, but '{name}' is {value.dtype.name} "
                        "(use int8/16/32 or uint8/16/32 tiles)"
                    )
            elif not float(value).is_integer():
                self.fail(f"{why} needs an integral immediate, but '{name}' is {value!r}")

    def integer_path(self, bitvec: bool, tensors: tuple[AccessPattern, ...]) -> bool:
        """Whether the op computes in 32-bit integers rather than fp32 [S15]."""
        return bitvec or (self.engine == "gpsimd" and all(int32_family(t.dtype) for t in tensors))

    def flops(self) -> int:
        reads = self.reads()
        return self.FLOPS_PER_ELEMENT * reads[0].elements if reads else 0


def check_arithmetic(instruction: ComputeInstruction, **ops: AluOp) -> None:
    """Each named op must be an arithmetic (not a bitvec) ALU op."""
    for name, op in ops.items():
        if AluOp(op) in kernels.INTEGER_ONLY_OPS:
            instruction.fail(
                f"{name}={AluOp(op).name} is a bitvec op; {instruction.OPCODE} takes arithmetic "
                "ops [S15] (tensor_scalar and tensor_tensor take bitvec ops)"
            )


def read_2d(state: CoreState, ap: AccessPattern, integer: bool) -> np.ndarray:
    """An operand as [P, N]: int64 on the integer path, fp32 otherwise (ints convert exactly)."""
    values = as_2d(state.read(ap))
    return values.astype(np.int64) if integer else values.astype(np.float32, copy=False)


def read_scalar(state: CoreState, value: Scalar, integer: bool) -> np.ndarray | float | int:
    """A scalar operand as the kernels take it: [P] array for a tile, a Python number otherwise."""
    if isinstance(value, AccessPattern):
        return read_2d(state, value, integer).reshape(value.partitions)
    return int(value) if integer else float(value)


def write_result(state: CoreState, dst: AccessPattern, values: np.ndarray, integer: bool) -> None:
    """Store a kernel result; integer results keep their low 32 bits (wrap) before the cast."""
    if integer:
        low = (values & 0xFFFFFFFF).astype(np.uint32)
        values = low.view(np.int32) if dst.dtype.is_signed_int or dst.dtype.is_float else low
    state.write(dst, values.reshape(dst.shape))


#: The unsigned integer type holding an element's bits, by element size in bytes.
BITS_DTYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def read_bits(state: CoreState, ap: AccessPattern) -> np.ndarray:
    """An operand's elements as their raw bits, int64 [P, N] (for copies that convert nothing)."""
    bits = state.view(ap).view(BITS_DTYPES[ap.dtype.itemsize])
    return as_2d(bits).astype(np.int64)


def write_bits(state: CoreState, ap: AccessPattern, bits: np.ndarray) -> None:
    """Store raw element bits (int64, the operand's element count) into the operand."""
    target = state.view(ap).view(BITS_DTYPES[ap.dtype.itemsize])
    target[...] = bits.reshape(ap.shape).astype(target.dtype)


def scalar_bits(value: float, ap: AccessPattern) -> int:
    """The bits of an immediate as an element of ``ap``'s dtype (RNE for floats, saturating
    for integers, as every write)."""
    stored = cast(np.asarray([value], dtype=np.float64), ap.dtype)
    return int(stored.view(BITS_DTYPES[ap.dtype.itemsize])[0])


@dataclass(frozen=True, kw_only=True)
class UnaryCompute(ComputeInstruction):
    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ, nki="data")


@dataclass(frozen=True, kw_only=True)
class ReduceCompute(UnaryCompute):
    """A reduction of ``src`` into ``dst`` by ``op``; a bitvec op (bitwise_or/and) needs
    integer tensors."""

    op: ReduceOp

    def _bitvec(self) -> bool:
        return ReduceOp(self.op) in kernels.INTEGER_ONLY_REDUCE_OPS
