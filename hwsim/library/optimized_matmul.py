"""The engine of the optimised matmul: blocking plans, stationary-operand loaders, and the
blocked loop nest (``OptimizedMatmul``) that ``matmul_optimized`` and the ``gemm`` workload emit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from hwsim import lang
from hwsim.dtypes import DType
from hwsim.lang import isa as nisa
from hwsim.lang.allocator import SBUF_ALIGN_BYTES
from hwsim.lang.tiles import Tile
from hwsim.library.common import (
    BufferRing,
    DmaQueues,
    Evacuator,
    Limits,
    Operand,
    Source,
    TransposedLoader,
    cdiv,
    chunks,
    limits,
    row_tiles,
)


@dataclass(frozen=True)
class Blocking:
    """How ``OptimizedMatmul`` blocks and buffers a matmul.

    tiles_m/n/k: tiles per block in each dimension (the tutorial's TILES_IN_BLOCK_*).
    psum_groups: PSUM accumulation groups open at once in the kernel's first block. 1 is the
        tutorial's order (each output tile accumulates over the K block, then the next); more
        keeps several output tiles in PSUM banks with K outermost, so TensorE uses each K tile as
        soon as its DMA lands instead of waiting for the whole first block.
    lhs_resident: load the stationary operand once and keep it for every N block (else it is
        reloaded per N block into a double buffer, as the tutorial does).
    rhs_buffers: rhs blocks in SBUF at once (2 = double buffering; more lets loads run ahead).
    rhs_k_tiles_per_dma: K tiles of rhs moved by one DMA (the tutorial: 1). More makes fewer,
        larger DMAs, which matters where each DMA trigger costs ~600 ns (trn2's DGE [S2][S13]).
    fold_fp32: keep partial sums between K blocks in fp32 (the tutorial keeps them in the output
        dtype); the last K block's add casts to the output dtype.
    """

    tiles_m: int = 16
    tiles_n: int = 2
    tiles_k: int = 8
    psum_groups: int = 1
    lhs_resident: bool = False
    rhs_buffers: int = 2
    rhs_k_tiles_per_dma: int = 1
    fold_fp32: bool = False

    def clamped(self, k: int, m: int, n: int, lim: Limits) -> Blocking:
        """The same blocking with each block no larger than the problem."""
        return replace(
            self,
            tiles_m=max(1, min(self.tiles_m, cdiv(m, lim.tile_m))),
            tiles_n=max(1, min(self.tiles_n, cdiv(n, lim.tile_n))),
            tiles_k=max(1, min(self.tiles_k, cdiv(k, lim.tile_k))),
        )

    def sbuf_bytes(self, k: int, m: int, n: int, dt: DType, out_dt: DType, lim: Limits) -> int:
        """SBUF bytes per partition the kernel's tiles take at most (64-byte granules)."""
        b = self.clamped(k, m, n, lim)
        block_m, block_n = lim.tile_m * b.tiles_m, lim.tile_n * b.tiles_n
        widen = self.widens(k, out_dt, lim)
        rows = cdiv(m, lim.tile_m) + 1  # every row tile of an N block, + one being replaced
        total = rows * _granules(block_n * (4 if widen else out_dt.itemsize))
        total += rows * _granules(block_n * out_dt.itemsize) if widen else 0
        if b.lhs_resident:
            k_tiles = cdiv(k, lim.tile_k)
            total += (
                cdiv(k_tiles, b.tiles_k)
                * cdiv(m, block_m)
                * _granules(b.tiles_k * block_m * dt.itemsize)
            )
        else:
            total += 2 * _granules(b.tiles_k * block_m * dt.itemsize)
        return total + b.rhs_buffers * _granules(b.tiles_k * block_n * dt.itemsize)

    def widens(self, k: int, out_dt: DType, lim: Limits) -> bool:
        """Whether partial sums are held wider than the output (fp32, several K blocks)."""
        return self.fold_fp32 and out_dt.itemsize < 4 and cdiv(k, lim.tile_k) > max(1, self.tiles_k)


def _granules(nbytes: int) -> int:
    return cdiv(nbytes, SBUF_ALIGN_BYTES) * SBUF_ALIGN_BYTES


Thunk = Callable[[], None]
#: One load, given the engine that triggers it.
Load = Callable[[str], None]
#: The stationary operand's loads for one block: (dst SBUF [tile_k, k_tiles, >= m_cols], k0,
#: k_cols, m0, m_cols) -> one load per K tile in the order the matmuls use them, or a single
#: load that every K tile needs (a row-block load followed by transposes).
LhsLoad = Callable[[Operand, int, int, int, int], list[Load]]


def lhsT_loader(lhsT: Tile, queues: DmaQueues) -> LhsLoad:
    """Stationary tiles from an HBM lhsT [K, M]: one DMA per [tile_k, m_cols] tile."""
    tile_k = limits().tile_k

    def load(dst: Operand, k0: int, kc: int, m0: int, mc: int) -> list[Load]:
        def one(j: int, c: int, w: int) -> Load:
            return lambda engine: queues.load(
                dst[:w, j, :mc], lhsT[k0 + c : k0 + c + w, m0 : m0 + mc], engine=engine
            )

        return [one(j, c, w) for j, (c, w) in enumerate(chunks(kc, tile_k))]

    return load


def transposing_loader(a: Tile, loader: TransposedLoader) -> LhsLoad:
    """Stationary tiles from an HBM A [M, K] (the tile is A^T), transposed on the way in: one
    transposing DMA per K tile, or one row-block load plus TensorE transposes."""
    tile_k = limits().tile_k

    def load(dst: Operand, k0: int, kc: int, m0: int, mc: int) -> list[Load]:
        if not loader.use_dma(a):
            return [lambda engine: loader.load(dst, a, m0, mc, k0, kc, engine=engine)]

        def one(j: int, c: int, w: int) -> Load:
            return lambda engine: loader.queues.load_transposed(
                dst[:w, j, :mc], a[m0 : m0 + mc, k0 + c : k0 + c + w], engine=engine
            )

        return [one(j, c, w) for j, (c, w) in enumerate(chunks(kc, tile_k))]

    return load


class OptimizedMatmul:
    """The body of ``matmul_optimized``: out[M, N] = lhs^T @ rhs, lhs^T delivered by a loader.

    Loop nest as the tutorial: N blocks, then K blocks, then M blocks. Partial sums of each K
    block are folded into SBUF results (a copy for the first K block, an add for the others);
    each output row tile is stored once its last K block is folded. Inputs are multi-buffered;
    loads are issued in the order the matmuls consume them (rhs and lhs K tiles alternately).
    ``Blocking`` says how; ``psum_banks`` limits the banks the accumulators rotate over (when
    the loader keeps some for its transposes).
    """

    def __init__(
        self,
        load_lhs: LhsLoad,
        k: int,
        m: int,
        rhs: Tile,
        out: Tile,
        blocking: Blocking,
        queues: DmaQueues,
        *,
        psum_banks: int | None = None,
    ) -> None:
        lim = self.lim = limits()
        n = rhs.shape[1]
        self.load_lhs, self.rhs, self.out, self.queues = load_lhs, rhs, out, queues
        b = blocking.clamped(k, m, n, lim)
        self.m_blocks = chunks(m, lim.tile_m * b.tiles_m)
        self.n_blocks = chunks(n, lim.tile_n * b.tiles_n)
        self.k_blocks = chunks(k, lim.tile_k * b.tiles_k)
        self.resident = b.lhs_resident
        self.lhs_kept: dict[tuple[int, int], Operand] = {}
        self.lhs_ring, self.rhs_ring = BufferRing(2), BufferRing(b.rhs_buffers)
        self.rhs_group = max(1, b.rhs_k_tiles_per_dma)
        self.psum_banks = psum_banks or lim.psum_banks  # banks the accumulators may rotate over
        self.groups_at_once = max(1, min(b.psum_groups, self.psum_banks // 2))
        self.psum_ring: BufferRing | None = None
        self.evacuate = Evacuator()
        #: m tile index -> SBUF [tile_m, block_n] partial results (in fold_dtype), and their
        #: final values in the output dtype when the two differ.
        self.results: dict[int, Operand] = {}
        self.finals: dict[int, Operand] = {}
        rows = cdiv(m, lim.tile_m) + 1  # one spare: a new N block's row waits for one store
        self.results_ring, self.finals_ring = BufferRing(rows), BufferRing(rows)
        self.fold_dtype = lang.float32 if b.widens(k, out.dtype, lim) else out.dtype

    def emit(self) -> None:
        for n0, nb in self.n_blocks:
            for kb, (k0, kc) in enumerate(self.k_blocks):
                k_tiles = chunks(kc, self.lim.tile_k)
                rhs_tile = self.rhs_ring(
                    (self.lim.tile_k, len(k_tiles), nb), self.rhs.dtype, lang.sbuf
                )
                first = n0 == 0 and kb == 0
                rhs_loads = self._rhs_loads(rhs_tile, k_tiles, k0, n0, nb, ramp=first)
                for mb, (m0, mc) in enumerate(self.m_blocks):
                    lhs_tile, lhs_loads = self._lhs(kb, mb, k0, kc, m0, mc, len(k_tiles))
                    if len(lhs_loads) == 1:
                        lhs_loads[0]()
                        lhs_loads = []
                    _interleave(rhs_loads if mb == 0 else [], lhs_loads)
                    self._compute(lhs_tile, rhs_tile, k_tiles, m0, mc, n0, nb, kb)

    def _rhs_loads(
        self,
        dst: Operand,
        k_tiles: list[tuple[int, int]],
        k0: int,
        n0: int,
        nb: int,
        *,
        ramp: bool,
    ) -> list[Thunk]:
        """One DMA per ``rhs_k_tiles_per_dma`` full K tiles (a partial last tile alone); the
        kernel's very first block ramps 1, 2, 4, ... tiles so TensorE starts early."""
        full = [j for j, (_, w) in enumerate(k_tiles) if w == self.lim.tile_k]
        loads: list[Thunk] = []
        size = 1 if ramp else self.rhs_group
        j = 0
        while j < len(full):
            count = min(size, len(full) - j)
            loads.append(self._rhs_load(dst, j, count, k0 + k_tiles[j][0], n0, nb))
            j += count
            size = min(self.rhs_group, 2 * size)
        for j in range(len(full), len(k_tiles)):
            c, w = k_tiles[j]
            loads.append(self._load(dst[:w, j, :], self.rhs[k0 + c : k0 + c + w, n0 : n0 + nb]))
        return loads

    def _load(self, dst: Operand, src: Source) -> Thunk:
        return lambda: self.queues.load(dst, src)

    def _rhs_load(self, dst: Operand, j: int, count: int, row0: int, n0: int, nb: int) -> Thunk:
        src = row_tiles(self.rhs, row0, self.lim.tile_k, count, n0, nb)
        return self._load(dst[:, j : j + count, :], src)

    def _lhs(
        self, kb: int, mb: int, k0: int, kc: int, m0: int, mc: int, k_tiles: int
    ) -> tuple[Operand, list[Thunk]]:
        kept = self.lhs_kept.get((kb, mb))
        if kept is not None:
            return kept, []
        shape = (self.lim.tile_k, k_tiles, mc)
        tile: Operand
        if self.resident:
            tile = self.lhs_kept[(kb, mb)] = lang.ndarray(shape, self.rhs.dtype)
        else:
            tile = self.lhs_ring(shape, self.rhs.dtype, lang.sbuf)
        loads = self.load_lhs(tile, k0, kc, m0, mc)
        if len(loads) == 1:  # every K tile needs it: ahead of the rhs loads, on their queue
            return tile, [_bind(loads[0], "sync")]
        # One per K tile, interleaved with the rhs loads; a resident operand's loads (once, at
        # the start) are triggered by the store engine so the Sync engine streams rhs.
        engine = self.queues.store_engine if self.resident else "sync"
        return tile, [_bind(load, engine) for load in loads]

    def _psum(self, shape: tuple[int, int]) -> Operand:
        if self.psum_ring is None:  # made at first use: a loader's PSUM may be free by then
            banks = self.psum_banks
            self.psum_ring = BufferRing(min(banks, max(4, 2 * self.groups_at_once)))
        return self.psum_ring(shape, lang.float32, lang.psum)

    def _compute(
        self,
        lhs_tile: Operand,
        rhs_tile: Operand,
        k_tiles: list[tuple[int, int]],
        m0: int,
        mc: int,
        n0: int,
        nb: int,
        kb: int,
    ) -> None:
        """All matmuls of one (N block, K block, M block), folded into the SBUF results; in the
        last K block each output row tile is stored as soon as its last group is folded."""
        m_tiles, n_tiles = chunks(mc, self.lim.tile_m), chunks(nb, self.lim.tile_n)
        # K outermost only in the kernel's first block, while TensorE waits for data; later
        # blocks find their data loaded, and the tutorial's order completes rows one by one,
        # so their stores spread out instead of piling up at the end.
        at_once = self.groups_at_once if (n0, kb) == (0, 0) else 1
        if at_once == 1:  # the tutorial's order: N tiles outer, M tiles inner
            groups = [(bn, bm) for bn in range(len(n_tiles)) for bm in range(len(m_tiles))]
        else:  # row by row, so rows complete (and are stored) progressively
            groups = [(bn, bm) for bm in range(len(m_tiles)) for bn in range(len(n_tiles))]
        folded = [0] * len(m_tiles)
        for p0 in range(0, len(groups), at_once):
            batch = groups[p0 : p0 + at_once]
            acc = {g: self._psum((m_tiles[g[1]][1], n_tiles[g[0]][1])) for g in batch}
            if at_once == 1:  # one output tile over all its K tiles
                order = [(j, g) for g in batch for j in range(len(k_tiles))]
            else:  # K outermost: each K tile is used by every open group as soon as it lands
                order = [(j, g) for j in range(len(k_tiles)) for g in batch]

            # The same group of matmuls recurs for every N block (and K block) on the same
            # rotating buffers: traced once per distinct key, copied after (``lang.repeat``).
            def matmuls(
                order: list[tuple[int, tuple[int, int]]] = order,
                acc: dict[tuple[int, int], Operand] = acc,
            ) -> None:
                self._matmuls(order, acc, lhs_tile, rhs_tile, m_tiles, n_tiles, k_tiles)

            lang.repeat(
                matmuls,
                [*(acc[g] for g in batch), lhs_tile, rhs_tile],
                (tuple(order), tuple(m_tiles), tuple(n_tiles), tuple(k_tiles)),
            )
            for bn, bm in batch:
                (mm0, mt) = m_tiles[bm]
                self._fold(acc[(bn, bm)], m0 + mm0, mt, n_tiles[bn], nb, kb)
                folded[bm] += 1
                if folded[bm] == len(n_tiles) and kb == len(self.k_blocks) - 1:
                    self._store(m0 + mm0, mt, n0, nb)

    @staticmethod
    def _matmuls(
        order: list[tuple[int, tuple[int, int]]],
        acc: dict[tuple[int, int], Operand],
        lhs_tile: Operand,
        rhs_tile: Operand,
        m_tiles: list[tuple[int, int]],
        n_tiles: list[tuple[int, int]],
        k_tiles: list[tuple[int, int]],
    ) -> None:
        """One batch's matmuls, each K tile into its group's PSUM accumulator."""
        for j, (bn, bm) in order:
            (mm0, mt), (nn0, nt), w = m_tiles[bm], n_tiles[bn], k_tiles[j][1]
            nisa.nc_matmul(
                acc[(bn, bm)],
                lhs_tile[:w, j, mm0 : mm0 + mt],
                rhs_tile[:w, j, nn0 : nn0 + nt],
                accumulate=j > 0,
            )

    def _fold(
        self, acc: Operand, row0: int, mt: int, n_tile: tuple[int, int], nb: int, kb: int
    ) -> None:
        """Add a PSUM partial sum into the SBUF results (a cast copy for the first K block)."""
        key = row0 // self.lim.tile_m
        nn0, nt = n_tile
        first, last = kb == 0, kb == len(self.k_blocks) - 1
        widen = self.fold_dtype != self.out.dtype
        if nn0 == 0 and first:  # replaces the previous N block's (stored) results tile
            dt = self.fold_dtype if widen else self.out.dtype
            self.results[key] = self.results_ring((self.lim.tile_m, nb), dt, lang.sbuf)
        if nn0 == 0 and last and widen:
            self.finals[key] = self.finals_ring((self.lim.tile_m, nb), self.out.dtype, lang.sbuf)
        partial = self.results[key][:mt, nn0 : nn0 + nt]
        dst = self.finals[key][:mt, nn0 : nn0 + nt] if last and widen else partial
        if first:
            self.evacuate(dst, acc)
        else:
            nisa.tensor_tensor(dst, partial, acc, lang.AluOp.add)

    def _store(self, row0: int, mt: int, n0: int, nb: int) -> None:
        key = row0 // self.lim.tile_m
        result = self.finals[key] if key in self.finals else self.results[key]
        self.queues.store(self.out[row0 : row0 + mt, n0 : n0 + nb], result[:mt, :])


def _bind(load: Load, engine: str) -> Thunk:
    return lambda: load(engine)


def _interleave(first: list[Thunk], second: list[Thunk]) -> None:
    """Issue two lists of loads alternately, in the order the matmuls consume them."""
    for i in range(max(len(first), len(second))):
        if i < len(first):
            first[i]()
        if i < len(second):
            second[i]()
