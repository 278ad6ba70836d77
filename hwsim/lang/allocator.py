"""SBUF and PSUM pools of the kernel language: first-fit allocation with reuse.

A tile reserves a byte range in every partition (``[offset, offset + size)``), like NKI's
allocations. PSUM tiles take whole banks, since a matmul result must sit in one bank [S1].
Blocks are freed when their tile is garbage-collected (CPython frees a tile as soon as nothing
refers to it, e.g. when a loop variable is rebound), so loops reuse memory deterministically;
the builder's dependency tracking then inserts the WAR waits that reuse needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hwsim.errors import HwsimError

#: Allocation granularity in SBUF (bytes per partition). Assumption: keeps every dtype aligned
#: and DMA descriptors on 64-byte boundaries; no source gives the compiler's exact rule.
SBUF_ALIGN_BYTES = 64


class OutOfMemoryError(HwsimError):
    """SBUF or PSUM has no room for a new tile; the message lists the live tiles."""


@dataclass
class Block:
    """A live allocation: [offset, offset + size) bytes per partition."""

    memory: str
    name: str
    offset: int
    size: int
    where: str  # kernel source location of the allocation
    live: bool = True


@dataclass
class Pool:
    """One memory's allocator."""

    memory: str
    capacity: int  # bytes per partition
    granule: int  # allocation unit (64 B in SBUF, one bank in PSUM)
    blocks: list[Block] = field(default_factory=list)  # live, sorted by offset
    peak_bytes: int = 0

    def allocate(self, name: str, size: int, where: str) -> Block:
        need = -(-size // self.granule) * self.granule
        cursor = 0
        for index, block in enumerate(self.blocks):
            if block.offset - cursor >= need:
                return self._insert(index, Block(self.memory, name, cursor, need, where))
            cursor = block.offset + block.size
        if self.capacity - cursor >= need:
            return self._insert(len(self.blocks), Block(self.memory, name, cursor, need, where))
        raise OutOfMemoryError(self._oom_message(name, size, where))

    def reserve(self, name: str, offset: int, size: int, where: str) -> Block:
        """Explicit placement: take [offset, offset + size) if it is free."""
        if offset < 0 or offset + size > self.capacity:
            raise OutOfMemoryError(
                f"{where}: {name} at bytes [{offset}, {offset + size}) is outside {self.memory} "
                f"({self.capacity} bytes per partition)"
            )
        for index, block in enumerate(self.blocks):
            if block.offset < offset + size and offset < block.offset + block.size:
                raise OutOfMemoryError(
                    f"{where}: {name} at bytes [{offset}, {offset + size}) overlaps live tile "
                    f"{block.name} ({block.where})"
                )
            if block.offset > offset:
                return self._insert(index, Block(self.memory, name, offset, size, where))
        return self._insert(len(self.blocks), Block(self.memory, name, offset, size, where))

    def _insert(self, index: int, block: Block) -> Block:
        self.blocks.insert(index, block)
        used = sum(b.size for b in self.blocks)
        self.peak_bytes = max(self.peak_bytes, used)
        return block

    def free(self, block: Block) -> None:
        if block.live:
            block.live = False
            self.blocks.remove(block)

    def _oom_message(self, name: str, size: int, where: str) -> str:
        used = sum(b.size for b in self.blocks)
        free = self.capacity - used
        why = "none of the free space is in one piece" if free >= size else f"only {free} are free"
        live = "; ".join(f"{b.name} {b.size} B at {b.offset} ({b.where})" for b in self.blocks)
        return (
            f"{where}: out of {self.memory.upper()}: {name} needs {size} bytes per partition of "
            f"{self.capacity}, {why}. Live tiles: {live}"
        )
