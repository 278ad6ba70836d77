"""On-chip residency across ops: store-to-load forwarding and store elision at the DMA queues.

Every lowering moves its operands with ``ctx.queues``: it stores each result tile from SBUF to
an HBM region and the next op loads its inputs back. ``ResidentQueues`` remembers what each
store left on chip, so values stay in SBUF between ops without rewriting the lowerings:

- **forwarding**: a store of SBUF tile T to HBM region R is recorded; a later
  ``load_resident(dst, R)`` of exactly R (same tensor and access pattern, same dtype on chip, in
  HBM and in ``dst``, so no cast is skipped; ``dst`` of T's shape on T's partitions) returns T
  itself and moves nothing. The caller uses what it returns (``src = load_resident(src, ap)``);
  plain ``load`` always moves data, so a call site that does not opt in stays correct. A load
  the tile cannot be handed out for (``dst`` in another float dtype: a matmul's operand under
  auto-cast, or another shape) is an engine copy from it, with the cast the DMA would do.
- **never stale**: every instruction the kernel emits passes ``_emit`` first. One that writes
  bytes of T or of R drops the record (and a store still pending is emitted before it), so a
  record exists only while T and R are known to hold the same values.
- **lifetimes**: a record holds T's tile, which keeps its SBUF allocated (a ring buffer that
  hands the slot out again writes it, which drops the record). Held tiles stay within
  ``budget_bytes`` per partition (oldest released first) and are released when the graph value
  dies (``release_dead``: the lifetimes of ``bridge.memory_plan``).
- **store elision**: a store to a value of the graph that is not an output (``deferrable``) is
  not emitted at once: it is captured and emitted just before the first instruction that reads
  or writes R, or writes T (or when its record is released early). If the value dies with the
  store still pending, every reader was forwarded and its HBM bytes are never written: the
  store is dropped. Nothing reads those bytes, so initcheck, the race check and the trace never
  see them.
- **back-off**: once the kernel overflows SBUF (the memory planner defers it,
  ``hwsim.lang.planner``), residency stops (pending stores are emitted, records dropped): the
  planner then owns placement.

Residency off (``enabled=False``) is exactly ``DmaQueues``. (A package of its own, so the
kernel language's source walk can skip it: tags keep naming the lowering's line.)
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from hwsim import lang
from hwsim.bridge.residency.broadcast import RowBroadcaster, broadcasts
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import Instruction
from hwsim.isa.regions import Region, region_of
from hwsim.lang import isa as nisa
from hwsim.lang.kernel import KernelContext, current, skip_frames_of
from hwsim.lang.tiles import Tile, View, as_ap
from hwsim.library.common import BufferRing, DmaQueues, Operand, Source


@dataclass(eq=False)  # identity: one store
class _Record:
    """What one store left on chip: HBM region ``hbm`` holds the values of SBUF operand
    ``operand`` (still unwritten since), and, if ``pending``, the store not emitted yet."""

    key: AccessPattern  # the store's HBM access pattern
    hbm: Region
    operand: Operand
    sbuf_ap: AccessPattern
    sbuf: Region
    tile: Tile
    pending: Instruction | None = None
    pending_tiles: tuple[tuple[str, Tile], ...] = ()


@dataclass
class ResidencyStats:
    """What residency did to one program."""

    stores_recorded: int = 0  # stores whose tile was kept as the value's on-chip copy
    loads_forwarded: int = 0
    bytes_forwarded: int = 0
    loads_missed: int = 0  # load_resident calls that had to move data
    loads_copied: int = 0  # plain loads served by an on-chip copy instead of a DMA
    stores_elided: int = 0
    bytes_elided: int = 0
    #: HBM tensors (values and weights) at least one load of which was served on chip.
    values_resident: set[str] = field(default_factory=set)
    sbuf_bytes_held_peak: int = 0  # per partition
    #: Resident values given up because an op's own tile needed their SBUF.
    records_reclaimed: int = 0
    backed_off: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "values_resident": len(self.values_resident)}


#: Instructions this module emits on a lowering's behalf are tagged with the lowering's line
#: (the one that called ``ctx.queues``), as before residency: the source walk skips this package.
skip_frames_of(os.path.dirname(os.path.abspath(__file__)))

#: The engine that copies a forwarded tile into a load's own destination: GpSimdE, which in
#: bridge programs only triggers stores, so the copy takes no time from VectorE/ScalarE work.
COPY_ENGINE = "gpsimd"


def _ap(operand: Source) -> AccessPattern:
    return operand if isinstance(operand, AccessPattern) else as_ap(operand, "DMA operand")


def _free_shape(ap: AccessPattern) -> tuple[int, ...]:
    """The free dims of an on-chip pattern with size-1 dims dropped (the element order)."""
    return tuple(n for n in ap.free_sizes if n != 1)


def _key(ap: AccessPattern) -> AccessPattern:
    """A canonical form of an HBM pattern: the same elements in the same order compare equal
    (size-1 dims dropped, contiguous dims merged, the partition stride of one row ignored)."""
    dims: list[tuple[int, int]] = []
    for n, s in zip(ap.free_sizes, ap.free_strides, strict=True):
        if n == 1:
            continue
        if dims and dims[-1][1] == s * n:  # outer dim steps exactly over this one: merge
            outer_n, _ = dims.pop()
            dims.append((outer_n * n, s))
        else:
            dims.append((n, s))
    if not dims:
        dims = [(1, 1)]
    sizes = tuple(n for n, _ in dims)
    strides = tuple(s for _, s in dims)
    stride = ap.partition_stride if ap.partitions > 1 else 0
    return AccessPattern(
        ap.memory, ap.dtype, 0, ap.partitions, ap.offset_bytes, sizes, strides, stride, ap.tensor
    )


def _flat(ap: AccessPattern) -> AccessPattern | None:
    """An on-chip pattern whose free dims are dense row-major, as [P, elements]; None if not."""
    step = 1
    for n, stride in reversed(tuple(zip(ap.free_sizes, ap.free_strides, strict=True))):
        if n != 1 and stride != step:
            return None
        step *= n
    return replace(ap, free_sizes=(ap.free_elements,), free_strides=(1,))


def _columns(flat: AccessPattern, first: int, end: int) -> AccessPattern:
    """Columns [first, end) of a [P, elements] pattern."""
    return replace(
        flat,
        offset_bytes=flat.offset_bytes + first * flat.dtype.itemsize,
        free_sizes=(end - first,),
    )


def _box(key: AccessPattern) -> tuple[int, int, int, int, int] | None:
    """A canonical pattern whose rows are dense runs, as (row pitch, first row, end row, first
    byte, end byte) within a row; None for any other pattern."""
    if key.free_strides != (1,) or (
        key.partitions > 1 and key.partition_stride < key.free_sizes[0]
    ):
        return None
    region = region_of(0, key)
    return (region.row_bytes, region.row0, region.row1, region.col0, region.col1)


def _injective(ap: AccessPattern) -> bool:
    """Whether no two elements of ``ap`` share an address (a store through it is invertible)."""
    dims = [(ap.partition_stride, ap.partitions)] if ap.partitions > 1 else []
    dims += [(s, n) for s, n in zip(ap.free_strides, ap.free_sizes, strict=True) if n > 1]
    extent = 1
    for stride, count in sorted(dims):
        if stride < extent:
            return False
        extent = stride * (count - 1) + extent
    return True


class ResidentQueues(DmaQueues):
    """``DmaQueues`` with store-to-load forwarding and store elision (module docstring)."""

    def __init__(
        self,
        load_queues: int = 2,
        *,
        enabled: bool = True,
        budget_bytes: int = 0,
        broadcast_rows: bool = False,
        weight_stream: bool = False,
        row_pool_bytes: int = 0,
    ):
        super().__init__(load_queues=load_queues)
        #: With a weight stream (``tiling.weights``) the Sync engine triggers weight DMAs only;
        #: every other load is triggered by ``store_engine`` (in data order with the stores),
        #: so no load waits behind a weight DMA waiting for its slot.
        self.load_engine = self.store_engine if weight_stream else "sync"
        self.enabled = enabled
        #: Partition broadcasts of wide rows go on chip (``residency.broadcast``; the
        #: ``row_broadcast`` lowering pass); ``stream``: the weight stream, which moves the
        #: rows of graph inputs (biases, gammas) ahead of their use.
        self.broadcast_rows = broadcast_rows
        #: ``row_pool_bytes``: per partition, the pool rows of graph inputs stay in (the
        #: context reserved it; 0: every row moves into a tile of its own when needed).
        self.broadcaster = RowBroadcaster(
            self._load_row, set(), self._load_constant, pool_bytes=row_pool_bytes
        )
        self.budget_bytes = budget_bytes
        self.stats = ResidencyStats()
        #: HBM tensors whose stores may be deferred and elided (graph values, not outputs).
        self.deferrable: set[str] = set()
        self._records: dict[AccessPattern, _Record] = {}
        self._by_tensor: dict[str, list[_Record]] = {}
        self._held: dict[int, tuple[Tile, int]] = {}  # id(tile) -> (tile, records on it)
        self._held_bytes = 0
        self._capture: list[tuple[Instruction, Any]] | None = None
        self._flushing = False
        self._context: KernelContext | None = None
        self._inner_emit: Any = None
        if enabled:
            context = self._context = current()
            self._inner_emit = context.emit
            context.emit = self._emit  # type: ignore[method-assign]
            context.reclaimers.append(self._reclaim)

    # ---- the lowerings' calls ---------------------------------------------------------------
    def load_resident(self, dst: Operand, src: Source, *, engine: str = "sync") -> Operand:
        """``load(dst, src)``, or the SBUF tile (or the columns of one) a store left ``src``
        in: use what it returns."""
        if self._active():
            record = self._forwardable(dst, src)
            if record is not None:
                self._hit(record, record.key.nbytes)
                self.stats.loads_forwarded += 1
                return record.operand
            pieces = self._pieces(dst, src)
            if pieces is not None and len(pieces) == 1:  # columns of one resident tile
                record, (a, b), _ = pieces[0]
                self._hit(record, _ap(src).nbytes)
                self.stats.loads_forwarded += 1
                return record.operand[:, a:b]
            self.stats.loads_missed += 1
        self.load(dst, src, engine=engine)
        return dst

    def serves_on_chip(self, dst: Operand, src: Source) -> bool:
        """Whether ``load(dst, src)`` would copy tiles still in SBUF instead of moving HBM
        bytes (nothing is emitted)."""
        if not self._active():
            return False
        if self._forwardable(dst, src, exact_shape=False) is not None:
            return True
        return self._pieces(dst, src, copy=True) is not None

    def load(self, dst: Operand, src: Source, *, engine: str = "sync") -> None:
        """``DmaQueues.load``; with residency, a load of bytes stores or loads left in SBUF
        (float dtypes, same dtype throughout, same partitions) becomes on-chip copies on
        ``COPY_ENGINE`` instead of a DMA (for callers that need the data in ``dst`` itself)."""
        if engine == "sync":
            engine = self.load_engine
        if self._active():
            record = self._forwardable(dst, src, exact_shape=False)
            if record is not None:
                self._hit(record, record.key.nbytes)
                self.stats.loads_copied += 1
                nisa.tensor_copy(dst, record.operand, engine=COPY_ENGINE)
                return
            pieces = self._pieces(dst, src, copy=True)
            if pieces is not None:
                flat = _flat(_ap(dst))
                assert flat is not None
                for record, (a, b), (c, d) in pieces:
                    self._hit(record, 0)
                    nisa.tensor_copy(
                        _columns(flat, c, d), record.operand[:, a:b], engine=COPY_ENGINE
                    )
                self.stats.loads_copied += 1
                self.stats.bytes_forwarded += _ap(src).nbytes
                return
        if self.broadcast_rows and broadcasts(dst, src) and self.broadcaster(dst, src):  # type: ignore[arg-type]
            self._remember_load(dst, src)
            return
        super().load(dst, src, engine=engine)
        self._remember_load(dst, src)

    @property
    def inputs(self) -> set[str]:
        """Graph inputs (weights): never written by the graph, so what a load of one left in
        SBUF stays valid across nodes (until evicted or its tile is written); the broadcaster
        keeps their rows for the program."""
        return self.broadcaster.constants

    @inputs.setter
    def inputs(self, names: set[str]) -> None:
        self.broadcaster.constants = names

    @property
    def rows_broadcast(self) -> int:
        return self.broadcaster.count

    def _load_row(self, dst: Operand, row: AccessPattern) -> None:
        """A row a broadcast replicates, when it is needed."""
        DmaQueues.load(self, dst, row, engine=self.load_engine)

    def _load_constant(self, dst: Operand, row: AccessPattern) -> None:
        """A graph input's row into its place for the program: it depends on nothing, so the
        Sync engine moves it (with the weights, when they stream: ``tiling.weights``)."""
        DmaQueues.load(self, dst, row, engine="sync")

    def load_transposed(self, dst: Operand, src: Source, *, engine: str = "sync") -> None:
        if engine == "sync":
            engine = self.load_engine
        super().load_transposed(dst, src, engine=engine)

    def _hit(self, record: _Record, nbytes: int) -> None:
        self._records[record.key] = self._records.pop(record.key)  # most recently used
        self.stats.bytes_forwarded += nbytes
        self.stats.values_resident.add(record.key.tensor)

    def _remember_load(self, dst: Operand, src: Source) -> None:
        """A DMA just filled ``dst`` from HBM: a later load of the same bytes (a weight or a
        mask read by several ops) can read ``dst`` while neither is written."""
        if not self._active() or not isinstance(dst, (Tile, View)):
            return
        hbm, sbuf = _ap(src), _ap(dst)
        if hbm.memory is not MemorySpace.HBM or sbuf.memory is not MemorySpace.SBUF:
            return
        tile = dst if isinstance(dst, Tile) else dst.tile
        self._add(_Record(_key(hbm), region_of(0, hbm), dst, sbuf, region_of(0, sbuf), tile))

    def store(self, dst: Source, src: Operand) -> None:
        if not self._active() or not isinstance(src, (Tile, View)):
            super().store(dst, src)
            return
        hbm, sbuf = _ap(dst), _ap(src)
        if hbm.memory is not MemorySpace.HBM or sbuf.memory is not MemorySpace.SBUF:
            super().store(dst, src)
            return
        hbm_region = region_of(0, hbm)
        self._before_write(hbm_region)  # earlier stores to these bytes: emitted, forgotten
        if hbm.tensor in self.deferrable:
            self._capture = []
            try:
                super().store(dst, src)
                ((instruction, _),) = self._capture
            finally:
                self._capture = None
        else:
            super().store(dst, src)
            instruction = None
        tile = src if isinstance(src, Tile) else src.tile
        tiles = (("src", tile),)  # what the memory planner must know if it takes over
        if not _injective(hbm):  # a load of R would not give back T
            if instruction is not None:
                self._emit_now(instruction, tiles)
            return
        record = _Record(
            _key(hbm), hbm_region, src, sbuf, region_of(0, sbuf), tile, instruction, tiles
        )
        self.stats.stores_recorded += 1
        self._add(record)

    def holds(self, tile: Tile) -> bool:
        """Whether a record keeps ``tile`` as a value's on-chip copy."""
        return id(tile) in self._held

    def result_ring(self, buffers: int) -> BufferRing:
        """A ring for tiles a lowering stores: a slot whose tile a record still holds (the
        value stays resident) gets a new tile instead of being written over, so residency is
        not bounded by the producer's ring (``ResultRing``)."""
        return ResultRing(buffers, self) if self._active() else BufferRing(buffers)

    def rows_of(self, tensor: str, elements: int) -> int | None:
        """If stores left all of HBM tensor ``tensor`` (``elements`` long) in SBUF as row
        blocks of one row count whose rows make up the tensor, that count: an elementwise
        consumer tiled with as many partitions reads those tiles in place."""
        records = self._by_tensor.get(tensor)
        if not records or not self._active():
            return None
        counts = {r.key.partitions for r in records if _box(r.key) is not None}
        if len(counts) != 1:
            return None
        (rows,) = counts
        pitch = records[0].key.partition_stride
        if rows <= 1 or pitch <= 0 or rows * pitch != elements:
            return None
        return rows

    def release_dead(self, live_tensors: Iterable[str]) -> None:
        """After a node: forget values no later node reads; a store still pending for one was
        never needed (every read was forwarded) and is dropped."""
        live = set(live_tensors) | self.inputs  # graph inputs (weights) never die
        for name in [n for n in self._by_tensor if n not in live]:
            self.forget(name)

    def forget(self, name: str) -> None:
        """Forget the values of tensor ``name``, which no later op reads (``release_dead``)."""
        for record in list(self._by_tensor.get(name, ())):
            if record.pending is not None and name in self.deferrable:
                self.stats.stores_elided += 1
                self.stats.bytes_elided += record.key.nbytes
                record.pending = None
            self._drop(record)

    def finish(self) -> None:
        """The program is complete: emit every store still pending, release every tile."""
        for record in list(self._records.values()):
            self._drop(record)

    # ---- records ----------------------------------------------------------------------------
    def _reclaim(self) -> bool:
        """An op's own tile does not fit: give up the oldest resident value (its pending store
        is emitted first), so values stay on chip only in what the ops' working sets leave,
        instead of the kernel overflowing and residency backing off (``KernelContext.reclaimers``).
        False when nothing is held."""
        if not self._records or self._flushing or self._capture is not None:
            return False
        self._drop(next(iter(self._records.values())))
        self.stats.records_reclaimed += 1
        return True

    def _active(self) -> bool:
        if not self.enabled:
            return False
        assert self._context is not None
        if self._context.planner is not None and not self.stats.backed_off:
            self.stats.backed_off = True  # SBUF overflowed: the planner places tiles now
            self.finish()
        return not self.stats.backed_off

    def _forwardable(
        self, dst: Operand, src: Source, *, exact_shape: bool = True
    ) -> _Record | None:
        """The record whose tile holds exactly what loading ``src`` into ``dst`` would give.
        ``exact_shape``: ``dst`` must have the tile's shape (it is replaced by the tile);
        else the same partitions and elements in the same order (it is copied into)."""
        if not isinstance(dst, (Tile, View)) or not self._records:
            return None
        key = _key(_ap(src))
        record = self._records.get(key)
        if record is None:
            return None
        want = _ap(dst)
        have = record.sbuf_ap
        if want.memory is not MemorySpace.SBUF or have.dtype != key.dtype:
            return None
        if want.start_partition != have.start_partition or want.partitions != have.partitions:
            return None
        if exact_shape:
            same = want.dtype == have.dtype and tuple(dst.shape) == tuple(record.operand.shape)
            return record if same else None
        # An engine copy moves floats exactly, and casts them as the DMA would (round to
        # nearest even): the tile holds the HBM bytes' values, so the copy gives the load's.
        if not (want.dtype.is_float and have.dtype.is_float):
            return None
        return record if _free_shape(want) == _free_shape(have) else None

    def rows_on_chip(self, src: Source, rows: int, align: int) -> list[tuple[Operand, int]] | None:
        """``DmaQueues.rows_on_chip``: the resident tiles whose columns make up ``src``, read
        in place (no copy into a tile of the reader's own)."""
        if not self._active():
            return None
        pieces = self._covering(_key(_ap(src)), 0, rows, _ap(src).dtype, copy=False)
        if pieces is None or any(first % align for _, _, (first, _) in pieces):
            return None
        for record, _, _ in pieces:
            self._hit(record, 0)
        self.stats.loads_forwarded += 1
        self.stats.bytes_forwarded += _ap(src).nbytes
        return [(record.operand[:, a:b], first) for record, (a, b), (first, _) in pieces]

    def _pieces(
        self, dst: Operand, src: Source, *, copy: bool = False
    ) -> list[tuple[_Record, tuple[int, int], tuple[int, int]]] | None:
        """Resident tiles whose columns make up a dense [rows, columns] load into ``dst``
        (``_covering``)."""
        if not isinstance(dst, (Tile, View)):
            return None
        if len(dst.shape) != 2 and (not copy or _flat(_ap(dst)) is None):
            return None
        want = _ap(dst)
        if want.memory is not MemorySpace.SBUF:
            return None
        key = _key(_ap(src))
        return self._covering(key, want.start_partition, want.partitions, want.dtype, copy=copy)

    def _covering(
        self, key: AccessPattern, start_partition: int, partitions: int, dtype: Any, *, copy: bool
    ) -> list[tuple[_Record, tuple[int, int], tuple[int, int]]] | None:
        """Resident tiles whose columns make up the dense [rows, columns] HBM block ``key``:
        per piece, the record, its column range and the matching columns of the block; None
        unless they cover every column. Each tile must sit on partitions [start_partition,
        +partitions) in the block's dtype, and the reader's ``dtype`` must be it too (or,
        ``copy``, both float dtypes, which an engine copy moves exactly)."""
        records = self._by_tensor.get(key.tensor)
        box = _box(key)
        if not records or box is None:
            return None
        if copy and not (dtype.is_float and key.dtype.is_float):
            return None
        if not copy and dtype != key.dtype:  # read in place: no cast may be skipped
            return None
        rows, (c0, c1) = box[:3], box[3:]
        item = key.dtype.itemsize
        usable = [
            (r, b)
            for r in records
            if (b := _box(r.key)) is not None
            and b[:3] == rows
            and b[3] < c1
            and c0 < b[4]
            and r.key.dtype == key.dtype
            and r.sbuf_ap.dtype == key.dtype
            and r.sbuf_ap.start_partition == start_partition
            and r.sbuf_ap.partitions == partitions
            and len(r.operand.shape) == 2
        ]
        pieces, cursor = [], c0
        while cursor < c1:
            covering = [(b[4], r, b) for r, b in usable if b[3] <= cursor < b[4]]
            if not covering:
                return None
            end, record, b = max(covering, key=lambda c: c[0])
            end = min(end, c1)
            pieces.append(
                (
                    record,
                    ((cursor - b[3]) // item, (end - b[3]) // item),
                    ((cursor - c0) // item, (end - c0) // item),
                )
            )
            cursor = end
        return pieces

    def _add(self, record: _Record) -> None:
        old = self._records.get(record.key)
        if old is not None:
            self._drop(old)
        self._records[record.key] = record
        self._by_tensor.setdefault(record.key.tensor, []).append(record)
        tile, count = self._held.get(id(record.tile), (record.tile, 0))
        if count == 0:
            assert tile.block is not None
            self._held_bytes += tile.block.size
        self._held[id(tile)] = (tile, count + 1)
        while self._held_bytes > self.budget_bytes and self._records:
            self._drop(next(iter(self._records.values())))  # the oldest store
        self.stats.sbuf_bytes_held_peak = max(self.stats.sbuf_bytes_held_peak, self._held_bytes)

    def _drop(self, record: _Record) -> None:
        """Forget a record: emit its store if pending, release its tile."""
        if self._records.get(record.key) is not record:
            return
        if record.pending is not None:
            pending, record.pending = record.pending, None
            self._emit_now(pending, record.pending_tiles)
        del self._records[record.key]
        same_tensor = self._by_tensor[record.key.tensor]
        same_tensor.remove(record)
        if not same_tensor:
            del self._by_tensor[record.key.tensor]
        tile, count = self._held[id(record.tile)]
        if count == 1:
            del self._held[id(record.tile)]
            assert tile.block is not None
            self._held_bytes -= tile.block.size
        else:
            self._held[id(record.tile)] = (tile, count - 1)

    def _before_write(self, region: Region) -> None:
        """Bytes of ``region`` are about to be written: records over them are stale."""
        if region.key[0] == "hbm":
            candidates = list(self._by_tensor.get(region.key[1], ()))
            for record in candidates:
                if record.hbm.overlaps(region):
                    self._drop(record)
            return
        for record in list(self._records.values()):
            if record.sbuf.overlaps(region):
                self._drop(record)

    def _before_read(self, region: Region) -> None:
        """HBM bytes of ``region`` are about to be read: pending stores to them go first."""
        for record in self._by_tensor.get(region.key[1], ()):
            if record.pending is not None and record.hbm.overlaps(region):
                pending, record.pending = record.pending, None
                self._emit_now(pending, record.pending_tiles)

    # ---- the kernel's instruction stream ----------------------------------------------------
    def _emit(self, instruction: Instruction, operands: Any = ()) -> Instruction:
        """Every instruction of the kernel passes here before the builder (module docstring)."""
        if self._capture is not None:  # a store being deferred
            self._capture.append((instruction, operands))
            return instruction
        if self._context is not None and self._context.planner is not None:
            self._active()  # the kernel overflowed SBUF just now: back off first
        if self._records and not self._flushing:
            for ap in instruction.reads():
                if ap.memory is MemorySpace.HBM and ap.tensor in self._by_tensor:
                    self._before_read(region_of(0, ap))
            for ap in instruction.writes():
                if ap.memory is MemorySpace.HBM:
                    if ap.tensor in self._by_tensor:
                        self._before_write(region_of(0, ap))
                elif ap.memory is MemorySpace.SBUF:
                    self._before_write(region_of(0, ap))
        return self._inner_emit(instruction, operands)

    def _emit_now(self, instruction: Instruction, tiles: tuple[tuple[str, Tile], ...]) -> None:
        """Emit a captured store (its reads and writes were accounted for when captured)."""
        assert self._context is not None
        saved, self._flushing = self._flushing, True
        try:
            if self._context.planner is not None:
                self._inner_emit(instruction, list(tiles))
            else:
                self._inner_emit(instruction)
        finally:
            self._flushing = saved


class ResultRing(BufferRing):
    """``BufferRing`` whose slots give up a tile ``queues`` holds resident: that slot is
    allocated again, and the held tile lives on until its record is released."""

    def __init__(self, buffers: int, queues: ResidentQueues) -> None:
        super().__init__(buffers)
        self.queues = queues

    def __call__(self, shape: Any, dtype: Any, buffer: Any, *, max_shape: Any = None) -> Any:
        if len(self._tiles) >= self.buffers and self.queues.holds(self._tiles[self._next]):
            slot = self._next
            self._tiles[slot] = lang.ndarray(
                self._tiles[slot].shape, self._tiles[slot].dtype, buffer
            )
            self._views = {key: value for key, value in self._views.items() if key[0] != slot}
        return super().__call__(shape, dtype, buffer, max_shape=max_shape)
