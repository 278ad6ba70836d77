"""Build programs in program order; the builder inserts the semaphores data dependencies need.

As the Neuron compiler does [S1][S24]: every instruction is placed on its engine's stream; for each
operand the builder finds earlier instructions touching overlapping bytes and makes the new one wait
for their completion when needed:

- RAW (read after write): always, also on the same engine (pipelined engines expose the producer's
  latency to a dependent instruction, HARDWARE.md §2.2);
- WAR and WAW: when the earlier access is on another engine or DMA queue (an engine's own stream
  runs in order, so its later instructions cannot overtake its earlier ones).

Semaphores follow the hardware's naming: ``S.<engine>`` counts completed instructions of an engine,
``S.dma.q<k>`` counts completed transfers of DMA queue k [S10][S12].
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from hwsim.dtypes import DType
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import ENGINES, Instruction
from hwsim.isa.regions import Region, region_of
from hwsim.program import Allocation, CoreProgram, HbmTensorDecl, Program, TensorKind

#: On-chip regions are indexed in bins of this many bytes per partition, so finding the earlier
#: accesses that overlap an operand does not scan every live buffer.
_BIN_BYTES = 1024


def engine_semaphore(engine: str) -> str:
    return f"S.{engine}"


def queue_semaphore(queue: int) -> str:
    return f"S.dma.q{queue}"


def channel_of(instruction: Instruction) -> str:
    """The completion counter an instruction signals: its engine, or its DMA queue."""
    if instruction.IS_DMA:
        return f"dma.q{instruction.queue}"  # type: ignore[attr-defined]
    return instruction.engine


@dataclass(eq=False)
class _Access:
    """What last wrote a region, and who has read it since."""

    region: Region
    writer: tuple[str, int] | None
    readers: dict[str, int] = field(default_factory=dict)
    live: bool = True


class _RegionIndex:
    """Accesses of one memory key, findable by overlap."""

    def __init__(self, binned: bool) -> None:
        self.binned = binned
        self.bins: dict[int, list[_Access]] = defaultdict(list)
        self.items: list[_Access] = []

    def _bins(self, region: Region) -> range:
        return range(region.col0 // _BIN_BYTES, (region.col1 - 1) // _BIN_BYTES + 1)

    def overlapping(self, region: Region) -> list[_Access]:
        if not self.binned:
            self.items = [a for a in self.items if a.live]
            return [a for a in self.items if a.region.overlaps(region)]
        seen: dict[int, _Access] = {}
        for b in self._bins(region):
            bucket = self.bins.get(b)
            if not bucket:
                continue
            alive = [a for a in bucket if a.live]
            self.bins[b] = alive
            for access in alive:
                if id(access) not in seen and access.region.overlaps(region):
                    seen[id(access)] = access
        return list(seen.values())

    def add(self, access: _Access) -> None:
        if self.binned:
            for b in self._bins(access.region):
                self.bins[b].append(access)
        else:
            self.items.append(access)


class _CoreTracker:
    """Dependency state of one core."""

    def __init__(self) -> None:
        self.indexes: dict[tuple[Any, ...], _RegionIndex] = {}
        self.counts: dict[str, int] = defaultdict(int)  # completions signalled per channel
        self.satisfied: dict[str, dict[str, int]] = defaultdict(
            dict
        )  # per stream: channel -> value
        #: Readers of HBM inputs never written by the program (tracked per tensor, cheaply).
        self.input_readers: dict[str, dict[str, int]] = defaultdict(dict)

    def index(self, region: Region) -> _RegionIndex:
        found = self.indexes.get(region.key)
        if found is None:
            found = self.indexes[region.key] = _RegionIndex(binned=region.row_bytes == 0)
        return found


class ProgramBuilder:
    """Collects HBM tensors, allocations and instructions; ``build()`` returns the Program."""

    def __init__(self, cores: int = 1) -> None:
        self.program = Program(cores=[CoreProgram() for _ in range(cores)])
        self._trackers = [_CoreTracker() for _ in range(cores)]
        self._written_inputs: set[str] = set()

    # ---- data -------------------------------------------------------------------------------
    def hbm_tensor(
        self,
        name: str,
        shape: tuple[int, ...],
        dtype: DType,
        kind: TensorKind = "scratch",
        values: np.ndarray | None = None,
    ) -> HbmTensorDecl:
        return self.program.add_tensor(name, shape, dtype, kind, values)

    def note_allocation(
        self,
        memory: MemorySpace,
        name: str,
        start_partition: int,
        partitions: int,
        offset_bytes: int,
        size_bytes: int,
        core: int = 0,
    ) -> None:
        """Record a named on-chip buffer (for occupancy statistics)."""
        self.program.allocations.append(
            Allocation(
                core, memory.value, name, start_partition, partitions, offset_bytes, size_bytes
            )
        )

    # ---- instructions -----------------------------------------------------------------------
    def emit(self, instruction: Instruction, core: int = 0) -> Instruction:
        """Append an instruction (its waits/signals are filled in) to its engine's stream."""
        if instruction.engine not in ENGINES:
            instruction.fail(
                f"unknown engine '{instruction.engine}'; engines are {', '.join(ENGINES)}"
            )
        tracker = self._trackers[core]
        channel = channel_of(instruction)
        seq = tracker.counts[channel] + 1
        needs: dict[str, int] = {}
        written = {id(ap) for ap in instruction.writes()}
        for ap in instruction.reads():
            if id(ap) not in written:
                self._dependencies(tracker, core, ap, channel, needs, is_write=False)
        for ap in instruction.writes():
            self._dependencies(tracker, core, ap, channel, needs, is_write=True)
        stream_known = tracker.satisfied[instruction.engine]
        waits = []
        for producer, value in sorted(needs.items()):
            if stream_known.get(producer, 0) >= value:
                continue
            stream_known[producer] = value
            sem = (
                queue_semaphore(int(producer[5:]))
                if producer.startswith("dma.q")
                else engine_semaphore(producer)
            )
            waits.append((sem, value))
        signal = (
            queue_semaphore(instruction.queue)  # type: ignore[attr-defined]
            if instruction.IS_DMA
            else engine_semaphore(instruction.engine)
        )
        final = replace(
            instruction,
            waits=(*instruction.waits, *waits),
            signals=(*instruction.signals, (signal, 1)),
        )
        tracker.counts[channel] = seq
        for ap in instruction.reads():
            if id(ap) not in written:
                self._record(tracker, core, ap, channel, seq, is_write=False)
        for ap in instruction.writes():
            self._record(tracker, core, ap, channel, seq, is_write=True)
        self.program.cores[core].streams[instruction.engine].append(final)
        return final

    def _is_untracked_input(self, ap: AccessPattern) -> bool:
        decl = self.program.hbm.get(ap.tensor)
        return (
            ap.memory is MemorySpace.HBM
            and decl is not None
            and decl.kind == "input"
            and ap.tensor not in self._written_inputs
        )

    def _dependencies(
        self,
        tracker: _CoreTracker,
        core: int,
        ap: AccessPattern,
        channel: str,
        needs: dict[str, int],
        *,
        is_write: bool,
    ) -> None:
        def need(producer: str, value: int) -> None:
            if needs.get(producer, 0) < value:
                needs[producer] = value

        if self._is_untracked_input(ap):
            if is_write:  # an input overwritten: wait for every earlier reader of it
                for reader, value in tracker.input_readers[ap.tensor].items():
                    if reader != channel:
                        need(reader, value)
            return
        region = region_of(core, ap)
        for access in tracker.index(region).overlapping(region):
            if access.writer is not None:
                producer, value = access.writer
                if not is_write or producer != channel:
                    need(producer, value)  # RAW always; WAW across channels
            if is_write:
                for reader, value in access.readers.items():
                    if reader != channel:
                        need(reader, value)  # WAR across channels

    def _record(
        self,
        tracker: _CoreTracker,
        core: int,
        ap: AccessPattern,
        channel: str,
        seq: int,
        *,
        is_write: bool,
    ) -> None:
        if self._is_untracked_input(ap):
            if is_write:
                self._written_inputs.add(ap.tensor)
            else:
                tracker.input_readers[ap.tensor][channel] = seq
                return
        region = region_of(core, ap)
        index = tracker.index(region)
        overlapping = index.overlapping(region)
        if is_write:
            for access in overlapping:
                if region.covers(access.region):
                    access.live = False
            index.add(_Access(region, (channel, seq)))
            return
        if not overlapping:
            index.add(_Access(region, None, {channel: seq}))
        for access in overlapping:
            access.readers[channel] = seq

    def build(self) -> Program:
        return self.program
