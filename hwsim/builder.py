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

What the builder keeps per memory (an on-chip memory of a core, or an HBM tensor) are accesses of
two kinds. A *base* is what a write made (its writer; the reads of the whole of it since), what a
first read of bytes nothing had written made (its readers), or a ``place_hbm`` step's whole-tensor
record; it lives until a later write covers it. A *fragment* is what a read records on the part of
a live base it reads without covering it: the box they share and the reader, one per (base, read
region), living until a write covers that box. A read depends on the writers of the bases it
overlaps; a write also on the readers of the bases and fragments it overlaps. A fragment needs no
writer of its own (its base, which outlives it, has it), and a read that overlaps a fragment
records nothing on it (the read's own fragment of the same base, or the base, holds a box at least
as large): so the accesses number at most one per write, per first read and per (read region,
base), never one per pair of earlier accesses, and finding them costs what overlaps.

Two ways to run these rules, with the same result: ``emit`` applies them as each instruction
comes (this module's Python, the specification: an instruction it returns has its waits), or a
deferred builder (``ProgramBuilder(deferred=True)``, what kernels are built with) records each
instruction's channel and operand regions and ``build()`` applies them to the whole program in one
compiled pass (``hwsim.deferred_deps``), several times faster.

Semaphores follow the hardware's naming: ``S.<engine>`` counts completed instructions of an engine,
``S.dma.q<k>`` counts completed transfers of DMA queue k [S10][S12].
"""

from __future__ import annotations

import dataclasses
from array import array
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from hwsim import deferred_deps
from hwsim.deferred_deps import BIN_BYTES, BIN_ROWS, MAX_BINS
from hwsim.engines import engine_names
from hwsim.errors import HwsimError, IllegalInstructionError
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import STATIC_TWIN, Instruction
from hwsim.isa.regions import Region, hbm_interval, region_of
from hwsim.program import Allocation, CoreProgram, HbmTensorDecl, Program

#: The tracker's identity cache of operand facts is cleared when it reaches this many entries
#: (a bound on its memory; the by-value cache behind it keeps every fact).
_MAX_BY_ID = 1 << 16


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
    """A base (what last wrote a region, and who has read all of it since) or a fragment (who
    has read a part of a base: ``writer`` None)."""

    __slots__ = ("cuts", "live", "readers", "region", "writer")

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
        #: A base's fragments: id of a read region that does not cover it -> the fragment that
        #: read made (the builder keeps every operand's region alive, so the id is not reused).
        self.cuts: dict[int, _Access] | None = None


#: The bins of a region as the index's bucket lists (stable objects), or None: not binned.
Buckets = tuple[list[Any], ...] | None


class _RegionIndex:
    """Live accesses of one memory key (an on-chip memory of a core, or an HBM tensor), findable
    by overlap.

    Boxes with the index's row pitch (every on-chip region; an HBM tensor's usual row-strided
    tiles) are binned by rows and columns: two such boxes overlap only if they share a bin.
    Anything else (another pitch, a flat byte interval, a huge box) is in ``others``, which every
    query scans. ``version`` changes whenever the set of live accesses does.

    A bin's bucket list, once made, stays the same object (compacted in place), so an operand
    seen again keeps its buckets (``buckets``) and skips the bin lookups.
    """

    def __init__(self, pitch: int) -> None:
        self.pitch = pitch
        self.bins: dict[tuple[int, int], list[Any]] = {}
        self.others: list[Any] = []
        self.version = 0

    def bin_keys(self, region: Region) -> list[tuple[int, int]] | None:
        """The bins of a box with the index's pitch, or None if it is not binned."""
        if region.row_bytes != self.pitch or region.row1 <= region.row0:
            return None
        col0, col1 = region.col0 // BIN_BYTES, (region.col1 - 1) // BIN_BYTES + 1
        if col1 <= col0:
            return None
        if not self.pitch:  # on chip: rows are partitions, all in one row of bins
            if col1 - col0 > MAX_BINS:
                return None
            return [(0, c) for c in range(col0, col1)]
        row0, row1 = region.row0 // BIN_ROWS, (region.row1 - 1) // BIN_ROWS + 1
        if (row1 - row0) * (col1 - col0) > MAX_BINS:
            return None
        return [(r, c) for r in range(row0, row1) for c in range(col0, col1)]

    def buckets(self, keys: list[tuple[int, int]] | None) -> Buckets:
        """The bucket lists of these ``bin_keys`` (made empty where none is yet)."""
        if keys is None:
            return None
        bins = self.bins
        return tuple(bins.setdefault(key, []) for key in keys)

    def overlapping(self, region: Region, keys: list[tuple[int, int]] | None) -> list[Any]:
        """The live accesses whose region overlaps ``region`` (its ``bin_keys``), each once."""
        return self.overlapping_in(region, self.buckets(keys))

    def overlapping_in(self, region: Region, buckets: Buckets) -> list[Any]:
        """``overlapping`` for a region whose ``buckets`` are known."""
        found: list[Any] = []
        row0, row1, col0, col1 = region.row0, region.row1, region.col0, region.col1
        if buckets is None:
            # Not binned: its pitch may not be the index's (a flat interval, a box of another
            # pitch), so the binned boxes are compared by ``Region.overlaps``, not as boxes.
            return self._overlapping_unbinned(region)
        scan = buckets
        # A box in several bins is met once per bin; ``others`` holds no binned access.
        seen: set[int] | None = set() if len(scan) > 1 else None
        for bucket in scan:
            dead = 0
            # Every access of a bucket has the index's pitch, as ``region`` has: boxes of one
            # pitch overlap when their rows and their columns do (``Region.overlaps``).
            for access in bucket:
                if not access.live:
                    dead += 1
                    continue
                other = access.region
                if (
                    other.row0 < row1
                    and row0 < other.row1
                    and other.col0 < col1
                    and col0 < other.col1
                ):
                    if seen is not None:
                        if id(access) in seen:
                            continue
                        seen.add(id(access))
                    found.append(access)
            if dead > 8 and dead * 2 > len(bucket):
                bucket[:] = [access for access in bucket if access.live]
        others = self.others
        if others:
            dead = 0
            for access in others:
                if not access.live:
                    dead += 1
                elif access.region.overlaps(region):
                    found.append(access)
            if dead > 8 and dead * 2 > len(others):
                others[:] = [access for access in others if access.live]
        return found

    def _overlapping_unbinned(self, region: Region) -> list[Any]:
        """``overlapping_in`` for a region that sits in no bin: every live access is tested
        with ``Region.overlaps`` (each once)."""
        found: dict[int, Any] = {}
        for bucket in (*self.bins.values(), self.others):
            for access in bucket:
                if access.live and access.region.overlaps(region):
                    found[id(access)] = access
        return list(found.values())

    def add(self, access: Any, keys: list[tuple[int, int]] | None) -> None:
        """Index an access whose region has these ``bin_keys``."""
        self.add_to(access, self.buckets(keys))

    def add_to(self, access: Any, buckets: Buckets) -> None:
        """``add`` for an access whose region's ``buckets`` are known."""
        self.version += 1
        if buckets is None:
            self.others.append(access)
            return
        for bucket in buckets:
            bucket.append(access)

    def live_accesses(self) -> list[Any]:
        """Every live access, each once."""
        found: dict[int, Any] = {}
        for bucket in (*self.bins.values(), self.others):
            for access in bucket:
                if access.live:
                    found[id(access)] = access
        return list(found.values())

    def kill(self, access: Any) -> None:
        """A later write covers the access: nothing can depend on it any more."""
        self.version += 1
        access.live = False


#: The overlap index under another name, for other analyses of region dependencies
#: (``hwsim.schedule.dag``): any object with ``region`` and ``live`` attributes can be indexed.
RegionIndex = _RegionIndex

#: What the builder keeps per operand value: its region, the bases' index of its memory and the
#: region's buckets there, the HBM tensor it is in ("" on chip), and the fragments' index and
#: buckets.
_Facts = tuple[Region, _RegionIndex, Buckets, str, _RegionIndex, Buckets]


class _CoreTracker:
    """Dependency state of one core."""

    def __init__(self) -> None:
        #: Per memory key: the index of its bases, and of its fragments (one pitch, the first
        #: region's).
        self.indexes: dict[tuple[Any, ...], _RegionIndex] = {}
        self.fragments: dict[tuple[Any, ...], _RegionIndex] = {}
        self.counts: dict[str, int] = defaultdict(int)  # completions signalled per channel
        self.satisfied: dict[str, dict[str, int]] = defaultdict(
            dict
        )  # per stream: channel -> value
        #: The engine that triggered each DMA queue's latest transfer.
        self.queue_engine: dict[str, str] = {}
        #: Readers of HBM inputs never written by the program (tracked per tensor, cheaply).
        self.input_readers: dict[str, dict[str, int]] = defaultdict(dict)
        #: Per operand value: its facts (kernels touch the same tiles often).
        self.operands: dict[AccessPattern, _Facts] = {}
        self.by_id: dict[int, tuple[AccessPattern, _Facts]] = {}

    def index(self, region: Region) -> _RegionIndex:
        """The index of the bases of the region's memory (made, with its fragments', if new)."""
        found = self.indexes.get(region.key)
        if found is None:
            found = self.indexes[region.key] = _RegionIndex(region.row_bytes)
            self.fragments[region.key] = _RegionIndex(region.row_bytes)
        return found

    def operand(self, core: int, ap: AccessPattern) -> _Facts:
        # By identity first: the kernel language hands out one pattern object per view geometry
        # of a tile, and hashing a pattern by value takes a Python call. The entry holds the
        # pattern, so its id cannot be reused while the entry lives.
        known = self.by_id.get(id(ap))
        if known is not None and known[0] is ap:
            return known[1]
        facts = self.operands.get(ap)
        if facts is None:
            region = region_of(core, ap)
            index = self.index(region)
            tensor = ap.tensor if ap.memory is MemorySpace.HBM else ""
            keys = index.bin_keys(region)
            fragments = self.fragments[region.key]
            facts = self.operands[ap] = (
                region,
                index,
                index.buckets(keys),
                tensor,
                fragments,
                fragments.buckets(keys),
            )
        if len(self.by_id) >= _MAX_BY_ID:
            self.by_id.clear()
        self.by_id[id(ap)] = (ap, facts)
        return facts


class _Template:
    """What instructions with one ``static_key`` (and the same operand objects read and
    written) share in a deferred builder's record: their twin (the first instruction with the
    key), their operands, and per mask of untracked inputs the template id."""

    __slots__ = ("ids", "operands", "tensors", "twin")

    def __init__(self, twin: Instruction, operands: list[tuple[int, int, str]]) -> None:
        self.twin = twin
        #: (region id, WRITE or 0, HBM tensor or "") per operand occurrence, reads first.
        self.operands = operands
        #: The HBM tensors among them (their input status is checked per instruction).
        self.tensors = any(tensor for _, _, tensor in operands)
        self.ids: dict[int, int] = {}


class _Recorder:
    """What a deferred builder keeps of one core's instructions, in program order, for
    ``deferred_deps.resolve``: per instruction its template (engine, channel, operand regions
    with their flags), ``place_hbm`` steps at their place among them."""

    def __init__(self) -> None:
        self.keys: dict[tuple[Any, ...], int] = {}
        self.regions: list[Region] = []
        #: Per region, (key index, row_bytes, row0, row1, col0, col1) flat, in ``regions``'
        #: order: ``build`` makes it one array without a tuple per region.
        self.region_fields: list[int] = []
        self.by_value: dict[AccessPattern, tuple[int, str]] = {}
        self.engines: dict[str, int] = {}
        self.channels: dict[str, int] = {}
        #: static key -> positions of the reads dropped as written (``_operands``) -> template
        self.templates: dict[tuple[Any, ...], dict[tuple[int, ...], _Template]] = {}
        self.t_engine: list[int] = []
        self.t_channel: list[int] = []
        self.t_is_dma: list[int] = []
        self.t_op_end: list[int] = []
        self.op_region: list[int] = []
        self.op_flags: list[int] = []
        #: Per instruction: its template id, or -1 - k for the k-th place step (8 bytes each).
        self.instr_template = array("q")
        self.instructions: list[Instruction | None] = []
        #: Per instruction: its index in its engine's stream (-1 for a place step).
        self.stream_index = array("q")
        #: ids of the instruction objects ``emit_block`` put at more than one position: one
        #: of them that gets waits at ``build()`` is given a copy of its own there.
        self.shared: set[int] = set()
        #: Waits instructions came with (by position), which the found ones follow.
        self.base_waits: dict[int, tuple[tuple[str, int], ...]] = {}
        self.place_whole: list[int] = []
        self.place_key: list[int] = []
        self.place_earlier_end: list[int] = []
        self.place_earlier: list[int] = []
        #: ``resolve`` has run (and dropped the record).
        self.closed = False

    def template(
        self, engine: str, channel: str, is_dma: bool, flags: list[tuple[int, int]]
    ) -> int:
        """A new template: (region id, flags) per operand occurrence."""
        channels, engines = self.channels, self.engines
        if channel not in channels:
            channels[channel] = len(channels)
        if engine not in engines:
            engines[engine] = len(engines)
        self.t_engine.append(engines[engine])
        self.t_channel.append(channels[channel])
        self.t_is_dma.append(1 if is_dma else 0)
        for region, flag in flags:
            self.op_region.append(region)
            self.op_flags.append(flag)
        self.t_op_end.append(len(self.op_region))
        return len(self.t_op_end) - 1

    def key(self, key: tuple[Any, ...]) -> int:
        found = self.keys.get(key)
        if found is None:
            found = self.keys[key] = len(self.keys)
        return found

    def region(self, region: Region) -> int:
        self.regions.append(region)
        self.region_fields.extend(
            (
                self.key(region.key),
                region.row_bytes,
                region.row0,
                region.row1,
                region.col0,
                region.col1,
            )
        )
        return len(self.regions) - 1

    def operand(self, core: int, ap: AccessPattern) -> tuple[int, str]:
        """(region id, HBM tensor or "") of an operand: one region per operand value, as
        ``_CoreTracker.operand``."""
        facts = self.by_value.get(ap)
        if facts is None:
            tensor = ap.tensor if ap.memory is MemorySpace.HBM else ""
            facts = self.by_value[ap] = (self.region(region_of(core, ap)), tensor)
        return facts

    def place(self, tensor: str, nbytes: int, earlier: Sequence[str]) -> None:
        self.instr_template.append(-1 - len(self.place_whole))
        self.instructions.append(None)
        self.stream_index.append(-1)
        self.place_whole.append(self.region(hbm_interval(tensor, 0, max(1, nbytes))))
        self.place_key.append(self.key(("hbm", tensor)))
        self.place_earlier.extend(self.key(("hbm", name)) for name in earlier)
        self.place_earlier_end.append(len(self.place_earlier))

    def resolve(self, streams: dict[str, list[Instruction]]) -> None:
        """Fill in every recorded instruction's waits, then drop the record (it is as large as
        the program): the builder takes no more instructions. ``streams``: the core's, where an
        instruction object shared by several positions is replaced by a copy at each position
        that gets waits."""
        if self.closed:
            return
        self.closed = True
        if not self.instructions:
            return

        def ints(values: list[int]) -> np.ndarray:
            return np.array(values, dtype=np.int64)

        names = sorted(self.channels)
        rank = np.zeros(len(names), np.int64)
        for position, name in enumerate(names):
            rank[self.channels[name]] = position
        given = np.array(self.region_fields, dtype=np.int64).reshape(-1, 6)
        args = (
            given,
            len(self.keys),
            np.frombuffer(self.instr_template, dtype=np.int64),
            ints(self.t_engine),
            ints(self.t_channel),
            ints(self.t_is_dma),
            ints(self.t_op_end),
            ints(self.op_region),
            ints(self.op_flags),
            ints(self.place_whole),
            ints(self.place_key),
            ints(self.place_earlier_end),
            ints(self.place_earlier),
            len(self.engines),
            rank,
        )
        # Table sizes: guesses from the record; a table that is full makes the pass run again
        # with every table sized for what the stopped pass used, extrapolated (``grown``).
        templates = args[2]
        per_template = np.diff(args[6], prepend=0)
        capacities = deferred_deps.first_capacities(
            given,
            int(per_template[templates[templates >= 0]].sum()),
            len(self.place_whole),
            len(self.instructions),
        )
        for _ in range(64):
            status, wait_end, wait_channels, wait_values, counts = deferred_deps.resolve(
                *args, capacities
            )
            if status == deferred_deps.DONE:
                break
            capacities = deferred_deps.grown(
                capacities, status, counts, len(given), len(self.keys), len(self.instructions)
            )
        else:  # not reached: each try doubles a table, and none needs 2**64 rows
            raise RuntimeError("deferred dependency resolution did not fit its tables")
        semaphores = [""] * len(names)
        for name, index in self.channels.items():
            semaphores[index] = _semaphore(name)
        pairs = [
            (semaphores[c], v)
            for c, v in zip(wait_channels.tolist(), wait_values.tolist(), strict=True)
        ]
        start = 0
        bases = self.base_waits
        ends = wait_end.tolist()
        shared = self.shared
        engine_names = {index: name for name, index in self.engines.items()}
        if not bases:  # the common case, in a leaner loop: only found waits, mostly one
            for position, (instruction, end) in enumerate(
                zip(self.instructions, ends, strict=True)
            ):
                if end != start and instruction is not None:  # (place steps have none)
                    waits = (pairs[start],) if end == start + 1 else tuple(pairs[start:end])
                    if id(instruction) in shared:
                        self._own_copy(streams, engine_names, position, instruction, waits)
                    else:
                        object.__setattr__(instruction, "waits", waits)
                start = end
        else:
            for position, (instruction, end) in enumerate(
                zip(self.instructions, ends, strict=True)
            ):
                if instruction is not None:
                    base = bases.get(position, ())
                    waits = (*base, *pairs[start:end]) if end > start else base
                    if instruction.waits == waits:
                        pass
                    elif id(instruction) in shared:
                        self._own_copy(streams, engine_names, position, instruction, waits)
                    else:
                        object.__setattr__(instruction, "waits", waits)
                start = end
        self.__dict__.update(_Recorder().__dict__, closed=True)

    def _own_copy(
        self,
        streams: dict[str, list[Instruction]],
        engine_names: dict[int, str],
        position: int,
        shared: Instruction,
        waits: tuple[tuple[str, int], ...],
    ) -> None:
        """Give the instruction at ``position`` (an object other positions hold too) a copy of
        its own with ``waits``, in its stream."""
        copy = _copy_of(shared)
        object.__setattr__(copy, "waits", waits)
        engine = engine_names[self.t_engine[self.instr_template[position]]]
        streams[engine][self.stream_index[position]] = copy


def _copy_of(instruction: Instruction) -> Instruction:
    """A new object with ``instruction``'s fields, signals and twin (its whole ``__dict__``;
    set past the frozen class's ``__setattr__``)."""
    copy = object.__new__(instruction.__class__)
    object.__setattr__(copy, "__dict__", instruction.__dict__.copy())
    return copy


#: ``ProgramBuilder.last_replay``: (the recorded instruction, its template id, its stream, the
#: record it is in).
Replay = tuple[Instruction, int, list[Instruction], _Recorder]

_BUILT = (
    "this deferred ProgramBuilder has built its program (its waits are worked out over the "
    "whole record at build()): it takes no more instructions; emit into a new builder, or use "
    "ProgramBuilder(deferred=False), which works waits out as it goes"
)

#: Semaphore names by channel ("vector" -> "S.vector", "dma.q3" -> "S.dma.q3").
_SEMAPHORES: dict[str, str] = {}


def _semaphore(channel: str) -> str:
    sem = _SEMAPHORES.get(channel)
    if sem is None:
        sem = _SEMAPHORES[channel] = (
            queue_semaphore(int(channel[5:]))
            if channel.startswith("dma.q")
            else engine_semaphore(channel)
        )
    return sem


#: Per channel: the signals of an instruction that came with none, ``((semaphore, 1),)``; one
#: tuple shared by all of them (at 1M instructions, two objects fewer each: ~100 MB).
_OWN_SIGNALS: dict[str, tuple[tuple[str, int], ...]] = {}


def _signals(instruction: Instruction, channel: str) -> tuple[tuple[str, int], ...]:
    """The instruction's signals and its completion on its channel's semaphore."""
    if instruction.signals:
        return (*instruction.signals, (_semaphore(channel), 1))
    own = _OWN_SIGNALS.get(channel)
    if own is None:
        own = _OWN_SIGNALS[channel] = ((_semaphore(channel), 1),)
    return own


class ProgramBuilder:
    """Collects HBM tensors, allocations and instructions; ``build()`` returns the Program."""

    def __init__(self, cores: int = 1, *, deferred: bool = False) -> None:
        self.program = Program(cores=[CoreProgram() for _ in range(cores)])
        #: Work out semaphore waits when the program is built (``deferred_deps``), not as each
        #: instruction is emitted: the same waits, faster, but an instruction ``emit`` returns
        #: has its waits only once ``build()`` has run, and nothing is emitted after that.
        self.deferred = deferred
        self._recorders = [_Recorder() for _ in range(cores)] if deferred else []
        self._trackers = [_CoreTracker() for _ in range(cores)]
        self._written_inputs: set[str] = set()
        self._twins: dict[tuple[Any, ...], Instruction] = {}
        #: After a deferred ``emit``: how to append a copy of the instruction it recorded
        #: (``emit_again``), or None when a copy would need more than its template (its waits
        #: and HBM operands are looked at per instruction).
        self.last_replay: Replay | None = None

    # ---- data (HBM tensors are declared on ``self.program``: ``Program.add_tensor``) ---------
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
        if self.deferred:
            if self._recorders[core].closed:
                raise HwsimError(_BUILT)
            self._recorders[core].place(tensor, decl.nbytes, earlier)
            return
        tracker = self._trackers[core]
        writers: dict[str, int] = {}
        readers: dict[str, int] = {}
        for name in earlier:
            index = tracker.indexes.get(("hbm", name))
            if index is None:
                continue
            fragments = tracker.fragments[("hbm", name)]
            for access in (*index.live_accesses(), *fragments.live_accesses()):
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
    def emit(self, instruction: Instruction, core: int = 0, *, owned: bool = False) -> Instruction:
        """Append an instruction (its waits/signals are filled in) to its engine's stream.

        ``owned``: the caller made ``instruction`` for this call and keeps no other reference
        to it, so its waits and signals are filled in in place; otherwise a copy gets them.

        Two passes over the operands, reads first: the dependency pass collects the completions
        the instruction needs (RAW always; WAR and WAW across channels), the record pass then
        notes its accesses. Each pass finds an operand's overlapping accesses once; the record
        pass reuses the first pass's finding while the operand's index is unchanged.
        """
        if self.deferred:
            return self._record(instruction, core, owned)
        engine = instruction.engine
        stream = self._stream(instruction, core)
        tracker = self._trackers[core]
        is_dma = instruction.IS_DMA
        channel = f"dma.q{instruction.queue}" if is_dma else engine  # type: ignore[attr-defined]
        seq = tracker.counts[channel] + 1
        reads, writes, _ = _operands(instruction)
        needs: dict[str, int] = {}
        # Per operand object (by id): [facts, overlapping accesses (None: an untracked input),
        # the index version they were found at]. Reads and writes have a loop each (the
        # rules differ; one loop testing which it is per access is slower).
        found: dict[int, list[Any]] = {}
        for ap in reads:
            entry = found.get(id(ap)) or self._find(tracker, core, ap, found)
            accesses = entry[1]
            if accesses is None:  # an untracked input: reads of it wait for nothing
                continue
            for access in accesses:
                writer = access.writer
                if writer is not None:
                    producer, value = writer
                    if needs.get(producer, 0) < value:
                        needs[producer] = value  # RAW, also on the same channel
        for ap in writes:
            entry = found.get(id(ap)) or self._find(tracker, core, ap, found)
            accesses = entry[1]
            if accesses is None:  # an input overwritten: wait for every earlier reader of it
                for reader, value in tracker.input_readers[entry[0][3]].items():
                    if reader != channel and needs.get(reader, 0) < value:
                        needs[reader] = value
                continue
            facts = entry[0]
            for access in (*accesses, *facts[4].overlapping_in(facts[0], facts[5])):
                writer = access.writer
                if writer is not None:
                    producer, value = writer
                    if producer != channel and needs.get(producer, 0) < value:
                        needs[producer] = value  # WAW across channels
                for reader, value in access.readers.items():
                    if reader != channel and needs.get(reader, 0) < value:
                        needs[reader] = value  # WAR across channels (bases and fragments)
        if is_dma:
            # A queue's semaphore counts completions in arrival order; a trigger from another
            # engine than the queue's previous one could arrive first, so it waits for the
            # previous transfer: completion k is then always the k-th transfer emitted.
            previous = tracker.queue_engine.get(channel)
            if previous is not None and previous != engine:
                needs[channel] = max(needs.get(channel, 0), seq - 1)
            tracker.queue_engine[channel] = engine
        waits = _new_waits(needs, tracker.satisfied[engine]) if needs else ()
        final = _with_sync(
            instruction,
            (*instruction.waits, *waits),
            _signals(instruction, channel),
            owned,
        )
        # The first instruction emitted with the same static key: the simulator works out
        # legality and cost once per twin, by identity, instead of hashing operands per run.
        final.__dict__[STATIC_TWIN] = self._twins.setdefault(final.static_key(), final)
        tracker.counts[channel] = seq
        hbm_decls = self.program.hbm
        written_inputs = self._written_inputs
        for ap in reads:
            entry = found[id(ap)]
            region, index, buckets, tensor, fragments, _ = entry[0]
            if tensor and tensor not in written_inputs and _is_input(hbm_decls, tensor):
                tracker.input_readers[tensor][channel] = seq
                continue
            if entry[2] == index.version:
                accesses = entry[1]
            else:
                accesses = index.overlapping_in(region, buckets)
                entry[1], entry[2] = accesses, index.version
            if not accesses:  # bytes nothing wrote: a base of its own
                index.add_to(_Access(region, None, {channel: seq}), buckets)
                continue
            for access in accesses:
                _record_read(access, region, channel, seq, fragments)
        for ap in writes:
            entry = found[id(ap)]
            region, index, buckets, tensor, fragments, fragment_buckets = entry[0]
            if tensor and tensor not in written_inputs and _is_input(hbm_decls, tensor):
                written_inputs.add(tensor)
            if entry[2] == index.version:
                accesses = entry[1]
            else:
                accesses = index.overlapping_in(region, buckets)
            _kill_covered(index, region, buckets, accesses)
            _kill_covered(
                fragments,
                region,
                fragment_buckets,
                fragments.overlapping_in(region, fragment_buckets),
            )
            index.add_to(_Access(region, (channel, seq)), buckets)
        stream.append(final)
        return final

    def _stream(self, instruction: Instruction, core: int) -> list[Instruction]:
        stream = self.program.cores[core].streams.get(instruction.engine)
        if stream is None:  # as ``instruction.fail`` words it
            raise IllegalInstructionError(
                f"{instruction.label()}: unknown engine '{instruction.engine}'; engines are "
                f"{', '.join(engine_names())}"
            )
        return stream

    def _record(self, instruction: Instruction, core: int, owned: bool) -> Instruction:
        """``emit`` of a deferred builder: the instruction on its stream with its signal, and
        its template (channel, operand regions) in the record its waits come from at
        ``build()``. Instructions with one ``static_key`` have the same operands, so the
        template is looked up once per instruction with the twin."""
        stream = self._stream(instruction, core)
        recorder = self._recorders[core]
        if recorder.closed:
            raise HwsimError(_BUILT)
        is_dma = instruction.IS_DMA
        channel = f"dma.q{instruction.queue}" if is_dma else instruction.engine  # type: ignore[attr-defined]
        final = _with_sync(
            instruction,
            instruction.waits,
            _signals(instruction, channel),
            owned,
        )
        # Equal instructions have equal operands; which operand objects are one object (read
        # and written) is part of their template too.
        reads, writes, dropped = _operands(instruction)
        key = instruction.static_key()
        variants = recorder.templates.get(key)
        if variants is None:
            variants = recorder.templates[key] = {}
        template = variants.get(dropped)
        if template is None:
            operands = [
                (*recorder.operand(core, ap), flag)
                for flag, aps in ((0, reads), (deferred_deps.WRITE, writes))
                for ap in aps
            ]
            template = variants[dropped] = _Template(
                self._twins.setdefault(key, final),
                [(region, flag, tensor) for region, tensor, flag in operands],
            )
        mask = self._untracked_inputs(template) if template.tensors else 0
        template_id = template.ids.get(mask)
        if template_id is None:
            template_id = template.ids[mask] = recorder.template(
                instruction.engine,
                channel,
                is_dma,
                [
                    (region, flag | deferred_deps.INPUT if mask >> i & 1 else flag)
                    for i, (region, flag, _) in enumerate(template.operands)
                ],
            )
        final.__dict__[STATIC_TWIN] = template.twin
        position = len(recorder.instructions)
        recorder.instr_template.append(template_id)
        recorder.instructions.append(final)
        recorder.stream_index.append(len(stream))
        if instruction.waits:
            recorder.base_waits[position] = instruction.waits
            self.last_replay = None
        elif template.tensors or _CLONE_FIELDS[type(final)] is None:
            self.last_replay = None  # input status per instruction; or no plain __dict__ copy
        else:
            self.last_replay = (final, template_id, stream, recorder)
        stream.append(final)
        return final

    def emit_again(self, replay: Replay) -> Instruction:
        """Append a copy of an instruction a deferred ``emit`` recorded (``last_replay`` after
        it), as ``emit`` of an equal instruction would: the same template, so the same waits
        at ``build()``, for a fraction of the work (kernels emit equal instructions over and
        over: V1 has 16 per distinct one). The copy is the caller's, as ``emit`` would return."""
        if replay[3].closed:
            raise HwsimError(_BUILT)
        copy, template_id, stream, recorder = self.detached(replay)
        recorder.instr_template.append(template_id)
        recorder.instructions.append(copy)
        recorder.stream_index.append(len(stream))
        stream.append(copy)
        return copy

    def detached(self, replay: Replay) -> Replay:
        """The same replay with a copy of its instruction, for ``emit_block``: no caller holds
        the copy, so it may stand at many positions."""
        prototype, template_id, stream, recorder = replay
        return _copy_of(prototype), template_id, stream, recorder

    def emit_block(self, replays: Sequence[Replay]) -> None:
        """Append each replay's instruction object itself (``hwsim.lang.repeat``: a block of a
        kernel, whose instructions nobody holds; each made by ``detached``). One object then
        stands at many positions; ``build()`` gives each position that gets waits a copy of
        its own, so a position without waits, most of a block's, costs no object at all."""
        for prototype, template_id, stream, recorder in replays:
            if recorder.closed:
                raise HwsimError(_BUILT)
            recorder.shared.add(id(prototype))
            recorder.instr_template.append(template_id)
            recorder.instructions.append(prototype)
            recorder.stream_index.append(len(stream))
            stream.append(prototype)

    def _untracked_inputs(self, template: _Template) -> int:
        """Bit i: operand i is an HBM input no instruction has written yet (untracked, as
        ``_find`` finds it); the instruction's writes then mark their inputs written. The set
        of written inputs is the builder's, across cores."""
        hbm, written = self.program.hbm, self._written_inputs
        mask = 0
        newly: list[str] = []
        for i, (_, flag, tensor) in enumerate(template.operands):
            if tensor and tensor not in written and _is_input(hbm, tensor):
                mask |= 1 << i
                if flag:
                    newly.append(tensor)
        written.update(newly)
        return mask

    def _find(
        self, tracker: _CoreTracker, core: int, ap: AccessPattern, found: dict[int, list[Any]]
    ) -> list[Any]:
        """``emit``'s entry for an operand object seen first: its facts, and its overlapping
        accesses now (None for an HBM input the program has not written: untracked)."""
        known = tracker.by_id.get(id(ap))  # ``tracker.operand``'s first step, without its call
        facts = known[1] if known is not None and known[0] is ap else tracker.operand(core, ap)
        tensor = facts[3]
        if tensor and tensor not in self._written_inputs and _is_input(self.program.hbm, tensor):
            entry: list[Any] = [facts, None, -1]
        else:
            index = facts[1]
            entry = [facts, index.overlapping_in(facts[0], facts[2]), index.version]
        found[id(ap)] = entry
        return entry

    def emitted(self, core: int = 0) -> list[Instruction]:
        """The instructions emitted so far on ``core``, in program order (a deferred builder
        keeps them; an immediate one has only its streams, so none)."""
        if not self._recorders:
            return []
        return [i for i in self._recorders[core].instructions if i is not None]

    def build(self) -> Program:
        for core, recorder in enumerate(self._recorders):
            recorder.resolve(self.program.cores[core].streams)
        return self.program


def _record_read(
    access: _Access, region: Region, channel: str, seq: int, fragments: _RegionIndex
) -> None:
    """Record a read of ``region`` on a live base it overlaps. A read is recorded on the bytes
    it reads, not on the whole of a wider write: a read of one slice of a big tile says nothing
    about the rest, and a later write there (memory a new tile reuses) must not wait for it (a
    false WAR that would serialise a prefetch behind unrelated compute). So a base the read
    does not cover gets a fragment, their common box, that takes the reader (one per read
    region while it lives); a base it covers, or one of another pitch (no box in common:
    conservative), takes the reader itself."""
    if region.covers(access.region):
        access.readers[channel] = seq
        return
    part = access.region.intersection(region)
    if part is None:
        access.readers[channel] = seq
        return
    cuts = access.cuts
    if cuts is None:
        cuts = access.cuts = {}
    made = cuts.get(id(region))
    if made is not None and made.live:
        made.readers[channel] = seq
        return
    made = cuts[id(region)] = _Access(part, None, {channel: seq})
    fragments.add(made, fragments.bin_keys(part))


def _kill_covered(
    index: _RegionIndex, region: Region, buckets: Buckets, accesses: list[Any]
) -> None:
    """A write of ``region``: the accesses it covers (among ``accesses``, its overlapping ones
    in ``index``) are dead; what they sat in are its own bins, where the dead are dropped now
    so later queries do not step over them."""
    killed = False
    for access in accesses:
        if region.covers(access.region):
            index.kill(access)
            killed = True
    if killed and buckets is not None:
        for bucket in buckets:
            bucket[:] = [access for access in bucket if access.live]


def _operands(
    instruction: Instruction,
) -> tuple[tuple[AccessPattern, ...], tuple[AccessPattern, ...], tuple[int, ...]]:
    """(reads, writes, positions of the reads dropped) for dependencies: an operand object both
    read and written counts as written (an equal but distinct object is read, then written)."""
    writes = instruction.writes()
    reads = instruction.reads()
    if not (writes and reads):
        return reads, writes, ()
    # Plain loops: one or two writes against a few reads (a set and generators cost more).
    dropped: tuple[int, ...] = ()
    for position, ap in enumerate(reads):
        for written in writes:
            if ap is written:
                dropped += (position,)
                break
    if not dropped:
        return reads, writes, ()
    if len(dropped) == 1:
        (position,) = dropped
        return reads[:position] + reads[position + 1 :], writes, dropped
    return tuple(ap for i, ap in enumerate(reads) if i not in dropped), writes, dropped


def _is_input(hbm: dict[str, HbmTensorDecl], tensor: str) -> bool:
    decl = hbm.get(tensor)
    return decl is not None and decl.kind == "input"


def _new_waits(needs: dict[str, int], stream_known: dict[str, int]) -> list[tuple[str, int]]:
    """Semaphore waits for the needed completions the stream has not waited for yet (which it
    then knows about: its later instructions run after this one)."""
    waits = []
    for producer, value in sorted(needs.items()):
        if stream_known.get(producer, 0) >= value:
            continue
        stream_known[producer] = value
        waits.append((_semaphore(producer), value))
    return waits


#: Per instruction class: its field names when a copy may skip ``dataclasses.replace`` (no
#: ``__post_init__``, every field an ``__init__`` argument, instances with a ``__dict__``), or None.
_CLONE_FIELDS: dict[type, tuple[str, ...] | None] = {}


def _with_sync(
    instruction: Instruction,
    waits: tuple[tuple[str, int], ...],
    signals: tuple[tuple[str, int], ...],
    owned: bool = False,
) -> Instruction:
    """``dataclasses.replace(instruction, waits=..., signals=...)``, a few times faster.

    For the classes where it is the same thing: ``replace`` builds a new object through
    ``__init__`` from every field, which for them only assigns the fields. ``owned``: nothing
    else holds ``instruction`` (nor has hashed it), so it may be changed in place instead.
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
    if owned:
        values["waits"] = waits
        values["signals"] = signals
        return instruction
    clone = object.__new__(cls)
    # The fields alone (no cached attributes such as a twin): copy them at once.
    state = values.copy() if len(values) == len(names) else {n: values[n] for n in names}
    state["waits"] = waits
    state["signals"] = signals
    clone.__dict__.update(state)
    return clone


def warm_up() -> None:
    """Compile (or load from Numba's on-disk cache) the deferred builder's pass, on a program of
    one ``memset``: what ``hwsim.kernels.warm_up`` does for the numerics kernels, so that a
    sweep's workers load the pass instead of each compiling it (about 20 s) at its first build."""
    from hwsim.dtypes import FP32
    from hwsim.isa.vector_ops import Memset

    builder = ProgramBuilder(deferred=True)
    dst = AccessPattern(MemorySpace.SBUF, FP32, 0, 1, 0, (1,), (1,))
    builder.emit(Memset(engine="vector", dst=dst, value=0.0), owned=True)
    builder.build()
