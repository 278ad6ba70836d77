"""VectorE scans and fused tensor-scalar reductions: tensor_tensor_scan, tensor_scalar_reduce,
tensor_scalar_cumulative.

Semantics follow nki.isa [S15][S16] (HARDWARE.md §3), computed in fp32 (``kernels.scan``); costs
are the documented formulas over the streaming model of ``hwsim.cost.streaming``, with MIN_II and
fixed costs from ``CostModel.compute``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hwsim import kernels
from hwsim.isa.ap import AccessPattern
from hwsim.isa.base import MachineSpec, register
from hwsim.isa.compute_base import (
    ComputeInstruction,
    Scalar,
    check_arithmetic,
    int32_family,
    read_2d,
    read_scalar,
    write_result,
)
from hwsim.isa.copy_ops import check_two_inputs, same_shape
from hwsim.isa.engine_state import ReduceCmd, accumulators
from hwsim.isa.operands import READ, WRITE, maybe_operand, operand
from hwsim.kernels import AluOp, ReduceOp

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState

#: Reduce ops of tensor_scalar_reduce [S15] (the current API; the older one also had subtract).
TENSOR_SCALAR_REDUCE_OPS = frozenset({ReduceOp.add, ReduceOp.multiply, ReduceOp.max, ReduceOp.min})


@register("tensor_tensor_scan", engines=("vector",), profiler="TENSOR_TENSOR_SCAN")
@dataclass(frozen=True, kw_only=True)
class TensorTensorScan(ComputeInstruction):
    """Per partition: dst[i] = op1(op0(src0[i], dst[i-1]), src1[i]), dst[-1] = initial.

    initial is an immediate or a [P, 1] tile; reverse0 makes src0[i] op0's right operand,
    reverse1 makes src1[i] op1's left operand [S16]. Arithmetic ops, fp32 throughout (the running
    value is carried in fp32).

    Cost max(MIN_II, 2N) [S16]: two input streams (``hwsim.cost.streaming``). [S16] gives no PSUM
    case (its tensor_tensor entry, in the same document, does), so the two inputs share the SBUF
    interface's streams wherever they are: 2N on v2; on v3+ the wider SBUF read path streams two
    4-byte (or four 16-bit) inputs at once (``sbuf_input_streams_by_dtype``), N, the same rule as
    tensor_tensor (reading in docs/fidelity.md).
    """

    NKI_ARGS = "dst, data0, data1, initial, op0, op1, reverse0, reverse1"
    FLOPS_PER_ELEMENT = 2

    dst: AccessPattern = operand(WRITE)
    src0: AccessPattern = operand(READ, nki="data0")
    src1: AccessPattern = operand(READ, nki="data1")
    initial: Scalar = maybe_operand(READ)
    op0: AluOp
    op1: AluOp
    reverse0: bool = False
    reverse1: bool = False

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        check_two_inputs(self, self.src0, self.src1, self.dst, "S16")
        self.check_scalar("initial", self.initial, self.src0)
        check_arithmetic(self, op0=self.op0, op1=self.op1)

    def execute(self, state: CoreState) -> None:
        out = kernels.tensor_tensor_scan(
            read_2d(state, self.src0, False),
            read_2d(state, self.src1, False),
            read_scalar(state, self.initial, False),
            self.op0,
            self.op1,
            self.reverse0,
            self.reverse1,
        )
        write_result(state, self.dst, out, False)


@register("tensor_scalar_reduce", engines=("vector",), profiler="TENSOR_SCALAR_REDUCE")
@dataclass(frozen=True, kw_only=True)
class TensorScalarReduce(ComputeInstruction):
    """dst = src op0 scalar0 (scalar0 op0 src if reverse0), and reduce_dst[P, 1] = reduce_op over
    the fp32 results of each partition (before the cast to dst's dtype) [S15][S16].

    One arithmetic op; reduce_op add, multiply, max or min. Cost max(MIN_II, N) + MIN_II [S16]
    (the tensor_scalar pass plus reading out the accumulator, like activation_reduce); N is the
    streaming time of src in and dst out. Performance mode is documented for tensor_scalar and
    tensor_copy only [S2], so it does not apply here.
    """

    ENGINE_STATE = "accumulators"
    NKI_ARGS = "dst, data, op0, operand0, reduce_op, reduce_res, reverse0"
    FLOPS_PER_ELEMENT = 2

    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ, nki="data")
    op0: AluOp
    scalar0: Scalar = maybe_operand(READ, nki="operand0")
    reduce_op: ReduceOp
    reduce_dst: AccessPattern = operand(WRITE, nki="reduce_res")
    reverse0: bool = False

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        same_shape(self, self.src, self.dst, "src/dst")
        self.check_scalar("scalar0", self.scalar0, self.src)
        red = self.reduce_dst
        if red.partitions != self.src.partitions or red.free_elements != 1:
            self.fail(
                f"operand 'reduce_dst' has shape {red.shape}; it must be "
                f"[{self.src.partitions}, 1] (one result per partition of src)"
            )
        check_arithmetic(self, op0=self.op0)
        if ReduceOp(self.reduce_op) not in TENSOR_SCALAR_REDUCE_OPS:
            valid = ", ".join(sorted(op.name for op in TENSOR_SCALAR_REDUCE_OPS))
            self.fail(f"reduce_op={ReduceOp(self.reduce_op).name} is not allowed; valid: {valid}")

    def execute(self, state: CoreState) -> None:
        out, red = kernels.tensor_scalar_reduce(
            read_2d(state, self.src, False),
            self.op0,
            read_scalar(state, self.scalar0, False),
            self.reverse0,
            self.reduce_op,
        )
        write_result(state, self.dst, out, False)
        write_result(state, self.reduce_dst, red, False)
        accumulators(state, "vector").set(self.src.start_partition, red)


#: The accumulator's start value per op1 under reset_reduce [S15].
RESET_VALUES = {
    AluOp.add: 0.0,
    AluOp.subtract: 0.0,
    AluOp.multiply: 1.0,
    AluOp.max: float("-inf"),
    AluOp.min: float("inf"),
}


@register("tensor_scalar_cumulative", engines=("vector",), profiler="TENSOR_SCALAR_CUMULATIVE")
@dataclass(frozen=True, kw_only=True)
class TensorScalarCumulative(ComputeInstruction):
    """Per partition: reg = op1(op0(src[i], imm0), reg); dst[i] = reg [S15].

    reduce_cmd reset_reduce starts reg at op1's identity (0 for add/subtract, 1 for multiply,
    -inf for max, +inf for min); load_reduce starts it at imm1 (an immediate or a [P, 1] tile).
    Continuing from an earlier instruction's accumulator (``reduce``) is not modelled (the
    registers are state outside any operand, which the dependency tracking cannot see): chain
    instructions with load_reduce and the previous dst's last column instead. op0 arithmetic;
    op1 add, subtract, multiply, max or min; no int32/uint32 tensors [S15].

    Cost: no published figure (HARDWARE.md §3 "n/a"). Assumption: max(MIN_II, N), one input
    stream in and one out (``hwsim.cost.streaming``) like tensor_scalar, without its performance
    mode (documented for tensor_scalar and tensor_copy only [S2]).
    """

    ENGINE_STATE = "accumulators"
    NKI_ARGS = "dst, src, op0, op1, imm0, imm1, reduce_cmd"
    FLOPS_PER_ELEMENT = 2

    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ)
    op0: AluOp
    op1: AluOp
    imm0: Scalar = maybe_operand(READ)
    imm1: Scalar | None = maybe_operand(READ, default=None)
    reduce_cmd: ReduceCmd = ReduceCmd.reset_reduce

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        same_shape(self, self.src, self.dst, "src/dst")
        self.check_scalar("imm0", self.imm0, self.src)
        check_arithmetic(self, op0=self.op0)
        if AluOp(self.op1) not in kernels.SCAN_REDUCE_OPS:
            valid = ", ".join(sorted(op.name for op in kernels.SCAN_REDUCE_OPS))
            self.fail(f"op1={AluOp(self.op1).name} is not a cumulative reduction; valid: {valid}")
        for name, ap in (("src", self.src), ("dst", self.dst)):
            if int32_family(ap.dtype):
                self.fail(f"operand '{name}' is {ap.dtype.name}: int32/uint32 not allowed [S15]")
        self._check_reduce_cmd()

    def _check_reduce_cmd(self) -> None:
        cmd = ReduceCmd(self.reduce_cmd)
        if cmd is ReduceCmd.load_reduce:
            if self.imm1 is None:
                self.fail("reduce_cmd=load_reduce starts from imm1, but imm1 is not given")
            else:
                self.check_scalar("imm1", self.imm1, self.src)
        elif cmd is ReduceCmd.reset_reduce:
            if self.imm1 is not None:
                self.fail("imm1 is read only with reduce_cmd=load_reduce, not reset_reduce")
        else:
            self.fail(
                f"reduce_cmd={cmd.value} is not modelled (accumulator state carried between "
                "instructions); use reset_reduce, or load_reduce with imm1 = the previous "
                "result's last column"
            )

    def execute(self, state: CoreState) -> None:
        if ReduceCmd(self.reduce_cmd) is ReduceCmd.load_reduce and self.imm1 is not None:
            initial = read_scalar(state, self.imm1, False)
        else:
            initial = RESET_VALUES[AluOp(self.op1)]
        out = kernels.tensor_scalar_cumulative(
            read_2d(state, self.src, False),
            self.op0,
            read_scalar(state, self.imm0, False),
            self.op1,
            initial,
        )
        write_result(state, self.dst, out, False)
        if out.shape[1]:
            accumulators(state, "vector").set(self.src.start_partition, out[:, -1])
