"""How the memory planner makes room, as the Neuron compiler does: which tile leaves SBUF, what
that costs, and how the tile comes back (``hwsim.lang.planner`` replays the kernel with it).

A tile's contents can be brought back three ways, and the planner takes the cheapest one it has:

- **re-read**: the tile is an unchanged copy of a region of an HBM input (one DMA filled all of
  it and nothing wrote it since, and the kernel never writes that input): leaving costs nothing,
  coming back is the same load again. A spill store of such a tile would copy what HBM already
  holds, so there is none (the compiler prefers re-loading an input over storing and reloading
  a copy of it).
- **refill**: the tile holds a constant (one ``memset`` filled all of it): leaving costs
  nothing, coming back is the same ``memset`` (a few hundred engine cycles, less than a DMA
  round trip through HBM).
- **spill**: anything else. Leaving stores the whole tile to an HBM spill area in one
  contiguous DMA, once per eviction (not again while that copy is current); coming back is one
  contiguous load, before each use that needs it.

Which tile leaves: the one whose next use is farthest (Belady's choice, as a register allocator
makes it), except that one needing no store goes first when it is not needed before the tile
that takes its place. A load that would push out tiles all needed
before its own first use is not issued then (Belady with bypass): it is issued just before that
use, as the compiler schedules a load it has no buffer for yet.

Compiler-made DMAs (spill stores and reloads) have queues of their own: stores are triggered by
ScalarE, reloads by Sync (the profiler's ``qScalarSpillReload`` and ``qSyncSpillReload``
queues, HARDWARE.md §2.5 [S10][S21]), with the hardware DGE where the config has one (on
NeuronCore-v3 each of the two sequencers drives a DGE block [S2][S13]) and host-built
descriptors elsewhere. A re-read repeats the kernel's own load (its engine and queue).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from hwsim.dtypes import DType
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import Instruction
from hwsim.isa.copy_ops import TensorCopy
from hwsim.isa.dma_ops import DgeMode, DmaCopy
from hwsim.isa.origin import Tag
from hwsim.lang.allocator import Block

#: The engines that trigger compiler-made DMAs, with the hardware DGE where there is one: spill
#: stores from ScalarE, reloads and re-reads from Sync (the profiler's qScalarSpillReload and
#: qSyncSpillReload queues [S10][S21]; a NeuronCore-v3 DGE block per sequencer [S2][S13]), each
#: on a queue of its own, so a store that waits for the tile's last writer holds up no load.
STORE_ENGINE, RELOAD_ENGINE = "scalar", "sync"


class PsumCopy(TensorCopy):
    """A PSUM tile moved to SBUF or back by the memory planner (DMA cannot reach PSUM, so an
    engine copies it): copies whatever the tile holds, written or not, so initcheck does not
    count it as a read."""

    def initcheck_reads(self, state: Any) -> tuple[AccessPattern, ...]:
        return ()


class SpillStore(DmaCopy):
    """A spill's store: copies whatever the tile holds, written or not (the compiler does not
    know which bytes a kernel filled), so initcheck does not count it as a read."""

    def initcheck_reads(self, state: Any) -> tuple[AccessPattern, ...]:
        return ()


@dataclass(eq=False)  # identity: a slot is one tile
class TileSlot:
    """The planner's state for one on-chip tile."""

    block: Block  # the tile's record: name, size, partitions, provisional placement
    dtype: DType
    elements: int  # elements per partition
    memory: MemorySpace
    #: Its future uses: [event index, whether that use needs the contents it has then] (it
    #: reads them, or writes only part of the tile); a use that overwrites it all does not.
    uses: deque[list[Any]] = field(default_factory=deque)
    place: Block | None = None  # where it is now (None: not resident)
    holds_data: bool = False
    spill_tensor: str | None = None
    spill_current: bool = False  # the HBM copy equals the on-chip contents
    backing: Backing | None = None  # re-makes the contents without a spill (spill_policy)
    dead: bool = False  # its Python object died
    last_used: int = -1  # event index of its latest use so far
    #: For a tile placed before deferral: (instruction, operand) that last filled it whole.
    filled_by: tuple[Instruction, str] | None = None
    #: The partition it started at when last placed: a reload goes back there if it can, so
    #: instructions that need operands on the same partitions keep them there.
    last_start: int = 0
    #: A PSUM tile's contents while it is out of PSUM: the SBUF tile an engine copied them to.
    psum_copy: TileSlot | None = None

    @property
    def label(self) -> str:
        return f"{self.block.name} ({self.block.where})"

    @property
    def next_use(self) -> int:
        return int(self.uses[0][0])

    @property
    def contents_needed(self) -> bool:
        """Whether what it holds now is read again (its next use needs it)."""
        return bool(self.uses) and bool(self.uses[0][1])


@dataclass(frozen=True)
class Backing:
    """What re-makes a tile's contents without a spill: the instruction that filled all of it
    (a load from an HBM input: ``reread``; a ``memset``: ``refill``; a load not issued yet,
    deferred to the tile's use: ``load``), as it was placed then."""

    kind: str
    instruction: Instruction
    field: str  # the instruction's operand that is the tile
    start_partition: int  # where that operand pointed when the instruction was made
    offset: int


@dataclass
class TileTraffic:
    """Spill traffic of one tile (bytes, and the instructions that re-made it)."""

    stored_bytes: int = 0
    reloaded_bytes: int = 0
    reread_bytes: int = 0
    refills: int = 0
    deferred_loads: int = 0
    psum_copied_bytes: int = 0  # PSUM -> SBUF and back, by engine copies


@dataclass
class SpillStats:
    """What the planner did: stores and reloads through the spill area, re-reads of inputs,
    refills of constants, loads it issued later (deferred), tiles freed after their last use."""

    stores: int = 0
    reloads: int = 0
    bytes_stored: int = 0
    bytes_reloaded: int = 0
    rereads: int = 0
    bytes_reread: int = 0
    refills: int = 0
    deferred_loads: int = 0
    freed_after_last_use: int = 0
    #: PSUM tiles copied out to SBUF (to make room in PSUM) and back.
    psum_evictions: int = 0
    psum_restores: int = 0
    by_tile: dict[str, TileTraffic] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        """The counters (PSUM's only when it spilled: most kernels never do)."""
        return {
            k: v
            for k, v in dataclasses.asdict(self).items()
            if k != "by_tile" and (v or not k.startswith("psum_"))
        }

    def tile(self, name: str) -> TileTraffic:
        found = self.by_tile.get(name)
        if found is None:
            found = self.by_tile[name] = TileTraffic()
        return found

    def tiles_dict(self) -> dict[str, dict[str, int]]:
        """Per tile (``name (kernel line)``), the counters that are not zero."""
        return {
            name: {k: v for k, v in dataclasses.asdict(t).items() if v}
            for name, t in sorted(self.by_tile.items())
        }


def whole(slot: TileSlot, ap: AccessPattern) -> bool:
    """Whether ``ap`` (a view of the tile: distinct elements) is every element of it."""
    return ap.partitions == slot.block.tile_partitions and ap.free_elements == slot.elements


def backing_of(
    instruction: Instruction, name: str, slot: TileSlot, start: int, offset: int, inputs: set[str]
) -> Backing | None:
    """The backing an instruction gives the tile it wrote through ``name``: a whole-tile load
    of a read-only HBM input (``inputs``) or a whole-tile memset; None for any other write."""
    ap = getattr(instruction, name)
    if not whole(slot, ap):
        return None
    if type(instruction) is DmaCopy and name == "dst":
        src = instruction.src
        if src.memory is MemorySpace.HBM and src.tensor in inputs:
            return Backing("reread", instruction, name, start, offset)
        return None
    if instruction.OPCODE == "memset":
        return Backing("refill", instruction, name, start, offset)
    return None


def victim(candidates: list[TileSlot], after: float) -> TileSlot | None:
    """The tile to evict: the farthest next use (Belady); but a tile that needs no store (a
    copy of an input, a constant, or one whose spill copy is current: it leaves free) goes
    first if it is not needed before ``after`` (the next use of the tile that needs the room),
    so a store is paid only where every free choice would come back sooner."""
    if not candidates:
        return None
    free = [s for s in candidates if not needs_store(s) and s.next_use > after]
    return max(free or candidates, key=lambda s: (s.next_use, not needs_store(s)))


def needs_store(slot: TileSlot) -> bool:
    return slot.holds_data and not slot.spill_current and slot.backing is None


def remade(backing: Backing, slot: TileSlot, where: str) -> Instruction:
    """The backing instruction again, writing the tile where it is now (one DMA or memset)."""
    place = slot.place
    assert place is not None
    ap = getattr(backing.instruction, backing.field)
    moved = dataclasses.replace(
        ap,
        start_partition=ap.start_partition - backing.start_partition + place.start_partition,
        offset_bytes=ap.offset_bytes - backing.offset + place.offset,
    )
    tag = backing.instruction.tag
    if backing.kind != "load":  # a deferred load keeps its own tag: it is the kernel's load
        tag = _tag_at(tag, f"{backing.kind}:{where}")
    # without the synchronisation the builder gave the original (it adds this one's own)
    return dataclasses.replace(
        backing.instruction, **{backing.field: moved}, tag=tag, waits=(), signals=()
    )


def spill_dma(
    kind: type[DmaCopy], context: Any, tag: str, *, dst: AccessPattern, src: AccessPattern
) -> DmaCopy:
    """A compiler-made DMA: a store (to HBM) from ScalarE on the last queue, a reload from Sync
    on the one before it (``STORE_ENGINE``), with the hardware DGE where the config has one."""
    dma = context.config.dma
    mode = DgeMode.none if dma.hwdge_ns is None else DgeMode.hwdge
    store = dst.memory is MemorySpace.HBM
    engine = STORE_ENGINE if store else RELOAD_ENGINE
    queue = dma.queues_per_engine - (1 if store else 2)
    return kind(engine=engine, tag=tag, queue=queue, dst=dst, src=src, dge_mode=mode)


def last_fills(
    emitted: list[Instruction], slots: list[TileSlot]
) -> dict[TileSlot, tuple[Instruction, str]]:
    """Of tiles placed before a kernel deferred: (instruction, operand) that last wrote each,
    when that write filled all of it where it is (latest first through the program so far)."""
    found: dict[TileSlot, tuple[Instruction, str]] = {}
    open_ = set(slots)
    for instruction in reversed(emitted):
        if not open_:
            break
        for name, ap in _written_fields(instruction):
            if ap.memory is MemorySpace.HBM:
                continue
            for slot in [s for s in open_ if _overlaps(ap, s)]:
                open_.discard(slot)
                place = slot.place
                assert place is not None
                at = (ap.start_partition, ap.offset_bytes)
                if at == (place.start_partition, place.offset) and whole(slot, ap):
                    found[slot] = (instruction, name)
    return found


def _written_fields(instruction: Instruction) -> list[tuple[str, AccessPattern]]:
    """(field name, pattern) of each operand the instruction writes."""
    written = {id(ap) for ap in instruction.writes()}
    return [
        (f.name, value)
        for f in dataclasses.fields(instruction)
        if id(value := getattr(instruction, f.name)) in written
    ]


def _overlaps(ap: AccessPattern, slot: TileSlot) -> bool:
    """Whether an on-chip pattern touches the bytes of a placed tile."""
    place = slot.place
    assert place is not None
    if ap.memory is not slot.memory:
        return False
    rows = slot.block.tile_partitions
    start = place.start_partition
    if ap.end_partition <= start or start + rows <= ap.start_partition:
        return False
    low, high = ap.byte_span()
    return low < place.offset + place.size and place.offset < high


def _tag_at(tag: str, location: str) -> str:
    """``tag``'s scope and origin at ``location`` (a tag written by hand: its text up to the
    first colon is its scope)."""
    if isinstance(tag, Tag):
        return tag.at(location)
    return f"{tag.split(':', 1)[0]}:{location}"
