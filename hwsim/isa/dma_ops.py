"""DMA instructions: ``dma_copy`` (HBM/SBUF both ways, with cast), ``dma_transpose`` and the
indirect ``dma_gather`` (rows of an HBM table picked by an SBUF index tile).

A DMA instruction sits in a triggering engine's stream (usually ``sync``) and names its queue; the
trigger occupies that engine for ``dma.trigger_ns``; the transfer itself runs on the DMA engines
(``hwsim.machine.dma``), and the instruction's semaphores count completed transfers [S12].
``dma_gather`` is software DGE: GpSimdE writes one descriptor per gathered row at run time, and
the DMA engines start only once they are written (HARDWARE.md §2.5 [S13]).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hwsim.dtypes import INT32, to_compute
from hwsim.errors import MemoryAccessError
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import ENGINES, Cost, Instruction, MachineSpec, register
from hwsim.isa.tensor_ops import as_2d

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState

DMA_MEMORIES = frozenset({MemorySpace.HBM, MemorySpace.SBUF})


@dataclass(frozen=True, kw_only=True)
class _DmaInstruction(Instruction):
    IS_DMA = True
    ENGINES: ClassVar[tuple[str, ...]] = ENGINES

    dst: AccessPattern
    src: AccessPattern
    queue: int = 0

    def reads(self) -> tuple[AccessPattern, ...]:
        return (self.src,)

    def writes(self) -> tuple[AccessPattern, ...]:
        return (self.dst,)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        for name, ap in (("dst", self.dst), ("src", self.src)):
            if ap.memory not in DMA_MEMORIES:
                self.fail(
                    f"operand '{name}': DMA moves between HBM and SBUF, not {ap.memory.value}"
                )
        queues = spec.config.dma.queues_per_engine
        if not 0 <= self.queue < queues:
            self.fail(
                f"queue {self.queue} does not exist (DMA engines have queues 0..{queues - 1})"
            )

    def cost(self, spec: MachineSpec) -> Cost:
        ticks = spec.timebase.ns_to_ticks(spec.config.dma.trigger_ns)
        return Cost(ticks, ticks)

    def transfer_partitions(self) -> int:
        """The dimension split over DMA engines (partitions of the SBUF side, or dst rows)."""
        return self.dst.partitions

    def bandwidth_scale(self, spec: MachineSpec) -> Fraction:
        return Fraction(1)

    def transfer_size(self) -> tuple[int, int]:
        """(bytes moved, contiguous descriptors) of the whole transfer."""
        runs = max(self.src.contiguous_runs()[0], self.dst.contiguous_runs()[0])
        return max(self.src.nbytes, self.dst.nbytes), runs

    def dma_plan(
        self, spec: MachineSpec, split: Callable[[int], list[int]]
    ) -> tuple[int, list[tuple[int, int]], int, Fraction]:
        """(queue, [(bytes, descriptors) per engine], HBM sides, bandwidth scale)."""
        partitions = self.transfer_partitions()
        nbytes, runs = self.transfer_size()
        per_partition = nbytes / partitions
        runs_per_partition = runs / partitions
        pieces = [
            (round(k * per_partition), max(1, round(k * runs_per_partition)))
            for k in split(partitions)
        ]
        hbm_sides = (self.src.memory is MemorySpace.HBM) + (self.dst.memory is MemorySpace.HBM)
        return self.queue, pieces, hbm_sides, self.bandwidth_scale(spec)


@register
@dataclass(frozen=True, kw_only=True)
class DmaCopy(_DmaInstruction):
    """dst = src, converting dtype (via fp32, as the DMA engines do [S12][S15])."""

    OPCODE = "dma_copy"
    PROFILER_OPCODE = "DMA_DIRECT2D"

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        if (
            self.src.partitions != self.dst.partitions
            or self.src.free_elements != self.dst.free_elements
        ):
            self.fail(
                f"src shape {self.src.shape} and dst shape {self.dst.shape} differ "
                "(partitions and elements per partition must match)"
            )

    def execute(self, state: CoreState) -> None:
        values = state.read(self.src)
        state.write(self.dst, values.reshape(self.dst.shape))


@register
@dataclass(frozen=True, kw_only=True)
class DmaTranspose(_DmaInstruction):
    """dst[F, P] = src[P, F] during the copy, at a fraction of DMA bandwidth [S2]."""

    OPCODE = "dma_transpose"
    PROFILER_OPCODE = "DMA_TRANSPOSE"

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        p, f = self.src.partitions, self.src.free_elements
        if self.dst.partitions != f or self.dst.free_elements != p:
            self.fail(f"dst shape {self.dst.shape} must be [{f}, {p}] for src [{p}, {f}]")
        if self.src.dtype.itemsize != 2 or self.dst.dtype.itemsize != 2:
            self.fail("dma_transpose moves 2-byte dtypes only (bf16, fp16, int16, uint16) [S15]")

    def bandwidth_scale(self, spec: MachineSpec) -> Fraction:
        return Fraction(str(spec.config.dma.transpose_bandwidth_fraction))

    def execute(self, state: CoreState) -> None:
        values = as_2d(state.read(self.src))
        state.write(self.dst, np.ascontiguousarray(values.T).reshape(self.dst.shape))


@register
@dataclass(frozen=True, kw_only=True)
class DmaGather(_DmaInstruction):
    """dst[p, :] = src[indices[p], :] for the P partitions of dst: an indirect (swdge) DMA.

    src:     an HBM table seen as rows: partitions = its row count G, ``partition_stride`` the row
             stride, the free pattern one row (any strides; a unit-stride row is one descriptor).
    indices: an int32 SBUF tile [P, 1], one row number in [0, G) per partition.
    dst:     an SBUF tile [P, *row], converting dtype like ``dma_copy`` (via fp32 [S12][S15]).

    GpSimdE builds the descriptors at run time (the only DGE mode for gathers, HARDWARE.md §2.5
    [S13]): it is busy ``gpsimd_engine.fixed_overhead_cycles + descriptors *
    dma.swdge_descriptor_cycles`` cycles, and the transfer reaches the DMA engines after that,
    then costs like a ``dma_copy`` of P rows with one descriptor per contiguous piece of a row
    (per-descriptor overheads apply to every row).
    The cost never depends on index values (timing-only runs have none). An index outside
    [0, G) is an error naming the instruction, the partition and the value, like the hardware's
    default out-of-bounds mode (``oob_mode.error``); it never wraps.

    Dependencies: which rows are read is data, so the instruction reads the whole table (``src``
    covers all of it) plus the index tile; ``moved_reads()`` gives trace statistics the P rows
    actually moved.
    """

    OPCODE = "dma_gather"
    PROFILER_OPCODE = "DMA_INDIRECT"  # assumed: the indirect counterpart of DMA_DIRECT2D
    ENGINES = ("gpsimd",)
    SUBMITS_AFTER_ISSUE = True

    indices: AccessPattern

    def reads(self) -> tuple[AccessPattern, ...]:
        return (self.src, self.indices)

    def moved_reads(self) -> tuple[AccessPattern, ...]:
        """The P rows moved (as the table's first P rows: only their byte count is used)."""
        rows = replace(self.src, partitions=self.dst.partitions)
        return (rows, self.indices)

    def initcheck_reads(self, state: CoreState) -> tuple[AccessPattern, ...]:
        """The index tile, then the rows its in-range indices pick (consecutive rows merged into
        one pattern); an out-of-range index is ``execute``'s error, not a read."""
        rows = self.src.partitions
        index = state.view(self.indices).reshape(-1).astype(np.int64)
        picked = np.unique(index[(index >= 0) & (index < rows)])
        if not picked.size:
            return (self.indices,)
        breaks = np.flatnonzero(np.diff(picked) != 1) + 1
        row_bytes = self.src.partition_stride * self.src.dtype.itemsize
        runs = [
            replace(
                self.src,
                partitions=int(run.size),
                offset_bytes=self.src.offset_bytes + int(run[0]) * row_bytes,
            )
            for run in np.split(picked, breaks)
        ]
        return (self.indices, *runs)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        if self.src.memory is not MemorySpace.HBM:
            self.fail(f"operand 'src' must be an HBM table, not {self.src.memory.value}")
        if self.dst.memory is not MemorySpace.SBUF:
            self.fail(f"operand 'dst' must be an SBUF tile, not {self.dst.memory.value}")
        if self.indices.memory is not MemorySpace.SBUF:
            self.fail(f"operand 'indices' must be an SBUF tile, not {self.indices.memory.value}")
        if self.indices.dtype != INT32:
            self.fail(f"operand 'indices' must be int32, not {self.indices.dtype.name}")
        partitions = self.dst.partitions  # <= the SBUF's partitions (bounds checked above)
        if self.indices.partitions != partitions or self.indices.free_elements != 1:
            self.fail(
                f"indices shape {self.indices.shape} must be [{partitions}, 1]: one row number "
                f"per partition of dst {self.dst.shape}"
            )
        if self.indices.start_partition != self.dst.start_partition:
            self.fail(
                f"indices start at partition {self.indices.start_partition} and dst at "
                f"{self.dst.start_partition}: partition p's index must sit on dst's partition p"
            )
        if self.src.free_elements != self.dst.free_elements:
            self.fail(
                f"a src row has {self.src.free_elements} elements and a dst partition "
                f"{self.dst.free_elements} (src {self.src.shape}, dst {self.dst.shape})"
            )

    def cost(self, spec: MachineSpec) -> Cost:
        _, descriptors = self.transfer_size()
        work = descriptors * spec.config.dma.swdge_descriptor_cycles
        issue = spec.compute_cost("gpsimd", work, floor=False).issue_ticks
        return Cost(issue, issue)

    def transfer_size(self) -> tuple[int, int]:
        """P rows, each one descriptor per contiguous piece (on its src or its dst side)."""
        partitions = self.dst.partitions
        row_runs = replace(self.src, partitions=1).contiguous_runs()[0]
        dst_runs = self.dst.contiguous_runs()[0] // partitions
        row_bytes = self.src.free_elements * max(self.src.dtype.itemsize, self.dst.dtype.itemsize)
        return partitions * row_bytes, partitions * max(row_runs, dst_runs)

    def execute(self, state: CoreState) -> None:
        rows = self.src.partitions
        index = state.view(self.indices).reshape(-1).astype(np.int64)
        bad = np.flatnonzero((index < 0) | (index >= rows))
        if bad.size:
            p = int(bad[0])
            raise MemoryAccessError(
                f"{self.label()}: index {int(index[p])} at partition "
                f"{self.indices.start_partition + p} is outside the {rows} rows [0, {rows}) of "
                f"HBM tensor '{self.src.tensor}'"
                + (f" ({bad.size} indices out of range)" if bad.size > 1 else "")
            )
        values = to_compute(state.view(self.src)[index])
        state.write(self.dst, values.reshape(self.dst.shape))
