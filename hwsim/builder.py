"""Build programs in program order; the builder inserts the semaphores data dependencies need.

As the Neuron compiler does [S1][S24]: every instruction is placed on its engine's stream; for each
operand the builder finds earlier instructions touching overlapping bytes and makes the new one wait
for their completion when needed:

- RAW (read after write): always, also on the same engine (pipelined engines expose the producer's
  latency to a dependent instruction, HARDWARE.md §2.2);
- WAR and WAW: when the earlier access is on another engine or DMA queue (an engine's own stream
  runs in order, so its later instructions cannot overtake its earlier ones).

A read is recorded on the bytes it touches: reading one slice of a wider tile orders later writes
to that slice only, so memory a new tile reuses next to it is not held up (no false WAR).

Semaphores follow the hardware's naming: ``S.<engine>`` counts completed instructions of an engine,
``S.dma.q<k>`` counts completed transfers of DMA queue k [S10][S12].
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from hwsim.dtypes import DType
from hwsim.engines import engine_names
from hwsim.errors import IllegalInstructionError
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import Instruction
from hwsim.isa.regions import Region, hbm_interval, region_of
from hwsim.program import Allocation, CoreProgram, HbmTensorDecl, Program, TensorKind

#: Regions are indexed in bins of this many bytes per row (partition), and for HBM tensors of this
#: many rows, so finding the earlier accesses that overlap an operand does not scan every one.
_BIN_BYTES = 1024
_BIN_ROWS = 128
#: A region that would sit in more bins than this is kept in the index's always-scanned list.
_MAX_BINS = 256


#: Instance attribute (outside the dataclass fields, so equality, hashing, repr and replace()
#: ignore it) naming an earlier emitted instruction with the same ``static_key()``: the first one.
STATIC_TWIN = "_static_twin"


def engine_semaphore(engine: str) -> str:
    return f"S.{engine}"


def queue_semaphore(queue: int) -> str:
    return f"S.dma.q{queue}"


def channel_of(instruction: Instruction) -> str:
    """The completion counter an instruction signals: its engine, or its DMA queue."""
    if instruction.IS_DMA:
        return f"dma.q{instruction.queue}"  # type: ignore[attr-defined]
    return instruction.engine


class _Access:
    """What last wrote a region, and who has read it since."""

    __slots__ = ("live", "readers", "region", "writer")

    def __init__(
        self,
        region: Region,
        writer: tuple[str, int] | None,
        readers: dict[str, int] | None = None,
    ) -> None:
        self.region = region
        self.writer = writer
        self.readers: dict[str, int] = {} if readers is None else readers
        self.live = True


class _RegionIndex:
    """Live accesses of one memory key (an on-chip memory of a core, or an HBM tensor), findable
    by overlap.

    Boxes with the index's row pitch (every on-chip region; an HBM tensor's usual row-strided
    tiles) are binned by rows and columns: two such boxes overlap only if they share a bin.
    Anything else (another pitch, a flat byte interval, a huge box) is in ``others``, which every
    query scans. ``version`` changes whenever the set of live accesses does.
    """

    def __init__(self, pitch: int) -> None:
        self.pitch = pitch
        self.bins: dict[tuple[int, int], list[_Access]] = {}
        self.others: list[_Access] = []
        self.version = 0

    def bin_keys(self, region: Region) -> list[tuple[int, int]] | None:
        """The bins of a box with the index's pitch, or None if it is not binned."""
        if region.row_bytes != self.pitch or region.row1 <= region.row0:
            return None
        col0, col1 = region.col0 // _BIN_BYTES, (region.col1 - 1) // _BIN_BYTES + 1
        if col1 <= col0:
            return None
        if not self.pitch:  # on chip: rows are partitions, all in one row of bins
            if col1 - col0 > _MAX_BINS:
                return None
            return [(0, c) for c in range(col0, col1)]
        row0, row1 = region.row0 // _BIN_ROWS, (region.row1 - 1) // _BIN_ROWS + 1
        if (row1 - row0) * (col1 - col0) > _MAX_BINS:
            return None
        return [(r, c) for r in range(row0, row1) for c in range(col0, col1)]

    def overlapping(self, region: Region, keys: list[tuple[int, int]] | None) -> list[_Access]:
        """The live accesses whose region overlaps ``region`` (its ``bin_keys``), each once."""
        if keys is None:
            buckets = [*self.bins.values()]
        else:
            bins = self.bins
            buckets = [bucket for key in keys if (bucket := bins.get(key))]
        # A box in several bins is met once per bin; ``others`` holds no binned access.
        seen: set[int] | None = set() if len(buckets) > 1 else None
        if self.others:
            buckets.append(self.others)
        found: list[_Access] = []
        pitch, row0, row1 = region.row_bytes, region.row0, region.row1
        col0, col1 = region.col0, region.col1
        for bucket in buckets:
            dead = 0
            for access in bucket:
                if not access.live:
                    dead += 1
                    continue
                other = access.region
                if other.row_bytes == pitch:  # Region.overlaps for boxes of one pitch, inline
                    hit = (
                        other.row0 < row1
                        and row0 < other.row1
                        and other.col0 < col1
                        and col0 < other.col1
                    )
                else:
                    hit = other.overlaps(region)
                if hit:
                    if seen is not None:
                        if id(access) in seen:
                            continue
                        seen.add(id(access))
                    found.append(access)
            if dead > 8 and dead * 2 > len(bucket):
                bucket[:] = [access for access in bucket if access.live]
        return found

    def add(self, access: _Access, keys: list[tuple[int, int]] | None) -> None:
        """Index an access whose region has these ``bin_keys``."""
        self.version += 1
        if keys is None:
            self.others.append(access)
            return
        bins = self.bins
        for key in keys:
            bucket = bins.get(key)
            if bucket is None:
                bins[key] = [access]
            else:
                bucket.append(access)

    def live_accesses(self) -> list[_Access]:
        """Every live access, each once."""
        found: dict[int, _Access] = {}
        for bucket in (*self.bins.values(), self.others):
            for access in bucket:
                if access.live:
                    found[id(access)] = access
        return list(found.values())

    def kill(self, access: _Access) -> None:
        """A later write covers the access: nothing can depend on it any more."""
        self.version += 1
        access.live = False


#: The overlap index under another name, for other analyses of region dependencies
#: (``hwsim.schedule.dag``): any object with ``region`` and ``live`` attributes can be indexed.
RegionIndex = _RegionIndex


class _CoreTracker:
    """Dependency state of one core."""

    def __init__(self) -> None:
        self.indexes: dict[tuple[Any, ...], _RegionIndex] = {}
        self.counts: dict[str, int] = defaultdict(int)  # completions signalled per channel
        self.satisfied: dict[str, dict[str, int]] = defaultdict(
            dict
        )  # per stream: channel -> value
        #: The engine that triggered each DMA queue's latest transfer.
        self.queue_engine: dict[str, str] = {}
        #: Readers of HBM inputs never written by the program (tracked per tensor, cheaply).
        self.input_readers: dict[str, dict[str, int]] = defaultdict(dict)
        #: Per operand value: its region, index and bins (kernels touch the same tiles often).
        self.operands: dict[AccessPattern, tuple[Region, _RegionIndex, Any]] = {}

    def index(self, region: Region) -> _RegionIndex:
        found = self.indexes.get(region.key)
        if found is None:
            found = self.indexes[region.key] = _RegionIndex(region.row_bytes)
        return found

    def operand(self, core: int, ap: AccessPattern) -> tuple[Region, _RegionIndex, Any]:
        facts = self.operands.get(ap)
        if facts is None:
            region = region_of(core, ap)
            index = self.index(region)
            facts = self.operands[ap] = (region, index, index.bin_keys(region))
        return facts


class _Operand:
    """One operand while an instruction is emitted: its region, index and overlapping accesses,
    found once for the dependency pass and reused by the record pass if the index is unchanged."""

    __slots__ = ("found", "index", "keys", "region", "version")

    def __init__(self, facts: tuple[Region, _RegionIndex, Any]) -> None:
        self.region, self.index, self.keys = facts
        self.found = self.index.overlapping(self.region, self.keys)
        self.version = self.index.version

    def overlapping(self) -> list[_Access]:
        if self.version != self.index.version:
            self.found = self.index.overlapping(self.region, self.keys)
            self.version = self.index.version
        return self.found


class ProgramBuilder:
    """Collects HBM tensors, allocations and instructions; ``build()`` returns the Program."""

    def __init__(self, cores: int = 1) -> None:
        self.program = Program(cores=[CoreProgram() for _ in range(cores)])
        self._trackers = [_CoreTracker() for _ in range(cores)]
        self._written_inputs: set[str] = set()
        self._twins: dict[tuple[Any, ...], Instruction] = {}

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

    def place_hbm(
        self, tensor: str, address_bytes: int, earlier: Sequence[str], core: int = 0
    ) -> None:
        """A memory plan put scratch ``tensor`` at ``address_bytes`` of the scratch arena, over
        bytes the ``earlier`` tensors held. Its accesses then wait for every access emitted so
        far to them (whole-tensor granularity: the first write of the new tenant waits for the
        last read of the old ones, WAR; reads wait for their writes), as if they were one buffer.
        """
        decl = self.program.hbm[tensor]
        if decl.kind != "scratch" or address_bytes < 0:
            raise IllegalInstructionError(
                f"HBM tensor '{tensor}': only scratch tensors are placed, at an address >= 0"
            )
        decl.address_bytes = address_bytes
        tracker = self._trackers[core]
        writers: dict[str, int] = {}
        readers: dict[str, int] = {}
        for name in earlier:
            index = tracker.indexes.get(("hbm", name))
            if index is None:
                continue
            for access in index.live_accesses():
                if access.writer is not None:
                    channel, value = access.writer
                    writers[channel] = max(writers.get(channel, 0), value)
                for channel, value in access.readers.items():
                    readers[channel] = max(readers.get(channel, 0), value)
        if not writers and not readers:
            return
        whole = hbm_interval(tensor, 0, max(1, decl.nbytes))
        index = tracker.index(whole)
        accesses = [_Access(whole, (channel, value)) for channel, value in writers.items()]
        if not accesses:
            accesses = [_Access(whole, None)]
        accesses[0].readers.update(readers)
        for access in accesses:
            index.add(access, None)

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
        if instruction.engine not in engine_names():
            instruction.fail(
                f"unknown engine '{instruction.engine}'; engines are {', '.join(engine_names())}"
            )
        tracker = self._trackers[core]
        channel = channel_of(instruction)
        seq = tracker.counts[channel] + 1
        needs: dict[str, int] = {}
        writes = instruction.writes()
        written = {id(ap) for ap in writes}
        reads = [ap for ap in instruction.reads() if id(ap) not in written]
        operands: dict[int, _Operand] = {}  # by id(ap): shared by the two passes
        for ap in reads:
            self._dependencies(tracker, core, ap, channel, needs, operands, is_write=False)
        for ap in writes:
            self._dependencies(tracker, core, ap, channel, needs, operands, is_write=True)
        if instruction.IS_DMA:
            # A queue's semaphore counts completions in arrival order; a trigger from another
            # engine than the queue's previous one could arrive first, so it waits for the
            # previous transfer: completion k is then always the k-th transfer emitted.
            previous = tracker.queue_engine.get(channel)
            if previous is not None and previous != instruction.engine:
                needs[channel] = max(needs.get(channel, 0), seq - 1)
            tracker.queue_engine[channel] = instruction.engine
        waits = _new_waits(needs, tracker.satisfied[instruction.engine])
        signal = (
            queue_semaphore(instruction.queue)  # type: ignore[attr-defined]
            if instruction.IS_DMA
            else engine_semaphore(instruction.engine)
        )
        final = _with_sync(
            instruction,
            (*instruction.waits, *waits),
            (*instruction.signals, (signal, 1)),
        )
        # The first instruction emitted with the same static key: the simulator works out
        # legality and cost once per twin, by identity, instead of hashing operands per run.
        final.__dict__[STATIC_TWIN] = self._twins.setdefault(final.static_key(), final)
        tracker.counts[channel] = seq
        for ap in reads:
            self._record(tracker, core, ap, channel, seq, operands, is_write=False)
        for ap in writes:
            self._record(tracker, core, ap, channel, seq, operands, is_write=True)
        self.program.cores[core].streams[instruction.engine].append(final)
        return final

    def _is_untracked_input(self, ap: AccessPattern) -> bool:
        if ap.memory is not MemorySpace.HBM:
            return False
        decl = self.program.hbm.get(ap.tensor)
        return decl is not None and decl.kind == "input" and ap.tensor not in self._written_inputs

    @staticmethod
    def _operand(
        tracker: _CoreTracker, core: int, ap: AccessPattern, operands: dict[int, _Operand]
    ) -> _Operand:
        operand = operands.get(id(ap))
        if operand is None:
            operand = operands[id(ap)] = _Operand(tracker.operand(core, ap))
        return operand

    def _dependencies(
        self,
        tracker: _CoreTracker,
        core: int,
        ap: AccessPattern,
        channel: str,
        needs: dict[str, int],
        operands: dict[int, _Operand],
        *,
        is_write: bool,
    ) -> None:
        if self._is_untracked_input(ap):
            if is_write:  # an input overwritten: wait for every earlier reader of it
                for reader, value in tracker.input_readers[ap.tensor].items():
                    if reader != channel and needs.get(reader, 0) < value:
                        needs[reader] = value
            return
        for access in self._operand(tracker, core, ap, operands).overlapping():
            if access.writer is not None:
                producer, value = access.writer
                if (not is_write or producer != channel) and needs.get(producer, 0) < value:
                    needs[producer] = value  # RAW always; WAW across channels
            if is_write:
                for reader, value in access.readers.items():
                    if reader != channel and needs.get(reader, 0) < value:
                        needs[reader] = value  # WAR across channels

    def _record(
        self,
        tracker: _CoreTracker,
        core: int,
        ap: AccessPattern,
        channel: str,
        seq: int,
        operands: dict[int, _Operand],
        *,
        is_write: bool,
    ) -> None:
        if self._is_untracked_input(ap):
            if is_write:
                self._written_inputs.add(ap.tensor)
            else:
                tracker.input_readers[ap.tensor][channel] = seq
                return
        operand = self._operand(tracker, core, ap, operands)
        overlapping = operand.overlapping()
        region, index = operand.region, operand.index
        if is_write:
            for access in overlapping:
                if region.covers(access.region):
                    index.kill(access)
            index.add(_Access(region, (channel, seq)), operand.keys)
            return
        if not overlapping:
            index.add(_Access(region, None, {channel: seq}), operand.keys)
            return
        # A read is recorded on the bytes it reads, not on the whole of a wider write: a read
        # of one slice of a big tile says nothing about the rest, and a later write there
        # (memory a new tile reuses) must not wait for it (a false WAR that would serialise a
        # prefetch behind unrelated compute). So a wider access gets a part of its own, with
        # its writer and readers, that takes the reader; a part made earlier for the same
        # region and writer is reused.
        parts = {(a.region, a.writer) for a in overlapping if region.covers(a.region)}
        for access in overlapping:
            if region.covers(access.region):
                access.readers[channel] = seq
                continue
            part = access.region.intersection(region)
            if part is None:  # boxes of different pitch: keep the conservative record
                access.readers[channel] = seq
                continue
            if (part, access.writer) in parts:
                continue
            parts.add((part, access.writer))
            readers = dict(access.readers)
            readers[channel] = seq
            index.add(_Access(part, access.writer, readers), index.bin_keys(part))

    def build(self) -> Program:
        return self.program


def _new_waits(needs: dict[str, int], stream_known: dict[str, int]) -> list[tuple[str, int]]:
    """Semaphore waits for the needed completions the stream has not waited for yet (which it
    then knows about: its later instructions run after this one)."""
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
    return waits


#: Per instruction class: its field names when a copy may skip ``dataclasses.replace`` (no
#: ``__post_init__``, every field an ``__init__`` argument, instances with a ``__dict__``), or None.
_CLONE_FIELDS: dict[type, tuple[str, ...] | None] = {}


def _with_sync(
    instruction: Instruction,
    waits: tuple[tuple[str, int], ...],
    signals: tuple[tuple[str, int], ...],
) -> Instruction:
    """``dataclasses.replace(instruction, waits=..., signals=...)``, a few times faster.

    For the classes where it is the same thing: ``replace`` builds a new object through
    ``__init__`` from every field, which for them only assigns the fields.
    """
    cls = type(instruction)
    if cls not in _CLONE_FIELDS:
        fields = dataclasses.fields(cls)
        plain = (
            not hasattr(cls, "__post_init__")
            and all(f.init for f in fields)
            and hasattr(instruction, "__dict__")
            and not hasattr(cls, "__slots__")
        )
        _CLONE_FIELDS[cls] = tuple(f.name for f in fields) if plain else None
    names = _CLONE_FIELDS[cls]
    if names is None:
        return replace(instruction, waits=waits, signals=signals)
    values = instruction.__dict__
    clone = object.__new__(cls)
    state = {name: values[name] for name in names}
    state["waits"] = waits
    state["signals"] = signals
    clone.__dict__.update(state)
    return clone
