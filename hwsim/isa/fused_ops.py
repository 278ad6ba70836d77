"""NeuronCore-v4 fused activations: ``exponential`` (VectorE) and ``activate2`` (ScalarE).

Both compute in fp32 (``kernels.activation``, ``kernels.tensor_scalar``) and may fold their
results into their engine's accumulator registers (``isa.engine_state``), which reduce_res
reads out [S15]. The accumulators take the fp32 results, before the cast to dst's dtype.
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
    read_2d,
    read_scalar,
    write_result,
)
from hwsim.isa.copy_ops import same_shape
from hwsim.isa.engine_state import ReduceCmd, accumulators, check_reduce_cmd
from hwsim.isa.operands import READ, WRITE, aps, maybe_operand, operand, param
from hwsim.kernels import ActivationFunction, AluOp

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState

EXPONENTIAL_CMDS = frozenset(
    {ReduceCmd.idle, ReduceCmd.reset_reduce, ReduceCmd.reduce, ReduceCmd.load_reduce}
)
ACTIVATE2_CMDS = frozenset(
    {ReduceCmd.idle, ReduceCmd.reset, ReduceCmd.reduce, ReduceCmd.reset_reduce}
)
#: activate2's (op0, op1) pairs [S15].
ACTIVATE2_OP_PAIRS = frozenset(
    {
        (AluOp.multiply, AluOp.add),
        (AluOp.multiply, AluOp.subtract),
        (AluOp.multiply, AluOp.bypass),
        (AluOp.add, AluOp.bypass),
        (AluOp.subtract, AluOp.bypass),
        (AluOp.bypass, AluOp.bypass),
    }
)


@register("exponential", engines=("vector",), profiler="EXPONENTIAL")
@dataclass(frozen=True, kw_only=True)
class Exponential(ComputeInstruction):
    """dst = exp(src - max_value), max_value an fp32 immediate or [P, 1] tile; with reduce_cmd
    reset_reduce / reduce / load_reduce (from reduce_init) the results' sum folds into
    VectorE's accumulators, which reduce_res reads out [S15]. NeuronCore-v4 VectorE.

    Cost: 4x the throughput of ScalarE's activation(exp) on the same operands [S3]: the ScalarE
    streaming time (``hwsim.cost.streaming``) in ticks, divided by 4, in VectorE cycles (rounded
    up), with VectorE's MIN_II floor; plus MIN_II to read the accumulators out when reduce_res
    is given (an assumption, as tensor_scalar_reduce's documented read-out [S16]).
    """

    NKI_ARGS = "dst, src, max_value, reduce_res, reduce_cmd, reduce_init"
    ENGINE_STATE = "accumulators"

    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ)
    max_value: Scalar = maybe_operand(READ, default=0.0)
    reduce_res: AccessPattern | None = maybe_operand(WRITE, default=None)
    reduce_cmd: ReduceCmd = ReduceCmd.idle
    reduce_init: Scalar = maybe_operand(READ, default=0.0)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        self.require_generation(spec, "v4")
        same_shape(self, self.src, self.dst, "src/dst")
        if self.dst.dtype.name == "uint32" or self.dst.dtype.lanes > 1:
            self.fail(f"operand 'dst' is {self.dst.dtype.name}, which exponential cannot write")
        self.check_scalar("max_value", self.max_value, self.src)
        self.check_scalar("reduce_init", self.reduce_init, self.src)
        check_reduce_cmd(self, self.reduce_cmd, EXPONENTIAL_CMDS, self.reduce_res, self.src)
        if ReduceCmd(self.reduce_cmd) is not ReduceCmd.load_reduce and (
            isinstance(self.reduce_init, AccessPattern) or self.reduce_init != 0.0
        ):
            self.fail("reduce_init is read only with reduce_cmd=load_reduce; leave it 0.0 [S15]")

    def execute(self, state: CoreState) -> None:
        bias = read_scalar(state, self.max_value, False)
        out = kernels.activation(
            read_2d(state, self.src, False), ActivationFunction.exp, 1.0, -bias
        )
        init = read_scalar(state, self.reduce_init, False)
        registers = accumulators(state, "vector").update(
            self, self.reduce_cmd, self.src.start_partition, out, AluOp.add, init
        )
        write_result(state, self.dst, out, False)
        if self.reduce_res is not None:
            write_result(state, self.reduce_res, registers, False)


@register("activate2", engines=("scalar",), profiler="ACTIVATE2")
@dataclass(frozen=True, kw_only=True)
class Activate2(ComputeInstruction):
    """dst = func((src op0 imm0) op1 imm1) with one of six (op0, op1) pairs [S15], reverse0 /
    reverse1 swapping an op's operands; the results reduce by reduce_op (add, max, min,
    abs_max, abs_min) into ScalarE's accumulators per reduce_cmd, which reduce_res reads out
    [S15]. NeuronCore-v4 ScalarE. ``relu_param`` (parameterised functions such as PReLU [S15])
    is not modelled: none of the simulator's activation functions takes a parameter, so a
    nonzero value is refused.

    Cost: no published figure. Assumption: activation's, max(MIN_II, N) ScalarE cycles with or
    without the tensor-scalar stage ([S1]: scale and bias are free), plus MIN_II to read the
    accumulators out when reduce_res is given (activation_reduce's ActReadAccumulator [S1][S16]).
    """

    NKI_ARGS = (
        "dst, op, data, imm0, imm1, op0, op1, relu_param, reverse0, reverse1, reduce_op, "
        "reduce_res, reduce_cmd"
    )
    ENGINE_STATE = "accumulators"
    FLOPS_PER_ELEMENT = 3

    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ, nki="data")
    func: ActivationFunction = param(nki="op")
    imm0: Scalar = maybe_operand(READ, default=0.0)
    imm1: Scalar = maybe_operand(READ, default=0.0)
    op0: AluOp = AluOp.bypass
    op1: AluOp = AluOp.bypass
    relu_param: float = 0.0
    reverse0: bool = False
    reverse1: bool = False
    reduce_op: AluOp = AluOp.add
    reduce_res: AccessPattern | None = maybe_operand(WRITE, default=None)
    reduce_cmd: ReduceCmd = ReduceCmd.idle

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        self.require_generation(spec, "v4")
        same_shape(self, self.src, self.dst, "src/dst")
        op0, op1 = AluOp(self.op0), AluOp(self.op1)
        if (op0, op1) not in ACTIVATE2_OP_PAIRS:
            pairs = ", ".join(sorted(f"({a.name}, {b.name})" for a, b in ACTIVATE2_OP_PAIRS))
            self.fail(f"(op0, op1) = ({op0.name}, {op1.name}) is not allowed; valid: {pairs}")
        for flag, op, name in ((self.reverse0, op0, "0"), (self.reverse1, op1, "1")):
            if flag and op is AluOp.bypass:
                self.fail(f"reverse{name} needs op{name} set (it is bypass) [S15]")
        self.check_scalar("imm0", self.imm0, self.src)
        self.check_scalar("imm1", self.imm1, self.src)
        tiles = aps(self.imm0, self.imm1)
        if len(tiles) == 2 and tiles[0].dtype != tiles[1].dtype:
            self.fail("imm0 and imm1 tiles must share a dtype [S15]")
        if self.relu_param != 0.0:
            self.fail(
                f"relu_param={self.relu_param!r}: parameterised activation functions are not "
                "modelled (none of the simulator's functions takes a parameter)"
            )
        if AluOp(self.reduce_op) not in kernels.ACCUMULATE_OPS:
            valid = ", ".join(sorted(o.name for o in kernels.ACCUMULATE_OPS))
            self.fail(f"reduce_op={AluOp(self.reduce_op).name}; valid: {valid}")
        check_reduce_cmd(self, self.reduce_cmd, ACTIVATE2_CMDS, self.reduce_res, self.src)

    def execute(self, state: CoreState) -> None:
        staged = kernels.tensor_scalar(
            read_2d(state, self.src, False),
            self.op0,
            read_scalar(state, self.imm0, False),
            self.reverse0,
            self.op1,
            read_scalar(state, self.imm1, False),
            self.reverse1,
        )
        out = kernels.activation(staged, self.func, 1.0, 0.0)
        registers = accumulators(state, "scalar").update(
            self, self.reduce_cmd, self.src.start_partition, out, self.reduce_op
        )
        write_result(state, self.dst, out, False)
        if self.reduce_res is not None:
            write_result(state, self.reduce_res, registers, False)
