"""The dependency graph of a recorded stream: which items must stay ahead of which.

Edges, each from an earlier item to a later one in program order (so program order is always a
topological order):

- **memory** (``RAW``, ``AFTER``): operands whose byte regions overlap (``hwsim.isa.regions``, the
  builder's own overlap rules and index): read after write, and write after read or write. This
  covers PSUM accumulation groups: an accumulating ``nc_matmul`` reads the PSUM bytes it adds to,
  so a group stays in order behind its start, and the next group over the same bytes waits for
  the evacuation that read the last one;
- **engine state** (``ORDER``): instructions naming the same ``ENGINE_STATE`` on one engine
  (accumulator registers, random number generators) keep their program order;
- **barriers** (``ORDER``): every item before a ``Barrier`` stays before every item after it;
- **no_reorder** (``ORDER``): items of one block keep their program order;
- **HBM placement** (``AFTER``): a ``PlaceHbm`` comes after every access so far of the tensors
  whose bytes it takes over, and every later access of the placed tensor after it;
- **DMA queue order** (``ORDER``, optional): transfers of one queue keep their program order.
  Off by default: the builder numbers a queue's completions in the emitted order, so no data
  dependence needs the recorded queue order (the kernel language assigns queues round-robin).
- explicit edges a caller added (``InstructionStream.edge``; NKI's ``with_schedule``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from hwsim.builder import RegionIndex
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import Instruction
from hwsim.isa.regions import Region, region_of
from hwsim.schedule.stream import Barrier, InstructionStream, PlaceHbm

#: Edge kinds, strongest first (a pair joined for several reasons keeps the strongest).
#: RAW: the later item reads what the earlier one wrote (it needs its results).
#: AFTER: the later one overwrites what the earlier one read or wrote (it needs it finished,
#: unless both run in order on one channel).
#: ORDER: the later one only has to come later in its stream.
RAW, AFTER, ORDER = 0, 1, 2


@dataclass
class DependencyGraph:
    """Items (by index in program order) and, per item, its predecessors with the edge kind.

    ``engines[i]`` is the stream item ``i`` goes to, or None for a mark (barrier, placement),
    which has no engine and costs nothing.
    """

    engines: list[str | None]
    preds: list[dict[int, int]]
    _succs: list[list[tuple[int, int]]] | None = None

    def __len__(self) -> int:
        return len(self.engines)

    def successors(self) -> list[list[tuple[int, int]]]:
        """Per item: (successor, edge kind), successors ascending (made once; the graph is not
        changed after it is built)."""
        if self._succs is None:
            succs: list[list[tuple[int, int]]] = [[] for _ in self.engines]
            for node, preds in enumerate(self.preds):
                for pred, kind in preds.items():
                    succs[pred].append((node, kind))
            self._succs = succs
        return self._succs


class _Access:
    """Who last wrote a region (an item index, or -1) and who has read it since."""

    __slots__ = ("live", "readers", "region", "writer")

    def __init__(self, region: Region, writer: int, readers: list[int] | None = None) -> None:
        self.region = region
        self.writer = writer
        self.readers: list[int] = [] if readers is None else readers
        self.live = True


class _Memory:
    """The live accesses of one core, by memory key, findable by overlap."""

    def __init__(self, core: int) -> None:
        self.core = core
        self.indexes: dict[tuple[Any, ...], RegionIndex] = {}
        self.operands: dict[AccessPattern, tuple[Region, RegionIndex, Any]] = {}

    def operand(self, ap: AccessPattern) -> tuple[Region, RegionIndex, Any]:
        facts = self.operands.get(ap)
        if facts is None:
            region = region_of(self.core, ap)
            index = self.indexes.get(region.key)
            if index is None:
                index = self.indexes[region.key] = RegionIndex(region.row_bytes)
            facts = self.operands[ap] = (region, index, index.bin_keys(region))
        return facts

    def overlapping(self, ap: AccessPattern) -> list[_Access]:
        region, index, keys = self.operand(ap)
        return cast(list[_Access], index.overlapping(region, keys))

    def version(self, ap: AccessPattern) -> int:
        return self.operand(ap)[1].version

    def read(self, ap: AccessPattern, node: int, found: list[_Access]) -> None:
        region, index, keys = self.operand(ap)
        if not found:
            index.add(cast(Any, _Access(region, -1, [node])), keys)
        for access in found:
            access.readers.append(node)

    def write(self, ap: AccessPattern, node: int, found: list[_Access]) -> None:
        region, index, keys = self.operand(ap)
        for access in found:
            if region.covers(access.region):
                index.kill(cast(Any, access))
        index.add(cast(Any, _Access(region, node)), keys)

    def tensor_accesses(self, tensor: str) -> list[_Access]:
        index = self.indexes.get(("hbm", tensor))
        return [] if index is None else cast(list[_Access], index.live_accesses())


def build_graph(
    stream: InstructionStream, *, keep_queue_order: bool = False, core: int = 0
) -> DependencyGraph:
    """The dependency graph of ``stream`` (see the module docstring)."""
    items = stream.items
    engines: list[str | None] = []
    preds: list[dict[int, int]] = [{} for _ in items]
    memory = _Memory(core)
    last_barrier = -1
    since_barrier: list[int] = []
    last_state: dict[tuple[str, str], int] = {}
    last_on_queue: dict[int, int] = {}
    last_in_block: dict[int, int] = {}
    placed_at: dict[str, int] = {}  # placed tensor -> its PlaceHbm item
    for before, after in stream.edges:
        _need(preds[after], before, ORDER)
    for node, item in enumerate(items):
        need = preds[node]
        if last_barrier >= 0:
            _need(need, last_barrier, ORDER)
        block = stream.regions[node]
        if block:
            if block in last_in_block:
                _need(need, last_in_block[block], ORDER)
            last_in_block[block] = node
        if isinstance(item, Barrier):
            engines.append(None)
            for earlier in since_barrier:
                _need(need, earlier, ORDER)
            since_barrier = []
            last_barrier = node
            continue
        since_barrier.append(node)
        if isinstance(item, PlaceHbm):
            engines.append(None)
            for tensor in item.earlier:
                for access in memory.tensor_accesses(tensor):
                    _need_access(need, access, node)
            placed_at[item.tensor] = node
            continue
        engines.append(item.engine)
        _memory_edges(memory, item, node, need, placed_at)
        if item.ENGINE_STATE:
            key = (item.engine, item.ENGINE_STATE)
            if key in last_state:
                _need(need, last_state[key], ORDER)
            last_state[key] = node
        if keep_queue_order and item.IS_DMA:
            queue = item.queue  # type: ignore[attr-defined]
            if queue in last_on_queue:
                _need(need, last_on_queue[queue], ORDER)
            last_on_queue[queue] = node
    return DependencyGraph(engines, preds)


def _need(need: dict[int, int], pred: int, kind: int) -> None:
    found = need.get(pred)
    if found is None or kind < found:
        need[pred] = kind


def _need_access(need: dict[int, int], access: _Access, node: int) -> None:
    """``node`` overwrites the access's bytes: it comes after their writer and readers."""
    if access.writer >= 0 and access.writer != node:
        _need(need, access.writer, AFTER)
    for reader in access.readers:
        if reader != node:
            _need(need, reader, AFTER)


def _memory_edges(
    memory: _Memory,
    instruction: Instruction,
    node: int,
    need: dict[int, int],
    placed_at: dict[str, int],
) -> None:
    writes = instruction.writes()
    written = {id(ap) for ap in writes}
    all_reads = instruction.reads()
    reads = [ap for ap in all_reads if id(ap) not in written]
    updated = {id(ap) for ap in all_reads} & written  # read and written in place
    found_reads = [memory.overlapping(ap) for ap in reads]
    found_writes = [(memory.overlapping(ap), memory.version(ap)) for ap in writes]
    for found in found_reads:
        for access in found:
            if access.writer >= 0:
                _need(need, access.writer, RAW)
    for ap, (found, _) in zip(writes, found_writes, strict=True):
        for access in found:
            _need_access(need, access, node)
            if id(ap) in updated and access.writer >= 0:
                _need(need, access.writer, RAW)  # an accumulating matmul reads its PSUM bytes
    if placed_at:
        for ap in (*reads, *writes):
            if ap.memory is MemorySpace.HBM and ap.tensor in placed_at:
                _need(need, placed_at[ap.tensor], AFTER)
    for ap, found in zip(reads, found_reads, strict=True):
        memory.read(ap, node, found)
    for ap, (found, version) in zip(writes, found_writes, strict=True):
        # Recording the reads may have changed the index (an operand read and written).
        memory.write(ap, node, found if memory.version(ap) == version else memory.overlapping(ap))


def check_order(graph: DependencyGraph, order: Sequence[int]) -> None:
    """Fail unless ``order`` is a topological order of ``graph`` (a scheduler's contract)."""
    position = [0] * len(graph)
    for place, node in enumerate(order):
        position[node] = place
    for node, preds in enumerate(graph.preds):
        for pred in preds:
            if position[pred] > position[node]:
                raise AssertionError(
                    f"schedule puts item {node} before item {pred}, which it depends on"
                )
