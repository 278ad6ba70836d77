"""DMA instructions: ``dma_copy`` (HBM/SBUF both ways, with cast), ``dma_transpose`` and the
indirect ``dma_gather`` (rows of an HBM table picked by an SBUF index tile).

A DMA instruction sits in a triggering engine's stream and names its queue; the transfer itself
runs on the DMA engines (``hwsim.machine.dma``, costed by ``hwsim.cost.dma``), and the
instruction's semaphores count completed transfers [S12]. Who builds the descriptors is the
instruction's ``dge_mode`` (HARDWARE.md §2.5 [S13]), which decides what the trigger costs:

- ``none``: descriptors built by the host ahead of time; the trigger is a doorbell
  (``dma.trigger_ns`` on the triggering engine, any engine), and the transfer's start latency
  runs from the trigger's start;
- ``swdge``: GpSimdE writes the descriptors at run time: the trigger is on GpSimdE and busy
  ``gpsimd_engine.fixed_overhead_cycles + descriptors x dma.swdge_descriptor_cycles``; the
  transfer reaches the queues once they are written (the only mode for indirect gathers);
- ``hwdge`` (NeuronCore-v3+, ``dma.hwdge_ns`` set): a DGE block generates them in
  ``dma.hwdge_ns`` (~600 ns [S2][S13]), triggered by the Sync or the Scalar sequencer. From Sync
  the sequencer waits for it; from Scalar the generation overlaps the engine's earlier work
  ([S13]: "effectively hiding the cost"): ScalarE is busy ``dma.trigger_ns`` and the block
  ``dma.hwdge_ns`` (a shared port, so back-to-back triggers still queue on the block).

The compiler's choice (NKI's ``dge_mode.unknown``) is made when a kernel is built
(``hwsim.lang.isa.dma_copy``), from ``dma.default_dge_mode``; an instruction holds a concrete mode.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hwsim.dtypes import INT32, to_compute
from hwsim.engines import sequencer_engines
from hwsim.errors import MemoryAccessError
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import Instruction, MachineSpec, register
from hwsim.isa.operands import READ, WRITE, operand
from hwsim.isa.tensor_ops import as_2d

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState

DMA_MEMORIES = frozenset({MemorySpace.HBM, MemorySpace.SBUF})


class DgeMode(StrEnum):
    """Who builds a transfer's descriptors (``nki.isa.dge_mode``) [S13]."""

    none = "none"
    swdge = "swdge"
    hwdge = "hwdge"


#: Sequencers that may trigger each mode [S13] (none: any engine).
_DGE_TRIGGERS: dict[DgeMode, tuple[str, ...] | None] = {
    DgeMode.none: None,
    DgeMode.swdge: ("gpsimd",),
    DgeMode.hwdge: ("sync", "scalar"),
}


def dge_trigger_engines(mode: DgeMode) -> tuple[str, ...]:
    """The engines that may trigger a transfer of ``mode``."""
    return _DGE_TRIGGERS[mode] or sequencer_engines()


@dataclass(frozen=True, slots=True)
class TransferSides:
    """What the DMA engines move for an instruction (``hwsim.cost.dma``)."""

    src: AccessPattern
    dst: AccessPattern
    transpose: bool = False
    partitions: int | None = None  # engine split, when not dst's partitions
    descriptors: int | None = None  # when not derived from the two patterns


@dataclass(frozen=True, kw_only=True)
class _DmaInstruction(Instruction):
    IS_DMA = True
    ENGINES: ClassVar[tuple[str, ...]] = ("any",)  # a trigger runs on every engine

    @classmethod
    def allowed_engines(cls) -> tuple[str, ...]:
        return sequencer_engines() if cls.ENGINES == ("any",) else cls.ENGINES

    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ)
    queue: int = 0
    dge_mode: DgeMode = DgeMode.none

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
        mode = DgeMode(self.dge_mode)
        if self.engine not in dge_trigger_engines(mode):
            self.fail(
                f"dge_mode={mode.value} is triggered by {' or '.join(dge_trigger_engines(mode))}, "
                f"not {self.engine} [S13]"
            )
        if mode is DgeMode.hwdge and spec.config.dma.hwdge_ns is None:
            self.fail(
                f"dge_mode=hwdge needs a hardware DGE block (NeuronCore-v3+); "
                f"{spec.config.chip.name} has none (dma.hwdge_ns is null) [S13]"
            )

    def transfer(self) -> TransferSides:
        return TransferSides(self.src, self.dst)


@register("dma_copy", profiler="DMA_DIRECT2D")
@dataclass(frozen=True, kw_only=True)
class DmaCopy(_DmaInstruction):
    """dst = src, converting dtype (via fp32, as the DMA engines do [S12][S15])."""

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


@register("dma_transpose", profiler="DMA_TRANSPOSE")
@dataclass(frozen=True, kw_only=True)
class DmaTranspose(_DmaInstruction):
    """dst[F, P] = src[P, F] during the copy, at a fraction of DMA bandwidth [S2]."""

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        p, f = self.src.partitions, self.src.free_elements
        if self.dst.partitions != f or self.dst.free_elements != p:
            self.fail(f"dst shape {self.dst.shape} must be [{f}, {p}] for src [{p}, {f}]")
        if self.src.dtype.itemsize != 2 or self.dst.dtype.itemsize != 2:
            self.fail("dma_transpose moves 2-byte dtypes only (bf16, fp16, int16, uint16) [S15]")

    def transfer(self) -> TransferSides:
        return TransferSides(self.src, self.dst, transpose=True)

    def execute(self, state: CoreState) -> None:
        values = as_2d(state.read(self.src))
        state.write(self.dst, np.ascontiguousarray(values.T).reshape(self.dst.shape))


@register("dma_gather", engines=("gpsimd",), profiler="DMA_INDIRECT")
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

    indices: AccessPattern = operand(READ)
    dge_mode: DgeMode = DgeMode.swdge

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
        if DgeMode(self.dge_mode) is not DgeMode.swdge:
            self.fail("an indirect gather's descriptors come from software DGE only [S13]")

    def transfer(self) -> TransferSides:
        """P rows, each one descriptor per contiguous piece (on its src or its dst side)."""
        partitions = self.dst.partitions
        row_runs = replace(self.src, partitions=1).contiguous_runs()[0]
        dst_runs = self.dst.contiguous_runs()[0] // partitions
        rows = replace(self.src, partitions=partitions)  # the P rows moved
        return TransferSides(
            rows, self.dst, partitions=partitions, descriptors=partitions * max(row_runs, dst_runs)
        )

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
