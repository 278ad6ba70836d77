"""DMA instructions: ``dma_copy`` (HBM/SBUF both ways, with cast) and ``dma_transpose``.

A DMA instruction sits in a triggering engine's stream (usually ``sync``) and names its queue; the
trigger occupies that engine for ``dma.trigger_ns``; the transfer itself runs on the DMA engines
(``hwsim.machine.dma``), and the instruction's semaphores count completed transfers [S12].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import ENGINES, Cost, Instruction, MachineSpec, register
from hwsim.isa.tensor_ops import as_2d

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState

DMA_MEMORIES = frozenset({MemorySpace.HBM, MemorySpace.SBUF})


@dataclass(frozen=True, kw_only=True)
class _DmaInstruction(Instruction):
    IS_DMA = True
    ENGINES = ENGINES

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

    def dma_plan(
        self, spec: MachineSpec, split: Callable[[int], list[int]]
    ) -> tuple[int, list[tuple[int, int]], int, Fraction]:
        """(queue, [(bytes, descriptors) per engine], HBM sides, bandwidth scale)."""
        partitions = self.transfer_partitions()
        per_partition = max(self.src.nbytes, self.dst.nbytes) / partitions
        runs = max(self.src.contiguous_runs()[0], self.dst.contiguous_runs()[0])
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
