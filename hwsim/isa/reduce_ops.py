"""VectorE reductions and statistics: tensor_reduce, bn_stats, bn_aggr (costs [S16] over the
streaming model of ``hwsim.cost.streaming``, as in ``vector_ops``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hwsim import kernels
from hwsim.isa.base import MachineSpec, register
from hwsim.isa.compute_base import (
    BN_STATS_FMAX,
    ReduceCompute,
    UnaryCompute,
    read_2d,
    write_result,
)
from hwsim.kernels import ReduceOp

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState


@register("tensor_reduce", engines=("vector",), profiler="REDUCE")
@dataclass(frozen=True, kw_only=True)
class TensorReduce(ReduceCompute):
    """dst[P, kept] = reduce of src over its ``axes`` innermost free dims (1..4), optionally
    negated (arithmetic ops only). Arithmetic ops reduce in fp32; bitwise_or/and need integers.

    Cost [S16]: N/2 if src and dst are bf16 and op is add or max, else N; MIN_II floor.
    """

    NKI_ARGS = "dst, op, data, *, axes, negate"
    FLOPS_PER_ELEMENT = 1

    axes: int = 1
    negate: bool = False

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        free = self.src.free_sizes
        if not 1 <= self.axes <= len(free):
            self.fail(
                f"axes={self.axes} is not a number of innermost free dims of src {self.src.shape} "
                f"(1..{len(free)})"
            )
        kept = math.prod(free[: len(free) - self.axes])
        if self.dst.partitions != self.src.partitions or self.dst.free_elements != kept:
            self.fail(
                f"dst shape {self.dst.shape} does not hold the result: reducing the last "
                f"{self.axes} free dims of src {self.src.shape} gives "
                f"[{self.src.partitions}, {kept}]"
            )
        if self._bitvec():
            self.check_integer(f"op={ReduceOp(self.op).name}", {"src": self.src, "dst": self.dst})
            if self.negate:
                self.fail("negate applies to arithmetic reductions only, not bitvec ops [S15]")

    def execute(self, state: CoreState) -> None:
        integer = self._bitvec()
        reduced = math.prod(self.src.free_sizes[len(self.src.free_sizes) - self.axes :])
        x = read_2d(state, self.src, integer).reshape(self.src.partitions, -1, reduced)
        write_result(state, self.dst, kernels.tensor_reduce(x, self.op, self.negate), integer)


@register("bn_stats", engines=("vector",), profiler="BN_STATS")
@dataclass(frozen=True, kw_only=True)
class BnStats(UnaryCompute):
    """dst[P, 6] = (count, mean, M2) of the even then odd elements of src[P, N], N <= 512.

    Cost max(MIN_II, N) [S16].
    """

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        if self.src.free_elements > BN_STATS_FMAX:
            self.fail(
                f"src has {self.src.free_elements} elements per partition; bn_stats takes at "
                f"most {BN_STATS_FMAX} (bn_stats_fmax [S16]): split it and combine with bn_aggr"
            )
        width = kernels.BN_STATS_WIDTH
        if self.dst.partitions != self.src.partitions or self.dst.free_elements != width:
            self.fail(f"dst shape {self.dst.shape} must be [{self.src.partitions}, {width}]")
        if not self.dst.dtype.is_float:
            self.fail(f"dst dtype {self.dst.dtype.name} cannot hold statistics; use fp32")

    def execute(self, state: CoreState) -> None:
        write_result(state, self.dst, kernels.bn_stats(read_2d(state, self.src, False)), False)


@register("bn_aggr", engines=("vector",), profiler="BN_AGGR")
@dataclass(frozen=True, kw_only=True)
class BnAggr(UnaryCompute):
    """dst[P, 2] = (mean, variance) combined from src[P, 3k] (count, mean, M2) groups.

    Cost max(MIN_II, 13 * N / 3) [S16]: 13 lane cycles per (count, mean, M2) group, which hides
    the operand streams unless they are slower.
    """

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        group = kernels.BN_GROUP_WIDTH
        if self.src.free_elements % group:
            self.fail(
                f"src has {self.src.free_elements} elements per partition; bn_aggr reads whole "
                f"(count, mean, M2) groups, a multiple of {group} [S16]"
            )
        if self.dst.partitions != self.src.partitions or self.dst.free_elements != 2:
            self.fail(f"dst shape {self.dst.shape} must be [{self.src.partitions}, 2]")
        if not self.dst.dtype.is_float:
            self.fail(f"dst dtype {self.dst.dtype.name} cannot hold mean/variance; use fp32")

    def execute(self, state: CoreState) -> None:
        write_result(state, self.dst, kernels.bn_aggr(read_2d(state, self.src, False)), False)
