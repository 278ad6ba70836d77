"""HBM memory planning of a lowered graph: lifetimes, buffer reuse, address assignment, peak.

Every value a lowering computes is an HBM scratch tensor. Without a plan each gets bytes of its
own for the whole program, so a model's HBM footprint is the sum of all its intermediates. With
the plan (on by default; ``lower_graph(memory_plan=False)`` switches it off to measure it):

- **lifetimes** come from the graph: a value is live from the node that computes it to its last
  user (views keep their base alive; graph outputs and inputs are never planned); scratch a
  lowering makes for itself dies with its node;
- **addresses**: each new value gets the best-fitting free block of a scratch arena (freed
  blocks coalesce; the arena grows only when nothing fits), aligned to ``ALIGN_BYTES``;
- **reuse is real for timing**: a value placed over bytes earlier values held has its accesses
  ordered after theirs (``hwsim.lang.place_hbm``), so the first write of a new tenant waits for
  the last read of the old ones — the WAR hazards a real allocator creates are simulated;
- **peak**: the arena's size is the planned scratch peak, reported with the unplanned sum.

Planning is greedy in lowering order (the order the program is emitted in), like a stream
allocator; it does not reorder nodes to reduce the peak.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from torch import fx
from torch.utils import _pytree as pytree

from hwsim.bridge.values import HbmValue
from hwsim.program import Program

#: Placement alignment in the arena. No source gives a DMA alignment rule for HBM; 64 B keeps
#: every placed tensor aligned for any dtype and to common DMA burst sizes (named assumption).
ALIGN_BYTES = 64


def _aligned(nbytes: int) -> int:
    return max(ALIGN_BYTES, -(-nbytes // ALIGN_BYTES) * ALIGN_BYTES)


@dataclass(frozen=True)
class Placement:
    """Where a value went: ``[address, address + size)`` of the arena, and the earlier (dead)
    values whose bytes it reuses."""

    name: str
    address: int
    size: int
    reuses: tuple[str, ...]


@dataclass
class HbmArena:
    """Best-fit allocator over one growing arena, remembering who held which bytes."""

    free_blocks: list[tuple[int, int]] = field(default_factory=list)  # (address, size), sorted
    end: int = 0  # the arena's size so far: the planned peak
    requested_bytes: int = 0  # what the values would take without reuse
    live: dict[str, Placement] = field(default_factory=dict)
    dead: list[Placement] = field(default_factory=list)
    _pruned: int = 0  # dead tenants left by the last prune

    def allocate(self, name: str, nbytes: int) -> Placement:
        size = _aligned(nbytes)
        self.requested_bytes += size
        fits = [(s, a) for a, s in self.free_blocks if s >= size]
        if fits:
            block_size, address = min(fits)  # best fit, lowest address on ties
            self.free_blocks.remove((address, block_size))
            if block_size > size:
                bisect.insort(self.free_blocks, (address + size, block_size - size))
        elif self.free_blocks and self.free_blocks[-1][0] + self.free_blocks[-1][1] == self.end:
            address, _ = self.free_blocks.pop()  # extend the free block at the arena's end
            self.end = address + size
        else:
            address, self.end = self.end, self.end + size
        reuses = tuple(
            p.name for p in self.dead if p.address < address + size and address < p.address + p.size
        )
        placement = Placement(name, address, size, reuses)
        self.live[name] = placement
        return placement

    def free(self, name: str) -> None:
        placement = self.live.pop(name)
        self.dead.append(placement)
        bisect.insort(self.free_blocks, (placement.address, placement.size))
        merged: list[tuple[int, int]] = []
        for address, size in self.free_blocks:  # coalesce neighbours
            if merged and merged[-1][0] + merged[-1][1] == address:
                merged[-1] = (merged[-1][0], merged[-1][1] + size)
            else:
                merged.append((address, size))
        self.free_blocks = merged
        if len(self.dead) > max(64, 2 * self._pruned):
            self._prune()

    def _prune(self) -> None:
        """Forget dead tenants that a later dead tenant covers and reuses: anything placed over
        them later overlaps that tenant too, whose accesses were ordered after theirs."""
        by_name = {p.name: p for p in self.dead}
        covered = {
            old.name
            for p in self.dead
            for old in (by_name.get(n) for n in p.reuses)
            if old is not None
            and p.address <= old.address
            and old.address + old.size <= p.address + p.size
        }
        self.dead = [p for p in self.dead if p.name not in covered]
        self._pruned = len(self.dead)


@dataclass(frozen=True)
class MemoryStats:
    """HBM bytes of a lowered graph: inputs (incl. weights), outputs, and scratch with and
    without the plan; SBUF/PSUM peaks per partition from the kernel language's pools."""

    hbm_input_bytes: int
    hbm_output_bytes: int
    hbm_scratch_peak_bytes: int
    hbm_scratch_unplanned_bytes: int
    sbuf_peak_bytes: int
    psum_peak_bytes: int
    planned: bool

    @property
    def hbm_peak_bytes(self) -> int:
        return self.hbm_input_bytes + self.hbm_output_bytes + self.hbm_scratch_peak_bytes

    def to_dict(self) -> dict[str, int | bool]:
        return {
            "hbm_peak_bytes": self.hbm_peak_bytes,
            "hbm_input_bytes": self.hbm_input_bytes,
            "hbm_output_bytes": self.hbm_output_bytes,
            "hbm_scratch_peak_bytes": self.hbm_scratch_peak_bytes,
            "hbm_scratch_unplanned_bytes": self.hbm_scratch_unplanned_bytes,
            "sbuf_peak_bytes": self.sbuf_peak_bytes,
            "psum_peak_bytes": self.psum_peak_bytes,
            "memory_plan": self.planned,
        }


def memory_stats(
    program: Program, sbuf_peak: int, psum_peak: int, arena: HbmArena | None
) -> MemoryStats:
    """HBM bytes of a built program by kind; scratch as placed (the arena plus anything the plan
    left unplaced) and as it would be unplanned (the sum of every scratch tensor)."""
    by_kind: dict[str, int] = {"input": 0, "output": 0, "scratch": 0}
    unplaced = 0
    for decl in program.hbm.values():
        by_kind[decl.kind] += decl.nbytes
        if decl.kind == "scratch" and decl.address_bytes is None:
            unplaced += decl.nbytes
    return MemoryStats(
        hbm_input_bytes=by_kind["input"],
        hbm_output_bytes=by_kind["output"],
        hbm_scratch_peak_bytes=program.scratch_arena_bytes + unplaced,
        hbm_scratch_unplanned_bytes=by_kind["scratch"],
        sbuf_peak_bytes=sbuf_peak,
        psum_peak_bytes=psum_peak,
        planned=arena is not None,
    )


class Lifetimes:
    """Which values are still needed after each node, for the HBM memory plan."""

    def __init__(self, graph: fx.Graph) -> None:
        order = {node: i for i, node in enumerate(graph.nodes)}
        self.last_use = {
            node: max((order[user] for user in node.users), default=order[node])
            for node in graph.nodes
        }
        self.order = order
        self.outputs: set[fx.Node] = set()
        for node in graph.nodes:
            if node.op == "output":
                leaves = pytree.tree_leaves(node.args[0])
                self.outputs |= {leaf for leaf in leaves if isinstance(leaf, fx.Node)}
        self.live: set[fx.Node] = set()

    def escapes(self, node: fx.Node) -> bool:
        """Whether the node's value is a graph output (it keeps bytes of its own)."""
        return node in self.outputs

    def needed_after(self, node: fx.Node, env: dict[fx.Node, Any]) -> set[str]:
        """HBM tensors that values lowered before ``node`` view and nodes after it still read
        (outputs stay needed); changes nothing (``live_tensors`` does, after the node)."""
        now = self.order[node]
        return {
            leaf.tile.name
            for done in self.live
            if done in self.outputs or self.last_use[done] > now
            for leaf in pytree.tree_leaves(env.get(done))
            if isinstance(leaf, HbmValue)
        }

    def live_tensors(self, done: fx.Node, env: dict[fx.Node, Any]) -> set[str]:
        """HBM tensors that values still needed after ``done`` view (outputs stay needed)."""
        now = self.order[done]
        self.live.add(done)
        self.live = {n for n in self.live if n in self.outputs or self.last_use[n] > now}
        return {
            leaf.tile.name
            for node in self.live
            for leaf in pytree.tree_leaves(env.get(node))
            if isinstance(leaf, HbmValue)
        }
