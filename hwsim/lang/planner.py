"""The kernel's memory planner: what the Neuron compiler does when the tiles do not fit.

While a kernel runs, each on-chip tile is placed first-fit when it is allocated and freed when
its Python object dies (``hwsim.lang.allocator``); instructions go straight to the builder.
That is the whole story for a kernel that fits, so its addresses and timing never depend on this
module. The first allocation that does not fit switches the kernel to deferred mode: from then
on allocations, frees and instructions are recorded, and when the kernel function returns the
planner replays them knowing the whole program, so it knows every tile's next and last use:

1. A tile takes memory at its first use (the instruction that first writes it), not where it
   was allocated, and a tile never used takes none.
2. A tile whose last use has passed is dead even if Python still holds it: when room is needed,
   every such tile is freed first (the tile's memory is released at the end of its last use).
3. If that is not enough, a live tile leaves SBUF, chosen, stored and brought back by the spill
   policy (``hwsim.lang.spill_policy``: re-read an input, refill a constant, or spill to HBM;
   Belady's choice of victim; loads deferred to their use when they would only push out tiles
   needed sooner). Instructions after a tile came back address its new place.
4. A PSUM tile leaves PSUM the same way, chosen by the same rule, but DMA cannot reach PSUM:
   a VectorE copy moves its contents to an SBUF tile (which may itself be spilled to HBM) and
   another copies them back before its next use (a constant is refilled instead). This is an
   assumption: how neuronx-cc moves PSUM tiles out is not documented.
5. If the operands of one instruction alone do not fit, the kernel is rejected, as NKI rejects
   it, with an ``OutOfMemoryError`` naming the kernel line.

Spill traffic is ordinary, timed DMA (PSUM's, VectorE copies): the builder orders it like any
other access (RAW/WAR/WAW on the addresses involved), it shows in the trace with the tags
``spill:``, ``reload:``, ``reread:``, ``refill:``, ``psum-out:`` and ``psum-in:`` and the tile,
and ``BuiltKernel.spill`` / the run summary count it (in total and per tile: ``sbuf_spill``,
``sbuf_spill_by_tile``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hwsim.dtypes import DType
from hwsim.isa.ap import AccessPattern, MemorySpace, contiguous
from hwsim.isa.base import Instruction
from hwsim.isa.dma_ops import DmaCopy
from hwsim.isa.origin import Tag
from hwsim.lang.allocator import (
    Block,
    OutOfMemoryError,
    Pool,
    least_recent_cover,
    placement_starts,
)
from hwsim.lang.spill_policy import (
    Backing,
    PsumCopy,
    SpillStats,
    SpillStore,
    TileSlot,
    backing_of,
    last_fills,
    remade,
    spill_dma,
    victim,
    whole,
)

if TYPE_CHECKING:
    from hwsim.lang.kernel import KernelContext

__all__ = ["MemoryPlanner", "SpillStats", "SpillStore", "TileSlot"]


Event = tuple[Any, ...]
#: ``MemoryPlanner.bank_last_use`` of a PSUM bank no instruction used, and of one used only
#: before the kernel was deferred (its event indices start at 0).
NEVER_USED, BEFORE_DEFERRAL = -2, -1


class MemoryPlanner:
    """Records the rest of a kernel from its first failed allocation, then places its tiles."""

    def __init__(self, context: KernelContext) -> None:
        self.context = context
        self.events: list[Event] = []
        self.slots: dict[int, TileSlot] = {}  # by id(block)
        #: On-chip tiles by pool memory, by id(slot).
        self.resident: dict[str, dict[int, TileSlot]] = {}
        self.stats = SpillStats()
        #: HBM tensors the kernel writes, and those it never writes (a tile copied from one
        #: of these can be read again).
        self.written_hbm: set[str] = set()
        self.read_only: set[str] = set()
        #: PSUM bank (by byte offset) -> event index of the last use of the tile that held it
        #: last (``_place_rotating``).
        self.bank_last_use: dict[int, int] = {}
        #: The event being placed (its index in ``events``).
        self.now = 0

    # ---- recording (while the kernel function runs) -----------------------------------------
    def adopt(self, block: Block, dtype: DType, elements: int, memory: MemorySpace) -> None:
        """A tile placed before deferral: resident where the eager allocator put it."""
        slot = TileSlot(block, dtype, elements, memory, place=block, holds_data=True)
        slot.last_start = block.start_partition
        self.slots[id(block)] = slot
        self.resident.setdefault(block.memory, {})[id(slot)] = slot

    def find_fills(self, emitted: list[Instruction]) -> None:
        """The program before deferral: which instruction last filled each tile placed then
        (``spill_policy.last_fills``), and which HBM tensors it wrote."""
        placed = [s for s in self.slots.values() if s.place is not None]
        for slot, fill in last_fills(emitted, placed).items():
            slot.filled_by = fill
        self.written_hbm.update(
            ap.tensor for i in emitted for ap in i.writes() if ap.memory is MemorySpace.HBM
        )
        granule = self.context.pools[MemorySpace.PSUM].granule
        for ap in (ap for i in emitted for ap in (*i.reads(), *i.writes())):
            if ap.memory is MemorySpace.PSUM:  # used before deferral: after never-used banks
                first, end = ap.byte_span()
                for bank in range(first - first % granule, end, granule):
                    self.bank_last_use[bank] = BEFORE_DEFERRAL

    def record_alloc(self, block: Block, dtype: DType, elements: int, memory: MemorySpace) -> None:
        self.slots[id(block)] = TileSlot(block, dtype, elements, memory)
        self.events.append(("alloc", block))

    def record_free(self, block: Block) -> None:
        self.events.append(("free", block))

    def record_call(self, fn: Callable[[], None]) -> None:
        self.events.append(("call", fn))

    def record_emit(self, instruction: Instruction, operands: list[tuple[str, Block]]) -> None:
        """An instruction with the (field, tile block) of each on-chip tile operand, and where
        the block was when its access patterns were made."""
        placed = tuple((name, b, b.start_partition, b.offset) for name, b in operands)
        self.events.append(("emit", instruction, placed))

    # ---- planning (when the kernel function has returned) -----------------------------------
    def run(self) -> None:
        self._index_uses()
        self.read_only = set(self.context.builder.program.hbm) - self.written_hbm
        for slot in self.slots.values():
            if slot.filled_by is not None and slot.place is not None:
                instruction, name = slot.filled_by
                place = slot.place
                slot.backing = backing_of(
                    instruction, name, slot, place.start_partition, place.offset, self.read_only
                )
        for index, event in enumerate(self.events):
            kind = event[0]
            if kind == "free":
                freed = self.slots.get(id(event[1]))
                if freed is not None:
                    freed.dead = True
                    self._release(freed)
            elif kind == "call":
                event[1]()
            elif kind == "emit":
                self._emit(index, event[1], event[2])

    def _index_uses(self) -> None:
        """Every tile's uses (and whether each needs the contents), and the HBM tensors the
        kernel writes."""
        for index, event in enumerate(self.events):
            if event[0] != "emit":
                continue
            instruction = event[1]
            writes = {id(ap) for ap in instruction.writes()}
            reads = {id(ap) for ap in instruction.reads()}
            for ap in instruction.writes():
                if ap.memory is MemorySpace.HBM:
                    self.written_hbm.add(ap.tensor)
            for name, block, _, _ in event[2]:
                slot = self.slots.get(id(block))
                if slot is None:
                    continue
                ap = getattr(instruction, name)
                needs = id(ap) in reads or id(ap) not in writes or not whole(slot, ap)
                if slot.uses and slot.uses[-1][0] == index:
                    slot.uses[-1][1] = slot.uses[-1][1] or needs
                else:
                    slot.uses.append([index, needs])

    def _emit(self, index: int, instruction: Instruction, placed: tuple[Any, ...]) -> None:
        self.now = index
        slots = [self.slots[id(block)] for _, block, _, _ in placed]
        written_ids = {id(ap) for ap in instruction.writes()}
        read_ids = {id(ap) for ap in instruction.reads()}
        writes = [id(getattr(instruction, name)) in written_ids for name, _, _, _ in placed]
        if self._defer_load(index, instruction, placed, slots):
            return
        pinned = tuple(slots)
        for (name, _, _, _), slot, writing in zip(placed, slots, writes, strict=True):
            if slot.place is None:
                self._place(slot, pinned, instruction)
                ap = getattr(instruction, name)
                overwritten = writing and id(ap) not in read_ids and whole(slot, ap)
                if slot.holds_data and not overwritten:
                    self._bring_back(slot, pinned)
                if slot.psum_copy is not None:  # overwritten whole: its copy is not needed
                    self._drop_psum_copy(slot)
        instruction = self._relocated(instruction, placed, slots)
        for (name, _, _, _), slot, writing in zip(placed, slots, writes, strict=True):
            if writing:  # its spill copy is stale; backed only if filled whole (spill_policy)
                place = slot.place
                assert place is not None
                slot.holds_data, slot.spill_current = True, False
                slot.backing = backing_of(
                    instruction, name, slot, place.start_partition, place.offset, self.read_only
                )
        for slot in slots:
            slot.last_used = index
            if slot.uses and slot.next_use == index:
                slot.uses.popleft()
        self.context.emit_placed(instruction)

    @staticmethod
    def _relocated(
        instruction: Instruction, placed: tuple[Any, ...], slots: list[TileSlot]
    ) -> Instruction:
        """The instruction with each tile operand addressing where its tile is now."""
        changes: dict[str, AccessPattern] = {}
        moved: dict[int, AccessPattern] = {}  # by id of the old pattern: one object stays one
        for (name, _, start, offset), slot in zip(placed, slots, strict=True):
            place = slot.place
            assert place is not None
            if (place.start_partition, place.offset) == (start, offset):
                continue
            ap = getattr(instruction, name)
            new = moved.get(id(ap))
            if new is None:
                new = moved[id(ap)] = dataclasses.replace(
                    ap,
                    start_partition=ap.start_partition - start + place.start_partition,
                    offset_bytes=ap.offset_bytes - offset + place.offset,
                )
            changes[name] = new
        if not changes:
            return instruction
        return dataclasses.replace(instruction, **changes)  # type: ignore[arg-type]

    def _defer_load(
        self, index: int, instruction: Instruction, placed: tuple[Any, ...], slots: list[TileSlot]
    ) -> bool:
        """A whole-tile load of a read-only input into a tile that is not on chip, which would
        push out only tiles needed before the loaded one's next use, is not issued now: the tile
        is marked backed by it and loaded before that use (Belady with bypass)."""
        if len(slots) != 1 or type(instruction) is not DmaCopy or placed[0][0] != "dst":
            return False
        slot = slots[0]
        if slot.place is not None:
            return False
        start, offset = placed[0][2], placed[0][3]
        backing = backing_of(instruction, "dst", slot, start, offset, self.read_only)
        if backing is None or len(slot.uses) < 2:
            return False
        pool = self._pool(slot)
        if self._fits(slot, pool):
            return False
        later = slot.uses[1][0]
        if any(s.next_use > later for s in self._candidates(pool, (slot,))):
            return False  # something on chip is needed later than this tile: evict that
        deferred = dataclasses.replace(backing, kind="load")
        slot.holds_data, slot.spill_current, slot.backing = True, False, deferred
        slot.uses.popleft()
        self.stats.deferred_loads += 1
        self.stats.tile(slot.label).deferred_loads += 1
        return True

    def _pool(self, slot: TileSlot) -> Pool:
        return self.context.pools[slot.memory]

    def _fits(self, slot: TileSlot, pool: Pool) -> bool:
        """Whether ``slot`` fits now, freeing tiles whose contents are not read again as
        ``_place`` would (they are not needed either way)."""
        block = slot.block
        args = (block.name, block.size, block.where, block.partitions or None, slot.last_start)
        trial = pool.try_allocate(*args) or self._reuse_dead(pool, (), args)
        if trial is None:
            return False
        pool.free(trial)
        return True

    def _place(
        self, slot: TileSlot, pinned: tuple[TileSlot, ...], at: Instruction | None = None
    ) -> None:
        """Find room for ``slot``: free what is dead by last use, then evict, else reject."""
        pool = self._pool(slot)
        block = slot.block
        rows = block.partitions or None
        args = (block.name, block.size, block.where, rows, slot.last_start)
        if pool.memory == MemorySpace.PSUM.value:
            place = self._place_rotating(pool, pinned, block.name, block.size, block.where)
        else:
            place = pool.try_allocate(*args)
        if place is None:
            place = self._reuse_dead(pool, pinned, args)
        while place is None:
            after = slot.uses[1][0] if len(slot.uses) > 1 else math.inf
            chosen = victim(self._candidates(pool, pinned), after)
            if chosen is None:
                raise OutOfMemoryError(self._reject_message(slot, pinned, at))
            self._evict(chosen, pinned)
            place = pool.try_allocate(*args)
        slot.last_start = place.start_partition
        slot.place = place
        self.resident.setdefault(pool.memory, {})[id(slot)] = slot
        self.context.builder.note_allocation(
            slot.memory,
            block.name,
            place.start_partition,
            block.tile_partitions,
            place.offset,
            block.size,
        )

    def _place_rotating(
        self, pool: Pool, pinned: tuple[TileSlot, ...], name: str, size: int, where: str
    ) -> Block | None:
        """A PSUM tile on the banks whose last tile was used longest ago (first fit among
        equals), not on the lowest free bank: the compiler rotates PSUM tiles through the 8
        banks (the NKI API reference: ``nki.compiler.AllocationMode.RING`` "in PSUM, rotates
        through the 8 banks"; ``nki.compiler.AddressRotation.AUTO``, the default, keeps the
        backend's address rotation on for the tiles it allocates), so the first matmul of one
        iteration's group does not wait for VectorE to evacuate the bank of the previous one (a
        write-after-read); first fit would hand every iteration the bank just released. Banks
        held by tiles whose contents are not read again (dead, though Python still holds them)
        take part in the rotation as free ones do."""
        need = pool.rounded(size)
        dead = {
            id(s.place): s
            for s in self._resident(pool)
            if s.place is not None and not s.contents_needed and s not in pinned
        }
        live = [b for b in pool.blocks if id(b) not in dead]
        best: tuple[int, int] | None = None
        for offset in range(0, pool.capacity - need + 1, pool.granule):
            trial = Block(pool.memory, name, offset, need, where, True, 0, 0)
            if any(b.overlaps(trial, pool.partitions) for b in live):
                continue
            last = [
                self.bank_last_use.get(b, NEVER_USED)
                for b in range(offset, offset + need, pool.granule)
            ]
            covered = [
                s for s in dead.values() if s.place is not None and s.place.overlaps(trial, 0)
            ]
            last += [max(s.last_used, BEFORE_DEFERRAL) for s in covered]
            key = (max(last), offset)
            if best is None or key < best:
                best = key
        if best is None:
            return None
        trial = Block(pool.memory, name, best[1], need, where, True, 0, 0)
        for slot in list(dead.values()):
            if slot.place is not None and slot.place.overlaps(trial, 0):
                self._free_dead(slot)
        return pool.reserve(name, best[1], need, where)

    def _resident(self, pool: Pool) -> list[TileSlot]:
        """The tiles on chip in ``pool`` now, in the order they were placed."""
        return list(self.resident.setdefault(pool.memory, {}).values())

    def _candidates(self, pool: Pool, pinned: tuple[TileSlot, ...]) -> list[TileSlot]:
        """Tiles that may leave ``pool``: any whose contents are needed and that the current
        instruction does not use."""
        return [s for s in self._resident(pool) if s not in pinned and s.contents_needed]

    def _reuse_dead(
        self, pool: Pool, pinned: tuple[TileSlot, ...], args: tuple[Any, ...]
    ) -> Block | None:
        """Place the new tile over tiles whose contents are not read again, where the latest
        use of what it covers is the oldest: the write that fills it then waits for nobody
        (covering a tile just read would chain it to that read), as a compiler rotates buffers
        so that a load of the next iteration overlaps the compute of this one."""
        dead = [s for s in self._resident(pool) if not s.contents_needed and s not in pinned]
        if not dead:
            return None
        name, size, where, rows, _ = args
        need = pool.rounded(size)
        dead.sort(key=lambda s: s.last_used)
        rotate = next(  # the oldest dead buffer of the same allocation site and size
            (
                slot
                for slot in dead
                if slot.place is not None
                and (slot.place.where, slot.place.size, slot.place.partitions)
                == (where, need, rows or 0)
            ),
            None,
        )
        dead_blocks = {id(s.place): s for s in dead}
        live = [b for b in pool.blocks if id(b) not in dead_blocks]
        starts = placement_starts(rows, pool.partitions) if pool.partitions and rows else (0,)
        offsets = sorted(
            {0, *(s.place.offset for s in dead if s.place is not None)}
            | {b.offset + b.size for b in live}
        )
        covers = [(s.place, s.last_used) for s in dead if s.place is not None]
        best = least_recent_cover(
            live, covers, need, rows or 0, starts, offsets, pool.capacity, pool.partitions
        )
        if rotate is not None and (best is None or rotate.last_used <= best[0]):
            old = rotate.place
            assert old is not None
            start, offset = old.start_partition, old.offset
            self._free_dead(rotate)
            return pool.reserve(name, offset, need, where, rows, start)
        if best is None:
            return None
        _, offset, start = best
        trial = Block(pool.memory, name, offset, need, where, True, start, rows or 0)
        for slot in dead:
            if slot.place is not None and slot.place.overlaps(trial, pool.partitions):
                self._free_dead(slot)
        return pool.reserve(name, offset, need, where, rows, start)

    def _free_dead(self, slot: TileSlot) -> None:
        self._release(slot)
        slot.holds_data, slot.spill_current, slot.backing = False, False, None
        self.stats.freed_after_last_use += 1

    def _free_dead_by_last_use(self, pool: Pool, pinned: tuple[TileSlot, ...]) -> None:
        """Free every tile whose contents are not read again: past its last use, or next
        overwritten whole (it takes memory again at that write)."""
        for slot in self._resident(pool):
            if not slot.contents_needed and slot not in pinned:
                self._free_dead(slot)

    def _release(self, slot: TileSlot) -> None:
        if slot.place is not None:
            pool = self._pool(slot)
            if pool.memory == MemorySpace.PSUM.value:
                place = slot.place
                for bank in range(place.offset, place.offset + place.size, pool.granule):
                    used = max(slot.last_used, BEFORE_DEFERRAL)
                    self.bank_last_use[bank] = max(used, self.bank_last_use.get(bank, NEVER_USED))
            pool.free(slot.place)
            slot.place = None
            del self.resident[pool.memory][id(slot)]

    def _evict(self, slot: TileSlot, pinned: tuple[TileSlot, ...] = ()) -> None:
        """Take a live tile off chip: a spill store unless it is backed or its copy current; a
        PSUM tile to an SBUF copy (``_psum_out``)."""
        if slot.memory is MemorySpace.PSUM and slot.backing is None and slot.holds_data:
            self._psum_out(slot, pinned)
            return
        if slot.holds_data and not slot.spill_current and slot.backing is None:
            hbm = self._spill_ap(slot)
            self._dma(SpillStore, slot, "spill", dst=hbm, src=self._on_chip_ap(slot))
            self.stats.stores += 1
            self.stats.bytes_stored += hbm.nbytes
            self.stats.tile(slot.label).stored_bytes += hbm.nbytes
            slot.spill_current = True
        self._release(slot)

    def _psum_out(self, slot: TileSlot, pinned: tuple[TileSlot, ...]) -> None:
        """Copy a PSUM tile's contents to a new SBUF tile (VectorE) and free its banks."""
        sbuf = self.context.pools[MemorySpace.SBUF]
        rows = slot.block.tile_partitions
        nbytes = slot.elements * slot.dtype.itemsize
        block = Block(
            sbuf.memory,
            f"{slot.block.name}.psum_copy",
            0,
            sbuf.rounded(nbytes),
            slot.block.where,
            False,
            0,
            rows,
            slot.dtype,
            slot.elements,
            rows,
        )
        copy = TileSlot(block, slot.dtype, slot.elements, MemorySpace.SBUF)
        copy.uses.append([slot.next_use, True])
        self.slots[id(block)] = copy
        self._place(copy, pinned)
        self._psum_copy(slot, "psum-out", dst=self._on_chip_ap(copy), src=self._on_chip_ap(slot))
        copy.holds_data, copy.last_used = True, self.now
        slot.psum_copy = copy
        self.stats.psum_evictions += 1
        self._release(slot)

    def _drop_psum_copy(self, slot: TileSlot) -> None:
        copy = slot.psum_copy
        assert copy is not None
        copy.uses.clear()
        copy.holds_data, copy.spill_current = False, False
        self._release(copy)
        slot.psum_copy = None

    def _psum_copy(
        self, slot: TileSlot, what: str, *, dst: AccessPattern, src: AccessPattern
    ) -> None:
        tag = f"{self.context.name}:{what}:{slot.label}"
        self.context.emit_placed(PsumCopy(engine="vector", tag=tag, dst=dst, src=src))
        self.stats.tile(slot.label).psum_copied_bytes += dst.nbytes

    def _bring_back(self, slot: TileSlot, pinned: tuple[TileSlot, ...] = ()) -> None:
        """Re-make a tile's contents where it was just placed: the load that was deferred, a
        re-read, a refill, a reload from the spill area, or a PSUM tile's copy back from SBUF."""
        if slot.psum_copy is not None:
            copy = slot.psum_copy
            if copy.place is None:  # spilled to HBM meanwhile: back to SBUF first
                self._place(copy, (*pinned, slot))
                self._bring_back(copy)
            self._psum_copy(slot, "psum-in", dst=self._on_chip_ap(slot), src=self._on_chip_ap(copy))
            self.stats.psum_restores += 1
            self._drop_psum_copy(slot)
            return
        traffic = self.stats.tile(slot.label)
        backing = slot.backing
        if backing is None or slot.spill_current:
            hbm = self._spill_ap(slot)
            self._dma(DmaCopy, slot, "reload", dst=self._on_chip_ap(slot), src=hbm)
            self.stats.reloads += 1
            self.stats.bytes_reloaded += hbm.nbytes
            traffic.reloaded_bytes += hbm.nbytes
            slot.spill_current = True
            return
        again = remade(backing, slot, slot.label)
        self.context.emit_placed(again)
        if backing.kind == "refill":
            self.stats.refills += 1
            traffic.refills += 1
        elif backing.kind == "reread":
            nbytes = slot.block.tile_partitions * slot.elements * slot.dtype.itemsize
            self.stats.rereads += 1
            self.stats.bytes_reread += nbytes
            traffic.reread_bytes += nbytes
        place = slot.place
        assert place is not None
        kind = "reread" if backing.kind == "load" else backing.kind
        slot.backing = Backing(kind, again, backing.field, place.start_partition, place.offset)

    def _dma(
        self,
        kind: type[DmaCopy],
        slot: TileSlot,
        what: str,
        *,
        dst: AccessPattern,
        src: AccessPattern,
    ) -> None:
        tag = f"{self.context.name}:{what}:{slot.label}"
        self.context.emit_placed(spill_dma(kind, self.context, tag, dst=dst, src=src))

    def _on_chip_ap(self, slot: TileSlot) -> AccessPattern:
        place = slot.place
        assert place is not None
        return contiguous(
            slot.memory,
            slot.dtype,
            slot.block.tile_partitions,
            slot.elements,
            start_partition=place.start_partition,
            offset_bytes=place.offset,
        )

    def _spill_ap(self, slot: TileSlot) -> AccessPattern:
        rows = slot.block.tile_partitions
        if slot.spill_tensor is None:
            name = f"spill.{slot.block.name}"
            taken = self.context.builder.program.hbm
            if name in taken:  # tiles may share a name (name= in a loop)
                name = f"{name}.{sum(t.startswith(name) for t in taken)}"
            slot.spill_tensor = name
            self.context.builder.program.add_tensor(
                slot.spill_tensor, (rows, slot.elements), slot.dtype, "scratch"
            )
        return contiguous(
            MemorySpace.HBM, slot.dtype, rows, slot.elements, tensor=slot.spill_tensor
        )

    def _reject_message(
        self, slot: TileSlot, pinned: tuple[TileSlot, ...], at: Instruction | None
    ) -> str:
        pool = self._pool(slot)
        block = slot.block
        base = pool.oom_message(block.name, block.size, block.where, block.partitions or None)
        names = ", ".join(s.block.name for s in pinned) or block.name
        which = f"{at.OPCODE} at {_location(at.tag)}" if at is not None else "one instruction"
        return (
            f"{base}. Spilling cannot help: the operands of {which} ({names}) do not fit "
            f"together in {pool.memory.upper()}; use smaller tiles"
        )


def _location(tag: str) -> str:
    """The source line a tag names (a tag written by hand: its text after the first colon)."""
    return tag.location if isinstance(tag, Tag) else tag.split(":", 1)[-1]
