"""GpSimdE index instructions: topk, nonzero_with_count and sequence_bounds.

Semantics are nki.isa's [S15][S16] (``kernels.gather``); each GpSimd core owns 16 partitions
[S1], which is why topk and nonzero_with_count work per 16-partition group. Costs: topk's is
documented [S15]; the others have no published figure and are assumptions over the streaming
model (GPSIMD_START + the element streams), named in each docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from hwsim import kernels
from hwsim.isa.ap import AccessPattern
from hwsim.isa.base import MachineSpec, register
from hwsim.isa.compute_base import ComputeInstruction, read_2d, write_result
from hwsim.isa.gather_ops import GROUP, check_gpsimd_groups, partition_runs
from hwsim.isa.operands import READ, WRITE, operand

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState

#: topk's limits [S15]: 8 <= n < 65536 snake elements, 1 <= K < 32768.
TOPK_MIN_N, TOPK_MAX_N, TOPK_MAX_K = 8, 65536, 32768
INT32_RANGE = (-(2**31), 2**31 - 1)


def _columns(ap: AccessPattern, first: int, count: int) -> AccessPattern:
    """Columns [first, first + count) of a [P, X] operand."""
    stride = ap.free_strides[0]
    shift = first * stride * ap.dtype.itemsize
    return replace(ap, free_sizes=(count,), offset_bytes=ap.offset_bytes + shift)


@register("topk", engines=("gpsimd",), profiler="TOPK")
@dataclass(frozen=True, kw_only=True)
class TopK(ComputeInstruction):
    """The K largest values of each 16-partition group's snake and their indices [S15].

    src [P, X] bf16 holds one snake of ``n`` elements per group (element s at partition s % 16,
    column s // 16); K is val_dst's free size (val_dst [P, K] bf16, idx_dst [P, K] uint32).
    Results go in the same snake layout (result j at partition j % 16, column j // 16, the
    newer nki.isa page's statement) in ascending order of value ([S15]: "the K largest values in
    ascending order"); indices are into the group's snake (0 .. n-1). Only the first ceil(K/16)
    columns are written, across all 16 partitions ("the hardware writes each position across all
    16 partitions at once"): slots past K get -inf and index 0xFFFFFFFF, the simulator's choice
    (the page does not say). Equal values rank by lower index, NaN lowest.

    Cost: 4 * n + K GpSimdE cycles [S15], the whole cost (no separate GPSIMD_START).
    """

    val_dst: AccessPattern = operand(WRITE)
    idx_dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ)
    n: int

    @property
    def k(self) -> int:
        return self.val_dst.free_elements

    def reads(self) -> tuple[AccessPattern, ...]:
        full, partial = divmod(self.n, GROUP)
        reads = [_columns(self.src, 0, full)] if full else []
        if partial:  # the last column's first n % 16 partitions of each group
            last = _columns(self.src, full, 1)
            for group in range(self.src.partitions // GROUP):
                reads += partition_runs(last, list(range(group * GROUP, group * GROUP + partial)))
        return tuple(reads)

    def writes(self) -> tuple[AccessPattern, ...]:
        columns = -(-self.k // GROUP)
        return (_columns(self.val_dst, 0, columns), _columns(self.idx_dst, 0, columns))

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        check_gpsimd_groups(self, val_dst=self.val_dst, idx_dst=self.idx_dst, src=self.src)
        self.check_dtype("src", self.src, ("bf16",))
        self.check_dtype("val_dst", self.val_dst, ("bf16",))
        self.check_dtype("idx_dst", self.idx_dst, ("uint32",))
        for name, ap in (("src", self.src), ("val_dst", self.val_dst), ("idx_dst", self.idx_dst)):
            if len(ap.free_sizes) != 1:
                self.fail(f"operand '{name}' has shape {ap.shape}; topk takes [P, X] tiles")
        if not TOPK_MIN_N <= self.n < TOPK_MAX_N:
            self.fail(f"n={self.n}; it must be in [{TOPK_MIN_N}, {TOPK_MAX_N}) [S15]")
        if not 1 <= self.k < TOPK_MAX_K or self.k > self.n:
            self.fail(f"K={self.k} (val_dst's free size) must be in [1, {TOPK_MAX_K}) and <= n")
        if self.idx_dst.free_elements != self.k:
            self.fail(
                f"idx_dst has {self.idx_dst.free_elements} elements per partition; K={self.k}"
            )
        if self.src.free_elements * GROUP < self.n:
            self.fail(f"src has {self.src.free_elements} columns; n={self.n} needs ceil(n/16)")

    def execute(self, state: CoreState) -> None:
        values, indices = kernels.topk(read_2d(state, self.src, False), self.n, self.k)
        val_out, idx_out = self.writes()
        write_result(state, val_out, values, False)
        write_result(state, idx_out, indices, True)


@register("nonzero_with_count", engines=("gpsimd",), profiler="NONZERO_WITH_COUNT")
@dataclass(frozen=True, kw_only=True)
class NonzeroWithCount(ComputeInstruction):
    """On the first partition of each GpSimd core's group (partitions 0, 16, .. 112): dst's row
    = the indices (+ index_offset) of src's nonzero elements, then padding_val up to src's
    size, then their count; dst has one more element per partition than src; other partitions
    are untouched [S15]. NeuronCore-v3 and later; src fp32/int32, dst int32, all in SBUF.

    Cost: no published figure (HARDWARE.md §3 "n/a"). Assumption: GPSIMD_START + the row
    streamed in and out (T + 1 cycles: the cores work in parallel, one row each).
    """

    NKI_ARGS = "dst, src, index_offset, padding_val"

    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ)
    index_offset: int = 0
    padding_val: int = -1

    def rows(self) -> list[int]:
        return list(range(0, self.src.partitions, GROUP))

    def reads(self) -> tuple[AccessPattern, ...]:
        return tuple(
            replace(self.src, start_partition=self.src.start_partition + r, partitions=1)
            for r in self.rows()
        )

    def writes(self) -> tuple[AccessPattern, ...]:
        return tuple(
            replace(self.dst, start_partition=self.dst.start_partition + r, partitions=1)
            for r in self.rows()
        )

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        self.require_generation(spec, "v3", "v4")
        if (self.src.start_partition, self.src.partitions) != (
            self.dst.start_partition,
            self.dst.partitions,
        ):
            self.fail("src and dst must cover the same partitions [S15]")
        if self.src.start_partition % GROUP:
            self.fail(
                f"src starts at partition {self.src.start_partition}; the instruction works on "
                f"each core's partition 0, 16, .., so it must start at a multiple of {GROUP}"
            )
        self.check_dtype("src", self.src, ("fp32", "int32"))
        self.check_dtype("dst", self.dst, ("int32",))
        if self.dst.free_elements != self.src.free_elements + 1:
            self.fail(
                f"dst has {self.dst.free_elements} elements per partition; it must have src's "
                f"{self.src.free_elements} + 1 (the count) [S15]"
            )
        for name in ("index_offset", "padding_val"):
            if not INT32_RANGE[0] <= getattr(self, name) <= INT32_RANGE[1]:
                self.fail(f"{name}={getattr(self, name)} is not an int32 [S15]")

    def execute(self, state: CoreState) -> None:
        integer = not self.src.dtype.is_float
        for row_in, row_out in zip(self.reads(), self.writes(), strict=True):
            out = kernels.nonzero_with_count(
                read_2d(state, row_in, integer), self.index_offset, self.padding_val
            )
            write_result(state, row_out, out, True)


@register("sequence_bounds", engines=("gpsimd",), profiler="SEQUENCE_BOUNDS")
@dataclass(frozen=True, kw_only=True)
class SequenceBounds(ComputeInstruction):
    """For each element of segment_ids [1, N] (non-negative; 0 marks padding), the start and the
    end (exclusive) of its segment: dst [1, 2, N] row 0 the starts, row 1 the ends; padding gets
    start N and end -1 (nki.isa's NumPy equivalent [S16]). fp32 or int32 in and out; SBUF; one
    partition. A negative id is an error.

    Cost: no published figure (HARDWARE.md §3 "n/a"). Assumption: GPSIMD_START + the streaming
    of N ids in and 2N bounds out (2N cycles: the forward and backward passes).
    """

    dst: AccessPattern = operand(WRITE)
    segment_ids: AccessPattern = operand(READ)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        if self.segment_ids.partitions != 1 or self.dst.partitions != 1:
            self.fail("segment_ids and dst must have one partition [S15]")
        self.check_dtype("segment_ids", self.segment_ids, ("fp32", "int32"))
        self.check_dtype("dst", self.dst, ("fp32", "int32"))
        if self.dst.free_elements != 2 * self.segment_ids.free_elements:
            self.fail(
                f"dst has {self.dst.free_elements} elements; it must be [1, 2, "
                f"{self.segment_ids.free_elements}] (start and end of each element) [S15]"
            )

    def execute(self, state: CoreState) -> None:
        ids = read_2d(state, self.segment_ids, not self.segment_ids.dtype.is_float)[0]
        if ids.size and ids.min() < 0:
            self.fail(f"segment id {ids.min()} is negative; ids must be non-negative [S15]")
        state.write(self.dst, kernels.sequence_bounds(ids).reshape(self.dst.shape))
