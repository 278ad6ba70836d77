"""VectorE elementwise instructions: tensor_tensor, tensor_scalar, scalar_tensor_tensor,
reciprocal, memset, select.

Costs are the documented per-instruction estimates of HARDWARE.md §3 [S16] in engine cycles, with
the MIN_II floor and fixed overhead applied by ``CostModel.compute``; the N (and 2N) of
the formulas is the data-path model of ``hwsim.cost.streaming`` (operand streams over the SBUF and
PSUM interfaces, per-dtype rates and stream counts from the config).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hwsim import kernels
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import MachineSpec, register
from hwsim.isa.compute_base import (
    ComputeInstruction,
    Scalar,
    UnaryCompute,
    check_arithmetic,
    read_2d,
    read_scalar,
    write_result,
)
from hwsim.isa.copy_ops import check_two_inputs, same_shape
from hwsim.isa.operands import READ, WRITE, maybe_operand, operand
from hwsim.isa.tensor_ops import as_2d
from hwsim.kernels import AluOp

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState


@register("tensor_tensor", engines=("vector", "gpsimd"), profiler="TENSOR_TENSOR")
@dataclass(frozen=True, kw_only=True)
class TensorTensor(ComputeInstruction):
    """dst = src0 op src1, elementwise (same partitions and elements per partition).

    Cost on VectorE [S16]: max(MIN_II, N) when one input is in PSUM, or when both are in SBUF,
    every tensor is bf16, op is add/multiply/subtract and all are contiguous; else
    max(MIN_II, 2N). Both fast cases are the streaming model (``hwsim.cost.streaming``): a PSUM
    input has its own read interface, and the bf16 case is a documented exception where the two
    SBUF inputs stream at once. On v3+ the SBUF read path carries two 4-byte or four 16-bit
    streams (``sbuf_input_streams_by_dtype``, HARDWARE.md §1.3 [S2][S3]), so two SBUF inputs
    cost N for every dtype there: [S2]'s "2x for tensor_tensor when both inputs are in SBUF and
    all tensors BF16/FP16" is the 16-bit case of it. The fastest case is N (one result per lane
    per cycle); cases never compound. On GpSimdE: GPSIMD_START + the same streaming time.
    """

    FLOPS_PER_ELEMENT = 1

    dst: AccessPattern = operand(WRITE)
    src0: AccessPattern = operand(READ, nki="data1")
    src1: AccessPattern = operand(READ, nki="data2")
    op: AluOp

    def _bitvec(self) -> bool:
        return AluOp(self.op) in kernels.INTEGER_ONLY_OPS

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        check_two_inputs(self, self.src0, self.src1, self.dst, "S15")
        if AluOp(self.op) is AluOp.power and self.engine != "gpsimd":
            self.fail("op=power runs on GpSimdE only [S15]; use engine='gpsimd'")
        if self._bitvec():
            self.check_integer(
                f"op={AluOp(self.op).name}", {"src0": self.src0, "src1": self.src1, "dst": self.dst}
            )

    def execute(self, state: CoreState) -> None:
        integer = self.integer_path(self._bitvec(), (self.src0, self.src1, self.dst))
        a = read_2d(state, self.src0, integer)
        b = read_2d(state, self.src1, integer)
        if integer:
            write_result(state, self.dst, kernels.tensor_tensor_int(a, b, self.op), True)
        else:
            write_result(state, self.dst, kernels.tensor_tensor(a, b, self.op), False)


#: ScalarE tensor_scalar on NeuronCore-v2/v3: only multiply-then-add, multiply, add [S16].
SCALAR_ENGINE_OP_PAIRS = frozenset(
    {(AluOp.multiply, AluOp.add), (AluOp.multiply, AluOp.bypass), (AluOp.add, AluOp.bypass)}
)


@register("tensor_scalar", engines=("vector", "scalar", "gpsimd"), profiler="TENSOR_SCALAR")
@dataclass(frozen=True, kw_only=True)
class TensorScalar(ComputeInstruction):
    """dst = (src op0 scalar0) op1 scalar1; scalars are immediates or [P, 1] tiles; op1 may be
    bypass (one op). ``reverseK`` swaps opK's operands (scalar opK value).

    Cost max(MIN_II, N) whether one or two ops [S16] (one input stream, ``hwsim.cost.streaming``;
    [P, 1] scalar operands are register loads, not streams), with VectorE performance mode as
    ``tensor_copy`` (4x/2x on v3+ for 16-bit float data and dst) [S2].
    """

    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ, nki="data")
    op0: AluOp
    scalar0: Scalar = maybe_operand(READ, nki="operand0")
    reverse0: bool = False
    op1: AluOp = AluOp.bypass
    scalar1: Scalar = maybe_operand(READ, default=0.0, nki="operand1")
    reverse1: bool = False

    def _bitvec(self) -> bool:
        return bool({AluOp(self.op0), AluOp(self.op1)} & kernels.INTEGER_ONLY_OPS)

    def flops(self) -> int:
        ops = sum(AluOp(op) is not AluOp.bypass for op in (self.op0, self.op1))
        return 0 if self._bitvec() else ops * self.src.elements

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        same_shape(self, self.src, self.dst, "src/dst")
        self.check_scalar("scalar0", self.scalar0, self.src)
        self.check_scalar("scalar1", self.scalar1, self.src)
        op0, op1 = AluOp(self.op0), AluOp(self.op1)
        kinds = {op in kernels.INTEGER_ONLY_OPS for op in (op0, op1) if op is not AluOp.bypass}
        if len(kinds) > 1:
            self.fail(
                f"op0={op0.name} and op1={op1.name} mix a bitvec and an arithmetic op; "
                "both must be bitvec or both arithmetic [S15]"
            )
        if self._bitvec():
            if self.engine != "vector":
                self.fail("bitvec ops run on VectorE only [S15]; use engine='vector'")
            operands = {"src": self.src, "dst": self.dst, "scalar0": self.scalar0}
            if op1 is not AluOp.bypass:
                operands["scalar1"] = self.scalar1
            self.check_integer("a bitvec op", operands)
        generation = spec.config.chip.generation
        if (
            self.engine == "scalar"
            and generation in ("v2", "v3")
            and (op0, op1) not in SCALAR_ENGINE_OP_PAIRS
        ):
            self.fail(
                f"ScalarE on NeuronCore-{generation} runs only multiply-then-add, multiply or add "
                f"[S16], not op0={op0.name}, op1={op1.name}; use engine='vector'"
            )

    def execute(self, state: CoreState) -> None:
        integer = self._bitvec()
        x = read_2d(state, self.src, integer)
        s0 = read_scalar(state, self.scalar0, integer)
        s1 = read_scalar(state, self.scalar1, integer)
        kernel = kernels.tensor_scalar_int if integer else kernels.tensor_scalar
        out = kernel(x, self.op0, s0, self.reverse0, self.op1, s1, self.reverse1)
        write_result(state, self.dst, out, integer)


@register("scalar_tensor_tensor", engines=("vector",), profiler="SCALAR_TENSOR_TENSOR")
@dataclass(frozen=True, kw_only=True)
class ScalarTensorTensor(ComputeInstruction):
    """dst = (src0 op0 scalar0) op1 src1, with src1 shaped like src0; arithmetic ops, in fp32.

    Cost [S16]: N if every tensor is bf16, op0 is subtract, op1 is multiply and N is even; else
    2N: two input streams (``hwsim.cost.streaming``). [S16] gives no PSUM case (unlike
    tensor_tensor's in the same document), so the inputs share the SBUF interface's streams
    wherever they are; the bf16 case streams both at once, and on v3+ the wider read path does
    (``sbuf_input_streams_by_dtype``). The MIN_II floor applies as to every VectorE instruction
    (HARDWARE.md §2.2 [S1]); the [S16] formula omits it.
    """

    FLOPS_PER_ELEMENT = 2

    dst: AccessPattern = operand(WRITE)
    src0: AccessPattern = operand(READ, nki="data")
    op0: AluOp
    scalar0: Scalar = maybe_operand(READ, nki="operand0")
    op1: AluOp
    src1: AccessPattern = operand(READ, nki="operand1")
    reverse0: bool = False
    reverse1: bool = False

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        check_two_inputs(self, self.src0, self.src1, self.dst, "S16")
        self.check_scalar("scalar0", self.scalar0, self.src0)
        check_arithmetic(self, op0=self.op0, op1=self.op1)

    def execute(self, state: CoreState) -> None:
        out = kernels.scalar_tensor_tensor(
            read_2d(state, self.src0, False),
            self.op0,
            read_scalar(state, self.scalar0, False),
            self.op1,
            read_2d(state, self.src1, False),
            self.reverse0,
            self.reverse1,
        )
        write_result(state, self.dst, out, False)


@register("reciprocal", engines=("vector",), profiler="RECIPROCAL")
@dataclass(frozen=True, kw_only=True)
class Reciprocal(UnaryCompute):
    """dst = 1 / src in fp32. Cost max(MIN_II, 8N) [S16]: 8 lane cycles per element, which hides
    the operand streams (``hwsim.cost.streaming``) unless they are slower."""

    FLOPS_PER_ELEMENT = 1

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        same_shape(self, self.src, self.dst, "src/dst")

    def execute(self, state: CoreState) -> None:
        write_result(state, self.dst, kernels.reciprocal(read_2d(state, self.src, False)), False)


@register("memset", engines=("vector", "gpsimd"), profiler="MEMSET")
@dataclass(frozen=True, kw_only=True)
class Memset(ComputeInstruction):
    """dst = value everywhere (rounded to dst's dtype). Cost [S16]: max(MIN_II, N/2) for 0 into
    bf16/fp16, else max(MIN_II, N), N the write stream (``hwsim.cost.streaming``)."""

    dst: AccessPattern = operand(WRITE)
    value: float

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        if not self.dst.dtype.is_float:
            info = np.iinfo(self.dst.dtype.numpy)
            if not float(self.value).is_integer() or not info.min <= self.value <= info.max:
                self.fail(
                    f"value {self.value!r} is not representable in dst dtype "
                    f"{self.dst.dtype.name} (integers {info.min}..{info.max})"
                )

    def execute(self, state: CoreState) -> None:
        state.write(self.dst, np.full(self.dst.shape, self.value))


@register("select", engines=("vector",), profiler="SELECT")
@dataclass(frozen=True, kw_only=True)
class Select(ComputeInstruction):
    """dst = on_true where pred != 0, else on_false (all the same shape; values via fp32).

    No documented cost; derived from the streaming model (``hwsim.cost.streaming``) with its
    three input streams. The model reproduces the two-input rule documented for
    ``tensor_copy_predicated`` [S16] (N when one input is in PSUM, 2N when both are in SBUF);
    with three inputs on v2 that is 3N in SBUF, 2N when one is in PSUM; on v3+ the wider SBUF
    read path carries two 4-byte streams (1.5N for fp32 in SBUF). At most one input may be in
    PSUM, as for the other multi-input VectorE instructions [S16].
    """

    dst: AccessPattern = operand(WRITE)
    pred: AccessPattern = operand(READ, nki="predicate")
    on_true: AccessPattern = operand(READ)
    on_false: AccessPattern = operand(READ)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        for name, ap in (("on_true", self.on_true), ("on_false", self.on_false), ("dst", self.dst)):
            same_shape(self, self.pred, ap, f"pred/{name}")
        names = ("pred", "on_true", "on_false")
        in_psum = [
            n for n, ap in zip(names, self.reads(), strict=True) if ap.memory is MemorySpace.PSUM
        ]
        if len(in_psum) > 1:
            self.fail(f"{' and '.join(in_psum)} are in PSUM; at most one input may be in PSUM")

    def execute(self, state: CoreState) -> None:
        pred = as_2d(state.read(self.pred))
        out = kernels.select(
            pred, read_2d(state, self.on_true, False), read_2d(state, self.on_false, False)
        )
        write_result(state, self.dst, out, False)
