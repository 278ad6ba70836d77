"""The trace of a run: a record per instruction, per DMA transfer piece, per semaphore update,
and per rank of a collective.

Engines keep no counters; every statistic is derived from these records. Records hold a reference
to the instruction object, so static facts (opcode, operands, bytes, FLOPs, source tag) are read
from it when exporting instead of being copied in the simulator's hot loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hwsim.engines import engine_names, engine_spec


def engine_order(seen: Iterable[str] = ()) -> list[str]:
    """The registered engines in hardware (profiler) order (``hwsim.engines``; those not
    ``shown_when_idle`` only when among ``seen``), then any other engine name among ``seen`` (a
    trace made elsewhere), sorted."""
    seen = set(seen)
    known = [name for name in engine_names() if name in seen or engine_spec(name).shown_when_idle]
    return known + sorted(seen - set(engine_names()))


class InstructionRecord(NamedTuple):
    """One instruction's timing on its engine, all times in ticks of the run's time base.

    ready_tick: the engine reached this instruction (the previous one's issue interval passed).
    start_tick: its semaphore waits were met and it started (ready..start is semaphore wait).
    end_tick:   start + issue interval: the engine is busy until here (the trace slice).
    done_tick:  start + latency: results visible, completion semaphores updated.
    """

    core: int
    engine: str
    pc: int
    instruction: Any  # hwsim.isa.base.Instruction
    ready_tick: int
    start_tick: int
    end_tick: int
    done_tick: int


class DmaRecord(NamedTuple):
    """One piece of a DMA transfer, as processed by one DMA engine on one queue."""

    core: int
    dma_engine: int
    queue: int
    trigger_engine: str  # engine whose stream holds the dma instruction
    trigger_pc: int
    piece: int  # index of this piece within its transfer
    transfer_bytes: int
    descriptors: int
    queued_tick: int  # arrived in the DMA engine's queue (trigger + start latency)
    start_tick: int
    end_tick: int


class SemaphoreUpdate(NamedTuple):
    """A semaphore changed value at ``tick`` (the value it has after the update)."""

    core: int
    tick: int
    semaphore: str
    value: int
    source_engine: str  # engine of the signalling instruction ("dma" for transfer completion)
    source_pc: int


class CollectiveRecord(NamedTuple):
    """One rank's part in a collective (``hwsim.machine.collectives``), ticks of the run.

    group:   the first physical core of each rank of the collective, in rank order; ``rank``
             is this record's; ``seq`` numbers the collectives on this group (the same on every
             rank: with the group it names one collective across cores and runs).
    arrival_tick: this rank arrived (its waits met); start_tick: every rank had; end_tick: done.
    link_bytes:   the bytes one rank sends over each class of link (``hwsim.cost.collectives``).
    """

    core: int
    pc: int
    kind: str
    algorithm: str
    nbytes: int
    group: tuple[int, ...]
    rank: int
    seq: int
    arrival_tick: int
    start_tick: int
    end_tick: int
    link_bytes: dict[str, int]


@dataclass
class Trace:
    """Everything a run records, plus what is needed to interpret it.

    ``base_mhz`` converts ticks to time: ns = tick * 1000 / base_mhz.
    ``memory_allocations`` lists named SBUF/PSUM/HBM buffers of the program as
    (core, memory, name, start_partition, partitions, offset_bytes, size_bytes_per_partition).
    The record sequences are lists, or (from the simulator) read-only columns that build their
    records when read (``hwsim.trace.columns``).
    """

    base_mhz: int
    config: Any  # hwsim.config.HardwareConfig
    instructions: Sequence[InstructionRecord] = field(default_factory=list)
    dma: Sequence[DmaRecord] = field(default_factory=list)
    semaphore_updates: Sequence[SemaphoreUpdate] = field(default_factory=list)
    memory_allocations: list[tuple[int, str, str, int, int, int, int]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    collectives: list[CollectiveRecord] = field(default_factory=list)

    @property
    def end_tick(self) -> int:
        from hwsim.trace.analysis import end_tick

        return end_tick(self)

    def ticks_to_ns(self, ticks: int) -> float:
        return ticks * 1000 / self.base_mhz

    def ticks_to_us(self, ticks: int) -> float:
        return ticks / self.base_mhz
