"""The kernel's memory planner: what the Neuron compiler does when the tiles do not fit.

While a kernel runs, each on-chip tile is placed first-fit when it is allocated and freed when
its Python object dies (``hwsim.lang.allocator``); instructions go straight to the builder.
That is the whole story for a kernel that fits, so its addresses and timing never depend on this
module. The first allocation that does not fit switches the kernel to deferred mode: from then
on allocations, frees and instructions are recorded, and when the kernel function returns the
planner replays them knowing the whole program, so it knows every tile's next and last use:

1. A tile whose last use has passed is dead even if Python still holds it: when room is needed,
   every such tile is freed first (the tile's memory is released at the end of its last use).
2. If that is not enough, a live tile is spilled: the one whose next use is farthest away
   (Belady's choice, as a register allocator makes it). A DMA stores it to an HBM spill area
   (``spill.<tile>``), and a DMA reloads it, wherever there is room then, just before its next
   use; instructions after the reload address the new place. A tile whose HBM copy is still
   current (not written since its reload) is dropped without a second store.
3. If the operands of one instruction alone do not fit, or PSUM is over-allocated (DMA cannot
   reach PSUM, so PSUM is never spilled), the kernel is rejected, as NKI rejects it, with an
   ``OutOfMemoryError`` naming the kernel line.

Spill traffic is ordinary, timed DMA on the sync engine's queues: the builder orders it like any
other access (RAW/WAR/WAW on the addresses involved), it shows in the trace with the tags
``spill:<tile>`` and ``reload:<tile>``, and ``BuiltKernel.spill`` / the run summary count it.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hwsim.dtypes import DType
from hwsim.isa.ap import AccessPattern, MemorySpace, contiguous
from hwsim.isa.base import Instruction
from hwsim.isa.dma_ops import DmaCopy
from hwsim.lang.allocator import Block, OutOfMemoryError, Pool

if TYPE_CHECKING:
    from hwsim.lang.kernel import KernelContext

#: The engine that triggers spill and reload DMAs: SP (sync) issues no compute, so spills do not
#: occupy an engine the kernel computes on.
SPILL_ENGINE = "sync"


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
    uses: deque[int] = field(default_factory=deque)  # event indices of its future uses
    place: Block | None = None  # where it is now (None: not resident)
    holds_data: bool = False
    spill_tensor: str | None = None
    spill_current: bool = False  # the HBM copy equals the on-chip contents
    dead: bool = False  # its Python object died
    #: The partition it started at when last placed: a reload goes back there if it can, so
    #: instructions that need operands on the same partitions keep them there.
    last_start: int = 0


@dataclass
class SpillStats:
    stores: int = 0
    reloads: int = 0
    bytes_stored: int = 0
    bytes_reloaded: int = 0
    freed_after_last_use: int = 0

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


Event = tuple[Any, ...]


class MemoryPlanner:
    """Records the rest of a kernel from its first failed allocation, then places its tiles."""

    def __init__(self, context: KernelContext) -> None:
        self.context = context
        self.events: list[Event] = []
        self.slots: dict[int, TileSlot] = {}  # by id(block)
        #: On-chip tiles by pool memory, by id(slot).
        self.resident: dict[str, dict[int, TileSlot]] = {}
        self.stats = SpillStats()

    # ---- recording (while the kernel function runs) -----------------------------------------
    def adopt(self, block: Block, dtype: DType, elements: int, memory: MemorySpace) -> None:
        """A tile placed before deferral: resident where the eager allocator put it."""
        slot = TileSlot(block, dtype, elements, memory, place=block, holds_data=True)
        slot.last_start = block.start_partition
        self.slots[id(block)] = slot
        self.resident.setdefault(block.memory, {})[id(slot)] = slot

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
        for index, event in enumerate(self.events):
            if event[0] == "emit":
                for _, block, _, _ in event[2]:
                    slot = self.slots.get(id(block))
                    if slot is not None and (not slot.uses or slot.uses[-1] != index):
                        slot.uses.append(index)
        for index, event in enumerate(self.events):
            kind = event[0]
            if kind == "alloc":
                slot = self.slots[id(event[1])]
                if slot.uses:  # a tile never used needs no memory
                    self._place(slot, pinned=())
            elif kind == "free":
                slot = self.slots.get(id(event[1]))
                if slot is not None:
                    slot.dead = True
                    self._release(slot)
            elif kind == "call":
                event[1]()
            else:
                self._emit(index, event[1], event[2])

    def _emit(self, index: int, instruction: Instruction, placed: tuple[Any, ...]) -> None:
        slots = [self.slots[id(block)] for _, block, _, _ in placed]
        pinned = tuple(slots)
        written = {id(ap) for ap in instruction.writes()}
        read = {id(ap) for ap in instruction.reads()}
        for (name, _, _, _), slot in zip(placed, slots, strict=True):
            if slot.place is None:
                self._place(slot, pinned, instruction)
                ap = getattr(instruction, name)
                overwritten = id(ap) in written and id(ap) not in read and self._whole(slot, ap)
                if slot.holds_data and slot.spill_tensor is not None and not overwritten:
                    self._reload(slot)
        changes: dict[str, AccessPattern] = {}
        moved: dict[int, AccessPattern] = {}  # by id of the old pattern: one object stays one
        for (name, _, start, offset), slot in zip(placed, slots, strict=True):
            ap = getattr(instruction, name)
            if id(ap) in written:
                slot.holds_data = True
                slot.spill_current = False
            place = slot.place
            assert place is not None
            if (place.start_partition, place.offset) == (start, offset):
                continue
            new = moved.get(id(ap))
            if new is None:
                new = moved[id(ap)] = dataclasses.replace(
                    ap,
                    start_partition=ap.start_partition - start + place.start_partition,
                    offset_bytes=ap.offset_bytes - offset + place.offset,
                )
            changes[name] = new
        for slot in slots:
            if slot.uses and slot.uses[0] == index:
                slot.uses.popleft()
        if changes:
            instruction = dataclasses.replace(instruction, **changes)  # type: ignore[arg-type]
        self.context.emit_placed(instruction)

    @staticmethod
    def _whole(slot: TileSlot, ap: AccessPattern) -> bool:
        """Whether ``ap`` (a view of the tile: distinct elements) is every element of it."""
        return ap.partitions == slot.block.tile_partitions and ap.free_elements == slot.elements

    def _pool(self, slot: TileSlot) -> Pool:
        return self.context.pools[slot.memory]

    def _place(
        self, slot: TileSlot, pinned: tuple[TileSlot, ...], at: Instruction | None = None
    ) -> None:
        """Find room for ``slot``: free what is dead by last use, then spill, else reject."""
        pool = self._pool(slot)
        block = slot.block
        rows = block.partitions or None
        args = (block.name, block.size, block.where, rows, slot.last_start)
        place = pool.try_allocate(*args)
        if place is None:
            self._free_dead_by_last_use(pool, pinned)
            place = pool.try_allocate(*args)
        while place is None:
            victim = self._victim(pool, pinned)
            if victim is None:
                raise OutOfMemoryError(self._reject_message(slot, pinned, at))
            self._spill(victim)
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

    def _resident(self, pool: Pool) -> list[TileSlot]:
        """The tiles on chip in ``pool`` now, in the order they were placed."""
        return list(self.resident.setdefault(pool.memory, {}).values())

    def _free_dead_by_last_use(self, pool: Pool, pinned: tuple[TileSlot, ...]) -> None:
        for slot in self._resident(pool):
            if not slot.uses and slot not in pinned:
                self._release(slot)
                self.stats.freed_after_last_use += 1

    def _victim(self, pool: Pool, pinned: tuple[TileSlot, ...]) -> TileSlot | None:
        """The resident tile whose next use is farthest (SBUF only: DMA cannot reach PSUM)."""
        if pool.memory != MemorySpace.SBUF.value:
            return None
        candidates = [s for s in self._resident(pool) if s not in pinned and s.uses]
        if not candidates:
            return None
        return max(candidates, key=lambda s: s.uses[0])

    def _release(self, slot: TileSlot) -> None:
        if slot.place is not None:
            pool = self._pool(slot)
            pool.free(slot.place)
            slot.place = None
            del self.resident[pool.memory][id(slot)]

    def _spill(self, slot: TileSlot) -> None:
        if slot.holds_data and not slot.spill_current:
            hbm = self._spill_ap(slot)
            self._dma(SpillStore, slot, "spill", dst=hbm, src=self._on_chip_ap(slot))
            self.stats.stores += 1
            self.stats.bytes_stored += hbm.nbytes
            slot.spill_current = True
        self._release(slot)

    def _reload(self, slot: TileSlot) -> None:
        hbm = self._spill_ap(slot)
        self._dma(DmaCopy, slot, "reload", dst=self._on_chip_ap(slot), src=hbm)
        self.stats.reloads += 1
        self.stats.bytes_reloaded += hbm.nbytes
        slot.spill_current = True

    def _dma(
        self,
        kind: type[DmaCopy],
        slot: TileSlot,
        what: str,
        *,
        dst: AccessPattern,
        src: AccessPattern,
    ) -> None:
        context = self.context
        tag = f"{context.name}:{what}:{slot.block.name} ({slot.block.where})"
        queue = context.next_queue(SPILL_ENGINE)
        context.emit_placed(kind(engine=SPILL_ENGINE, tag=tag, queue=queue, dst=dst, src=src))

    def _rows(self, slot: TileSlot) -> int:
        return slot.block.tile_partitions

    def _on_chip_ap(self, slot: TileSlot) -> AccessPattern:
        place = slot.place
        assert place is not None
        return contiguous(
            slot.memory,
            slot.dtype,
            self._rows(slot),
            slot.elements,
            start_partition=place.start_partition,
            offset_bytes=place.offset,
        )

    def _spill_ap(self, slot: TileSlot) -> AccessPattern:
        rows = self._rows(slot)
        if slot.spill_tensor is None:
            name = f"spill.{slot.block.name}"
            taken = self.context.builder.program.hbm
            if name in taken:  # tiles may share a name (name= in a loop)
                name = f"{name}.{sum(t.startswith(name) for t in taken)}"
            slot.spill_tensor = name
            self.context.builder.hbm_tensor(
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
        if pool.memory != MemorySpace.SBUF.value:
            return f"{base}. PSUM is not spilled (DMA cannot reach it): free or reuse a PSUM tile"
        names = ", ".join(s.block.name for s in pinned) or block.name
        which = (
            f"{at.OPCODE} at {at.tag.split(':', 1)[-1]}" if at is not None else "one instruction"
        )
        return (
            f"{base}. Spilling cannot help: the operands of {which} ({names}) do not fit "
            f"together in {pool.memory.upper()}; use smaller tiles"
        )


def allocate_block(
    context: KernelContext,
    memory: MemorySpace,
    name: str,
    shape: tuple[int, ...],
    dt: DType,
    where: str,
    offset: int | None,
    defer: bool = True,
) -> Block:
    """The block for a new on-chip tile: first fit now, or (when it does not fit, or the
    kernel is already deferred) a provisional one the planner places later; with
    ``defer=False``, OutOfMemoryError instead if it does not fit now."""
    pool = context.pools[memory]
    size = math.prod(shape[1:]) * dt.itemsize
    rows = shape[0] if pool.partitions else None
    elements = math.prod(shape[1:])
    if offset is not None:
        if context.planner is not None:
            raise OutOfMemoryError(
                f"{where}: {name}: offset= placement is not supported once the kernel "
                "over-allocates (the memory planner moves tiles); drop offset="
            )
        block = pool.reserve(name, offset, size, where, rows)
    else:
        if pool.rounded(size) > pool.capacity:
            raise OutOfMemoryError(
                pool.oom_message(name, size, where, rows)
                + (
                    f". One tile cannot be larger than {memory.value.upper()}'s "
                    f"{pool.capacity} bytes per partition"
                )
            )
        found = pool.try_allocate(name, size, where, rows) if context.planner is None else None
        if found is None and not defer and context.planner is None:
            raise OutOfMemoryError(pool.oom_message(name, size, where, rows))
        if found is None:
            return _deferred_block(context, memory, name, size, where, shape[0], dt, elements)
        block = found
    block.dtype, block.elements, block.tile_partitions = dt, elements, shape[0]
    context.builder.note_allocation(
        memory, name, block.start_partition, shape[0], block.offset, size
    )
    return block


def _deferred_block(
    context: KernelContext,
    memory: MemorySpace,
    name: str,
    size: int,
    where: str,
    rows: int,
    dt: DType,
    elements: int,
) -> Block:
    pool = context.pools[memory]
    if context.planner is None:
        context.planner = MemoryPlanner(context)
        for pools_memory, each in context.pools.items():
            for live in each.blocks:
                context.planner.adopt(live, live.dtype, live.elements, pools_memory)
    block = Block(
        pool.memory,
        name,
        0,
        pool.rounded(size),
        where,
        False,
        0,
        rows if pool.partitions else 0,
        dt,
        elements,
        rows,
    )
    context.planner.record_alloc(block, dt, elements, memory)
    return block
