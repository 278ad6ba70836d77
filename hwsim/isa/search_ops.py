"""VectorE search and select instructions: max8, nc_find_index8, nc_match_replace8, range_select,
select_reduce.

Semantics are nki.isa's [S15] (HARDWARE.md §3), values compared in fp32 (``kernels.search``);
costs are the documented estimates [S16] over the streaming model of ``hwsim.cost.streaming``
(``CostModel.compute`` adds MIN_II and fixed costs). Where nki.isa calls a behaviour
undefined (a value to find that does not occur), the simulator raises an error naming the
instruction, the partition and the value.
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
    read_2d,
    read_scalar,
    write_result,
)
from hwsim.isa.copy_ops import same_shape
from hwsim.isa.engine_state import ReduceCmd, accumulators, check_reduce_cmd
from hwsim.isa.operands import READ, WRITE, maybe_operand, operand
from hwsim.kernels import AluOp

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState

#: Most elements per partition max8 / nc_find_index8 / nc_match_replace8 read [S15][S16].
SEARCH_MAX_ELEMENTS = 16384
#: Index dtypes of nc_find_index8 / nc_match_replace8 results [S15].
INDEX_DTYPES = ("uint16", "uint32")
#: range_select's only on_false_value: FP32_MIN (-3.4028235e38) [S15].
FP32_MIN = float(-np.finfo(np.float32).max)
#: range_select's comparison ops: equal, less, less_equal, greater, greater_equal [S15].
RANGE_COMPARISONS = frozenset({AluOp.is_equal, AluOp.is_lt, AluOp.is_le, AluOp.is_gt, AluOp.is_ge})
#: Indices range_select compares in fp32 must stay integers: |range_start + i| <= 2^24 [S15].
RANGE_INDEX_LIMIT = 1 << 24
#: reduce_cmd values of range_select and select_reduce: they have no reduce_init [S15].
SELECT_REDUCE_CMDS = frozenset({ReduceCmd.idle, ReduceCmd.reset_reduce, ReduceCmd.reduce})
#: select_reduce's predicate dtypes [S15].
SELECT_PREDICATE_DTYPES = ("int8", "uint8", "int16", "uint16")


def _check_search_size(
    instruction: ComputeInstruction, name: str, ap: AccessPattern, low: int
) -> None:
    if not low <= ap.free_elements <= SEARCH_MAX_ELEMENTS:
        instruction.fail(
            f"operand '{name}' has {ap.free_elements} elements per partition; "
            f"{instruction.OPCODE} reads {low} to {SEARCH_MAX_ELEMENTS} [S15]"
        )


def _fail_missing(
    instruction: ComputeInstruction, found: np.ndarray, vals: np.ndarray, p0: int
) -> None:
    p, j = (int(i) for i in np.argwhere(found == kernels.NOT_FOUND)[0])
    instruction.fail(
        f"value {float(vals[p, j])!r} (vals[{p}, {j}]) does not occur in partition {p0 + p} of "
        "'data': nki.isa leaves the result undefined [S15], so the simulator refuses it"
    )


@register("max8", engines=("vector",), profiler="MAX8")
@dataclass(frozen=True, kw_only=True)
class Max8(ComputeInstruction):
    """dst[P, 8] = the 8 largest values of each partition of src, descending, via fp32 [S15]
    (NaN ranks below -inf: nki.isa does not say; the simulator's choice).

    Cost: N VectorE cycles [S16], N the elements per partition of src (its input stream), with
    the MIN_II floor every VectorE instruction has (HARDWARE.md §2.2; [S16] omits it).
    """

    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        _check_search_size(self, "src", self.src, kernels.TOP8)
        self.check_rows("dst", self.dst, self.src, kernels.TOP8)

    def execute(self, state: CoreState) -> None:
        write_result(state, self.dst, kernels.max8(read_2d(state, self.src, False)), False)


@register("nc_find_index8", engines=("vector",), profiler="FIND_INDEX8")
@dataclass(frozen=True, kw_only=True)
class NcFindIndex8(ComputeInstruction):
    """dst[P, 8] (uint16/uint32) = the index of the first element of data equal (in fp32) to
    each of the 8 values of vals[P, 8], per partition [S15]; a value that does not occur is an
    error (undefined on hardware).

    Cost: N VectorE cycles [S16], N = data's elements per partition (the 8 values load first
    and are not a stream), MIN_II floor as for every VectorE instruction.
    """

    dst: AccessPattern = operand(WRITE)
    data: AccessPattern = operand(READ)
    vals: AccessPattern = operand(READ)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        _check_search_size(self, "data", self.data, kernels.TOP8)
        self.check_rows("vals", self.vals, self.data, kernels.TOP8)
        self.check_rows("dst", self.dst, self.data, kernels.TOP8)
        self.check_dtype("dst", self.dst, INDEX_DTYPES)

    def execute(self, state: CoreState) -> None:
        vals = read_2d(state, self.vals, False)
        found = kernels.find_index8(read_2d(state, self.data, False), vals)
        if (found == kernels.NOT_FOUND).any():
            _fail_missing(self, found, vals, self.data.start_partition)
        write_result(state, self.dst, found, True)


@register("nc_match_replace8", engines=("vector",), profiler="MATCH_REPLACE8")
@dataclass(frozen=True, kw_only=True)
class NcMatchReplace8(ComputeInstruction):
    """dst = data with the first occurrence of each of the 8 values of vals[P, 8] replaced by
    ``imm``, in order (a repeated value finds the next occurrence), compared in fp32; dst_idx
    (optional, [P, 8] uint16/uint32) receives the indices [S15][S16]. A value that does not
    occur is an error (undefined on hardware). data holds at most 16,384 elements per partition.

    Cost: [S16] says ``min(MIN_II, N)``, read as ``max(MIN_II, N)`` like every other VectorE
    estimate (HARDWARE.md §9.7); N = data's elements per partition.
    """

    NKI_ARGS = "dst, data, vals, imm, dst_idx"

    dst: AccessPattern = operand(WRITE)
    data: AccessPattern = operand(READ)
    vals: AccessPattern = operand(READ)
    imm: float
    dst_idx: AccessPattern | None = maybe_operand(WRITE, default=None)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        _check_search_size(self, "data", self.data, 1)
        same_shape(self, self.data, self.dst, "data/dst")
        self.check_rows("vals", self.vals, self.data, kernels.TOP8)
        if self.dst_idx is not None:
            self.check_rows("dst_idx", self.dst_idx, self.data, kernels.TOP8)
            self.check_dtype("dst_idx", self.dst_idx, INDEX_DTYPES)

    def execute(self, state: CoreState) -> None:
        vals = read_2d(state, self.vals, False)
        out, found = kernels.match_replace8(read_2d(state, self.data, False), vals, self.imm)
        if (found == kernels.NOT_FOUND).any():
            _fail_missing(self, found, vals, self.data.start_partition)
        write_result(state, self.dst, out, False)
        if self.dst_idx is not None:
            write_result(state, self.dst_idx, found, True)


def _accumulate_into(
    instruction: ComputeInstruction,
    state: CoreState,
    cmd: ReduceCmd,
    results: np.ndarray,
    reduce_res: AccessPattern | None,
    first_lane: int,
) -> None:
    """Fold fp32 results into VectorE's accumulators by max; read them out to reduce_res."""
    registers = accumulators(state, "vector").update(
        instruction, cmd, first_lane, results, AluOp.max
    )
    if reduce_res is not None:
        write_result(state, reduce_res, registers, False)


@register("range_select", engines=("vector",), profiler="RANGE_SELECT")
@dataclass(frozen=True, kw_only=True)
class RangeSelect(ComputeInstruction):
    """dst[p, i] = on_true[p, i] where ``comp_op0(range_start + i, bound0[p])`` and
    ``comp_op1(range_start + i, bound1[p])`` hold (compared in fp32), else on_false_value
    (FP32_MIN, the only value the hardware takes); the results' max folds into VectorE's
    accumulators per ``reduce_cmd`` (``isa.engine_state``) and reduce_res reads them out [S15].
    NeuronCore-v3 and later. The accumulator takes the fp32 results, before dst's cast (so a
    bf16 dst holds -inf for FP32_MIN while an fp32 reduce_res holds FP32_MIN, as [S15] says).

    Cost: max(MIN_II, N) VectorE cycles [S16], N = on_true's elements per partition.
    """

    NKI_ARGS = (
        "dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd, reduce_res, "
        "reduce_op, range_start, on_false_value"
    )
    ENGINE_STATE = "accumulators"

    dst: AccessPattern = operand(WRITE)
    on_true: AccessPattern = operand(READ, nki="on_true_tile")
    comp_op0: AluOp
    comp_op1: AluOp
    bound0: AccessPattern = operand(READ)
    bound1: AccessPattern = operand(READ)
    reduce_cmd: ReduceCmd = ReduceCmd.reset_reduce
    reduce_res: AccessPattern | None = maybe_operand(WRITE, default=None)
    reduce_op: AluOp = AluOp.max
    range_start: int = 0
    on_false_value: float = FP32_MIN

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        self.require_generation(spec, "v3", "v4")
        same_shape(self, self.on_true, self.dst, "on_true/dst")
        if not self.on_true.dtype.is_float:
            self.fail(f"operand 'on_true' is {self.on_true.dtype.name}; it must be a float dtype")
        for name, bound in (("bound0", self.bound0), ("bound1", self.bound1)):
            self.check_rows(name, bound, self.on_true, 1)
            self.check_dtype(name, bound, ("fp32",))
        for name, op in (("comp_op0", self.comp_op0), ("comp_op1", self.comp_op1)):
            if AluOp(op) not in RANGE_COMPARISONS:
                valid = ", ".join(sorted(o.name for o in RANGE_COMPARISONS))
                self.fail(f"{name}={AluOp(op).name} is not allowed; valid: {valid}")
        if AluOp(self.reduce_op) is not AluOp.max:
            self.fail(f"reduce_op={AluOp(self.reduce_op).name}: only max is supported [S15]")
        if self.on_false_value != FP32_MIN:
            self.fail(
                f"on_false_value={self.on_false_value!r}: the hardware takes only FP32_MIN "
                f"({FP32_MIN!r}) [S15]"
            )
        last = self.range_start + self.on_true.free_elements - 1
        if max(abs(self.range_start), abs(last)) > RANGE_INDEX_LIMIT:
            self.fail(
                f"indices range_start..{last} leave +-2^24, where fp32 stops holding every "
                "integer [S15]"
            )
        check_reduce_cmd(self, self.reduce_cmd, SELECT_REDUCE_CMDS, self.reduce_res, self.on_true)

    def execute(self, state: CoreState) -> None:
        out = kernels.range_select(
            read_2d(state, self.on_true, False),
            read_scalar(state, self.bound0, False),
            read_scalar(state, self.bound1, False),
            self.comp_op0,
            self.comp_op1,
            self.range_start,
            self.on_false_value,
        )
        _accumulate_into(
            self, state, self.reduce_cmd, out, self.reduce_res, self.on_true.start_partition
        )
        write_result(state, self.dst, out, False)


@register("select_reduce", engines=("vector",), profiler="SELECT_REDUCE")
@dataclass(frozen=True, kw_only=True)
class SelectReduce(ComputeInstruction):
    """dst = on_true where predicate is nonzero (zero if ``reverse_pred``) else on_false (an
    fp32 immediate or a [P, 1] tile), values via fp32; the results' max folds into VectorE's
    accumulators per ``reduce_cmd`` (default idle) and reduce_res reads them out [S15].
    nki.isa writes the reversal as ``~predicate``; read as logical not (a bitwise not of an
    integer 1 is nonzero too).

    Cost: no published figure (HARDWARE.md §3 "n/a"). Assumption: the streaming model over the
    predicate and on_true streams, the rule [S16] documents for tensor_copy_predicated's two
    inputs (N with one of them in PSUM, 2N with both in SBUF on a one-stream SBUF interface).
    """

    NKI_ARGS = "dst, predicate, on_true, on_false, reduce_res, reduce_cmd, reduce_op, reverse_pred"
    ENGINE_STATE = "accumulators"

    dst: AccessPattern = operand(WRITE)
    predicate: AccessPattern = operand(READ)
    on_true: AccessPattern = operand(READ)
    on_false: Scalar = maybe_operand(READ)
    reduce_res: AccessPattern | None = maybe_operand(WRITE, default=None)
    reduce_cmd: ReduceCmd = ReduceCmd.idle
    reduce_op: AluOp = AluOp.max
    reverse_pred: bool = False

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        same_shape(self, self.on_true, self.dst, "on_true/dst")
        same_shape(self, self.on_true, self.predicate, "on_true/predicate")
        self.check_dtype("predicate", self.predicate, SELECT_PREDICATE_DTYPES)
        if self.on_true.dtype.name in ("int32", "uint32"):
            self.fail(f"operand 'on_true' is {self.on_true.dtype.name}: int32/uint32 not allowed")
        self.check_scalar("on_false", self.on_false, self.on_true)
        if self.on_true.memory is self.predicate.memory is MemorySpace.PSUM:
            self.fail("on_true and predicate are both in PSUM; at most one may be [S15]")
        if AluOp(self.reduce_op) is not AluOp.max:
            self.fail(f"reduce_op={AluOp(self.reduce_op).name}: only max is supported [S15]")
        check_reduce_cmd(self, self.reduce_cmd, SELECT_REDUCE_CMDS, self.reduce_res, self.on_true)

    def execute(self, state: CoreState) -> None:
        out = kernels.select_reduce(
            read_2d(state, self.predicate, True),
            read_2d(state, self.on_true, False),
            read_scalar(state, self.on_false, False),
            self.reverse_pred,
        )
        _accumulate_into(
            self, state, self.reduce_cmd, out, self.reduce_res, self.on_true.start_partition
        )
        write_result(state, self.dst, out, False)
