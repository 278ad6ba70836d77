"""GpSimdE instructions: ``iota``, ``affine_select`` and ``tensor_partition_reduce``.

Costs are GPSIMD_START + N GpSimdE cycles [S16] (HARDWARE.md §2.4): N is the streaming time of
``hwsim.cost.streaming`` (one 32-bit stream per partition per cycle, §1.3 [S1][S3]) and
``CostModel.compute('gpsimd', N)`` adds the preset's ``fixed_overhead_cycles`` (GPSIMD_START, 150 on
real chips) with no MIN_II floor.
The affine expression is ``offset + p * channel_multiplier + Σ_k i_k * steps[k]`` over the
partition index p (0 at the operand's first partition) and the operand's free indices i_k.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hwsim import kernels
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import MachineSpec, register
from hwsim.isa.compute_base import ComputeInstruction, ReduceCompute, read_2d, write_result
from hwsim.isa.operands import READ, WRITE, operand, param
from hwsim.kernels import AluOp, ReduceOp

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState


@dataclass(frozen=True, kw_only=True)
class _AffinePattern(ComputeInstruction):
    """Shared by iota and affine_select: the affine expression over ``dst``'s shape."""

    ENGINES = ("gpsimd",)

    dst: AccessPattern = operand(WRITE)
    offset: int = 0
    channel_multiplier: int = 0
    steps: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        # A tuple of ints whatever the caller passed (a list would not hash for static_key).
        object.__setattr__(self, "steps", tuple(int(s) for s in self.steps))

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        if self.dst.memory is not MemorySpace.SBUF:
            self.fail(f"dst must be in SBUF, not {self.dst.memory.value} [S15]")
        dims = len(self.dst.free_sizes)
        if len(self.steps) != dims:
            self.fail(
                f"steps {self.steps} must give one step per free dim of dst {self.dst.shape} "
                f"({dims} of them)"
            )


@register("iota", profiler="IOTA")
@dataclass(frozen=True, kw_only=True)
class Iota(_AffinePattern):
    """dst[p, i...] = the affine expression in 32-bit integer math, cast to dst's dtype [S15].

    Cost GPSIMD_START + N [S16].
    """

    NKI_ARGS = "dst, *, steps, offset, channel_multiplier"

    def execute(self, state: CoreState) -> None:
        values = kernels.iota(self.dst.shape, self.offset, self.channel_multiplier, self.steps)
        state.write(self.dst, values)


@register("affine_select", profiler="AFFINE_SELECT")
@dataclass(frozen=True, kw_only=True)
class AffineSelect(_AffinePattern):
    """dst = src where (affine expression cmp_op 0) holds, else on_false (e.g. causal masks).

    src has dst's shape; values pass through fp32. Cost GPSIMD_START + N [S16].
    """

    NKI_ARGS = "dst, on_true_tile, on_false_value, cmp_op, *, steps, offset, channel_multiplier"

    src: AccessPattern = operand(READ, nki="on_true_tile")
    cmp_op: AluOp
    on_false: float = param(nki="on_false_value")

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        if self.src.shape != self.dst.shape:
            self.fail(f"src shape {self.src.shape} and dst shape {self.dst.shape} differ")
        if AluOp(self.cmp_op) not in kernels.AFFINE_SELECT_CMP_OPS:
            valid = ", ".join(sorted(op.name for op in kernels.AFFINE_SELECT_CMP_OPS))
            self.fail(f"cmp_op={AluOp(self.cmp_op).name} is not a comparison; valid: {valid}")

    def execute(self, state: CoreState) -> None:
        x = read_2d(state, self.src, False).reshape(self.src.shape)
        out = kernels.affine_select(
            x, self.offset, self.channel_multiplier, self.steps, self.cmp_op, self.on_false
        )
        state.write(self.dst, out)


#: Reductions tensor_partition_reduce supports [S15][S16].
PARTITION_REDUCE_OPS = frozenset(
    {ReduceOp.add, ReduceOp.max, ReduceOp.min, ReduceOp.bitwise_or, ReduceOp.bitwise_and}
)


@register("tensor_partition_reduce", engines=("gpsimd",), profiler="PARTITION_REDUCE")
@dataclass(frozen=True, kw_only=True)
class TensorPartitionReduce(ReduceCompute):
    """dst[1, N] = reduce of src[P, N] across its partitions (partition 0 first).

    Bitwise ops need integer tensors; arithmetic runs natively in 32-bit integers when every
    tensor is int32/uint32, else in fp32 [S15].

    Cost (an assumption; no published figure, HARDWARE.md §3 "n/a"): GPSIMD_START +
    N * max(1, ceil(log2 P)) GpSimdE cycles. GpSimdE is 8 cores each wired to 16 partitions
    (HARDWARE.md §1.3 [S1]), so a cross-partition reduction is modelled as a pairwise tree: each of
    the ceil(log2 P) levels streams the N-element rows once at one element per cycle per lane, like
    iota's N term; P = 1 is one pass (a copy).
    """

    NKI_ARGS = "dst, op, data"
    FLOPS_PER_ELEMENT = 1

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        op = ReduceOp(self.op)
        if op not in PARTITION_REDUCE_OPS:
            valid = ", ".join(sorted(o.name for o in PARTITION_REDUCE_OPS))
            self.fail(f"op={op.name} is not a partition reduction; valid: {valid}")
        if self.dst.partitions != 1 or self.dst.free_elements != self.src.free_elements:
            self.fail(
                f"dst shape {self.dst.shape} must be [1, {self.src.free_elements}] "
                f"(one row holding the reduction of src {self.src.shape})"
            )
        if self._bitvec():
            self.check_integer(f"op={op.name}", {"src": self.src, "dst": self.dst})

    def execute(self, state: CoreState) -> None:
        integer = self.integer_path(self._bitvec(), (self.src, self.dst))
        x = read_2d(state, self.src, integer)
        write_result(state, self.dst, kernels.tensor_partition_reduce(x, self.op), integer)
