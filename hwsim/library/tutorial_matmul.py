"""The NKI matmul tutorial's tiled, hoisted and block-free versions (HARDWARE.md §5, V1a-V1c),
and its fully optimised version as written (``matmul_fully_optimized``, V1).

Together with ``matmul_optimized`` (V1 as an expert adapts it: the calibration kernel) the first
three are the four versions of the public tutorial the simulator is calibrated on [S26]; each one
here keeps the tutorial's loop structure, so it emits the published number of loads and matmuls
(for lhsT [8192, 4096] and rhs [8192, 8192] bf16: 65,536 / 34,816 / 18,432 loads and 32,768
matmuls, §5):

- ``matmul_tiled`` (V1a, ``nki_matmul_tiled_``): per (128-row M tile, 512-column N tile), a K
  loop of 128-row steps, each loading one lhsT tile [128 K x 128 M] and one rhs tile
  [128 K x 512 N] and running one matmul into a PSUM accumulator; then one PSUM -> SBUF copy
  with cast and one store.
- ``matmul_hoisted`` (V1b, ``nki_matmul_hoist_load_``): per M tile its K/128 lhsT tiles are
  loaded once; per (M, N) tile its K/128 rhs tiles are loaded, then K/128 matmuls.
- ``matmul_block_free`` (V1c, ``nki_matmul_block_free_dimension_``): M blocks of 2 tiles and N
  blocks of 2 tiles; per M block its 2 x K/128 lhsT tiles, per N block its 2 x K/128 rhs tiles,
  then 2 x 2 accumulation groups of K/128 matmuls.
- ``matmul_fully_optimized`` (V1, ``nki_matmul_fully_optimized_`` as the tutorial writes it, for
  the NKI front end to be compared with; its docstring says what it emits).

The tutorial allocates its tiles inside ``affine_range`` bodies and the NKI compiler places and
multi-buffers them. Here that is explicit: every allocation site is a ``BufferRing`` of
``buffers`` sets (a set: what one loop iteration allocates, e.g. V1b's K/128 rhs tiles), so the
loads of the next iterations run ahead of the current matmuls as far as ``buffers`` allows.
The depth stands for the compiler's multi-buffering, an assumption (its choice is not
published): by default 4, with the input rings reduced until they fit SBUF (the compiler can
allocate only what fits; V1c's 2 x 64 rhs tiles of the V1 shape fit once on trn1); a depth given
explicitly that does not fit is an error. PSUM accumulators and result tiles rotate over the same
depth (at most the PSUM banks). Loads are triggered by the
Sync engine rotating over four queues, stores by GpSimdE on their own queue (``DmaQueues``),
the PSUM -> SBUF copy runs on VectorE (``nisa.tensor_copy``, as the tutorial). Any positive M,
K, N works for V1a-V1c (edge tiles are smaller); V1, like the tutorial's, takes whole blocks, and
its rings keep the depth 4.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hwsim import lang
from hwsim.lang import isa as nisa
from hwsim.lang.allocator import SBUF_ALIGN_BYTES
from hwsim.lang.tiles import Tile
from hwsim.library.common import BufferRing, DmaQueues, chunks, limits, require
from hwsim.library.matmul import matmul_shapes

#: Multi-buffering depth when none is given (module docstring): an assumption.
DEFAULT_BUFFERS = 4
#: Sync-engine queues the loads rotate over (the kernel language's default rotation).
LOAD_QUEUES = 4
#: Tiles per block in V1c's M and N dimensions (the tutorial's TILES_IN_BLOCK_M/N) [S26].
BLOCK_TILES = 2


def _granules(nbytes: int) -> int:
    return -(-nbytes // SBUF_ALIGN_BYTES) * SBUF_ALIGN_BYTES


@dataclass(frozen=True)
class Plan:
    """Tiles and ring depths of one build.

    tile_k/m/n: the full tile of each dimension (the config's, or the dimension when smaller);
    k_tiles: the K loop's (start, rows); sets: buffered sets of ``lhs_set`` lhsT tiles and of
    ``rhs_set`` rhs tiles; out_buffers: PSUM accumulators and SBUF result tiles in rotation.
    """

    tile_k: int
    tile_m: int
    tile_n: int
    k_tiles: list[tuple[int, int]]
    lhs_set: int
    rhs_set: int
    sets: int
    out_buffers: int

    def sbuf_bytes(self, itemsize: int) -> int:
        """SBUF bytes per partition of every ring (inputs and results share the dtype)."""
        lhs = self.lhs_set * _granules(self.tile_m * itemsize)
        rhs = self.rhs_set * _granules(self.tile_n * itemsize)
        return self.sets * (lhs + rhs) + self.out_buffers * _granules(self.tile_n * itemsize)


def _plan(
    kernel: str,
    shape: tuple[int, int, int],
    itemsize: int,
    sets_of: tuple[int, int],
    buffers: int | None,
) -> Plan:
    """The deepest multi-buffering (<= ``buffers``, default DEFAULT_BUFFERS) that fits SBUF:
    with the default, input sets shrink first, then the result tiles; ``sets_of`` is (lhsT
    tiles, rhs tiles) per set."""
    require(buffers is None or buffers >= 1, kernel, f"buffers={buffers} must be >= 1")
    k, m, n = shape
    lim = limits()
    depth = buffers or DEFAULT_BUFFERS
    tiles = (min(lim.tile_k, k), min(lim.tile_m, m), min(lim.tile_n, n))
    plan = Plan(*tiles, chunks(k, lim.tile_k), *sets_of, depth, depth)
    while buffers is None and plan.sbuf_bytes(itemsize) > lim.sbuf_bytes:
        if plan.sets > 1:
            plan = replace(plan, sets=plan.sets - 1)
        elif plan.out_buffers > 1:
            plan = replace(plan, out_buffers=plan.out_buffers - 1)
        else:
            break
    need = plan.sbuf_bytes(itemsize)
    require(
        need <= lim.sbuf_bytes,
        kernel,
        f"{plan.sets} buffered set(s) of {plan.lhs_set} lhsT and {plan.rhs_set} rhs tiles (and "
        f"{plan.out_buffers} result tiles) need {need} bytes per SBUF partition, more than the "
        f"{lim.sbuf_bytes} there are: use fewer buffers (or a smaller K)",
    )
    return plan


class _Rings:
    """The kernel's buffer rings (depths from the plan) and its DMA queues."""

    def __init__(self, plan: Plan, lhsT: Tile, out: Tile) -> None:
        self.plan = plan
        self.dtype, self.out_dtype = lhsT.dtype, out.dtype
        self.lhs = BufferRing(plan.sets * plan.lhs_set)
        self.rhs = BufferRing(plan.sets * plan.rhs_set)
        self.results = BufferRing(plan.out_buffers)
        self.psum = BufferRing(min(plan.out_buffers, limits().psum_banks))
        self.queues = DmaQueues(load_queues=LOAD_QUEUES)

    def lhs_tile(self, src: Tile, k0: int, kt: int, m0: int, mt: int) -> lang.View:
        full = (self.plan.tile_k, self.plan.tile_m)
        tile = self.lhs((kt, mt), self.dtype, lang.sbuf, max_shape=full)
        self.queues.load(tile, src[k0 : k0 + kt, m0 : m0 + mt])
        return tile

    def rhs_tile(self, src: Tile, k0: int, kt: int, n0: int, nt: int) -> lang.View:
        full = (self.plan.tile_k, self.plan.tile_n)
        tile = self.rhs((kt, nt), self.dtype, lang.sbuf, max_shape=full)
        self.queues.load(tile, src[k0 : k0 + kt, n0 : n0 + nt])
        return tile

    def accumulator(self, mt: int, nt: int) -> lang.View:
        full = (self.plan.tile_m, self.plan.tile_n)
        return self.psum((mt, nt), lang.float32, lang.psum, max_shape=full)

    def evacuate_and_store(
        self, ps: lang.View, out: Tile, m0: int, mt: int, n0: int, nt: int
    ) -> None:
        """PSUM -> SBUF with the cast to the output dtype (VectorE), then one store."""
        full = (self.plan.tile_m, self.plan.tile_n)
        res = self.results((mt, nt), self.out_dtype, lang.sbuf, max_shape=full)
        nisa.tensor_copy(res, ps)
        self.queues.store(out[m0 : m0 + mt, n0 : n0 + nt], res)


@lang.kernel
def matmul_tiled(lhsT, rhs, buffers=None):
    """out[M, N] = lhsT[K, M].T @ rhs[K, N] as ``nki_matmul_tiled_`` (V1a): two loads per
    matmul. ``buffers``: multi-buffering depth (module docstring; default 4, what fits)."""
    k, m, n = matmul_shapes("matmul_tiled", lhsT, rhs)
    out = lang.ndarray((m, n), lhsT.dtype, buffer=lang.hbm, name="out")
    plan = _plan("matmul_tiled", (k, m, n), lhsT.dtype.itemsize, (1, 1), buffers)
    rings = _Rings(plan, lhsT, out)
    for m0, mt in chunks(m, plan.tile_m):
        for n0, nt in chunks(n, plan.tile_n):
            ps = rings.accumulator(mt, nt)
            for i, (k0, kt) in enumerate(plan.k_tiles):
                a = rings.lhs_tile(lhsT, k0, kt, m0, mt)
                b = rings.rhs_tile(rhs, k0, kt, n0, nt)
                nisa.nc_matmul(ps, a, b, accumulate=i > 0)
            rings.evacuate_and_store(ps, out, m0, mt, n0, nt)
    return out


@lang.kernel
def matmul_hoisted(lhsT, rhs, buffers=None):
    """out = lhsT.T @ rhs as ``nki_matmul_hoist_load_`` (V1b): each M tile's lhsT tiles loaded
    once, each (M, N) tile's rhs tiles loaded before its matmuls. ``buffers`` as matmul_tiled."""
    k, m, n = matmul_shapes("matmul_hoisted", lhsT, rhs)
    out = lang.ndarray((m, n), lhsT.dtype, buffer=lang.hbm, name="out")
    k_count = len(chunks(k, limits().tile_k))
    plan = _plan("matmul_hoisted", (k, m, n), lhsT.dtype.itemsize, (k_count, k_count), buffers)
    rings = _Rings(plan, lhsT, out)
    for m0, mt in chunks(m, plan.tile_m):
        lhs_tiles = [rings.lhs_tile(lhsT, k0, kt, m0, mt) for k0, kt in plan.k_tiles]
        for n0, nt in chunks(n, plan.tile_n):
            rhs_tiles = [rings.rhs_tile(rhs, k0, kt, n0, nt) for k0, kt in plan.k_tiles]
            ps = rings.accumulator(mt, nt)
            for i, (a, b) in enumerate(zip(lhs_tiles, rhs_tiles, strict=True)):
                nisa.nc_matmul(ps, a, b, accumulate=i > 0)
            rings.evacuate_and_store(ps, out, m0, mt, n0, nt)
    return out


@lang.kernel
def matmul_block_free(lhsT, rhs, buffers=None):
    """out = lhsT.T @ rhs as ``nki_matmul_block_free_dimension_`` (V1c): M blocks of 2 tiles and
    N blocks of 2 tiles, each block's tiles loaded once per block, then 2 x 2 accumulation groups.
    ``buffers`` as matmul_tiled."""
    k, m, n = matmul_shapes("matmul_block_free", lhsT, rhs)
    out = lang.ndarray((m, n), lhsT.dtype, buffer=lang.hbm, name="out")
    block = BLOCK_TILES * len(chunks(k, limits().tile_k))
    plan = _plan("matmul_block_free", (k, m, n), lhsT.dtype.itemsize, (block, block), buffers)
    rings = _Rings(plan, lhsT, out)
    for mb0, mb in chunks(m, BLOCK_TILES * plan.tile_m):
        m_tiles = [(mb0 + m0, mt) for m0, mt in chunks(mb, plan.tile_m)]
        lhs_tiles = [
            [rings.lhs_tile(lhsT, k0, kt, m0, mt) for k0, kt in plan.k_tiles] for m0, mt in m_tiles
        ]
        for nb0, nb in chunks(n, BLOCK_TILES * plan.tile_n):
            n_tiles = [(nb0 + n0, nt) for n0, nt in chunks(nb, plan.tile_n)]
            rhs_tiles = [
                [rings.rhs_tile(rhs, k0, kt, n0, nt) for k0, kt in plan.k_tiles]
                for n0, nt in n_tiles
            ]
            for (m0, mt), lhs_k in zip(m_tiles, lhs_tiles, strict=True):
                for (n0, nt), rhs_k in zip(n_tiles, rhs_tiles, strict=True):
                    ps = rings.accumulator(mt, nt)
                    for i, (a, b) in enumerate(zip(lhs_k, rhs_k, strict=True)):
                        nisa.nc_matmul(ps, a, b, accumulate=i > 0)
                    rings.evacuate_and_store(ps, out, m0, mt, n0, nt)
    return out


@lang.kernel
def matmul_fully_optimized(lhsT, rhs, TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8):
    """out = lhsT.T @ rhs as ``nki_matmul_fully_optimized_`` (V1) is written, instruction for
    instruction (``matmul_optimized`` is an expert's adaptation of it; docs/nki.md): per N
    block, [128, 512] result tiles in the output dtype, each zero-filled (VectorE) before its
    first add; per K block its rhs tiles, then per M block its lhsT tiles (reloaded for every N
    block), then per (N tile, M tile) a PSUM group over the K block added into the result tile
    (VectorE); after the K blocks, per row tile one copy per N tile into a packed [128,
    BLOCK_N] tile and one store. Every allocation site is a ring of DEFAULT_BUFFERS sets, loads
    and stores on the queues of the other versions. Dimensions must be whole blocks."""
    k, m, n = matmul_shapes("matmul_fully_optimized", lhsT, rhs)
    lim = limits()
    tm, tn, tk = lim.tile_m, lim.tile_n, lim.tile_k
    bm_tiles, bn_tiles, bk_tiles = TILES_IN_BLOCK_M, TILES_IN_BLOCK_N, TILES_IN_BLOCK_K
    block_m, block_n, block_k = tm * bm_tiles, tn * bn_tiles, tk * bk_tiles
    require(
        m % block_m == 0 and n % block_n == 0 and k % block_k == 0,
        "matmul_fully_optimized",
        f"K, M, N = {k}, {m}, {n} must be multiples of the blocks {block_k}, {block_m}, "
        f"{block_n} (as the tutorial's kernel assumes)",
    )
    out = lang.ndarray((m, n), lhsT.dtype, buffer=lang.hbm, name="out")
    depth = DEFAULT_BUFFERS
    results = BufferRing(depth * (m // tm) * bn_tiles)
    rhs_ring, lhs_ring = BufferRing(depth * bk_tiles), BufferRing(depth * bk_tiles)
    psum_ring = BufferRing(min(depth, lim.psum_banks))
    packed_ring = BufferRing(depth)
    queues = DmaQueues(load_queues=LOAD_QUEUES)
    for n0 in range(0, n, block_n):
        tiles: dict[tuple[int, int], lang.View] = {}
        for k0 in range(0, k, block_k):
            rhs_tiles = []
            for j in range(bk_tiles):
                t = rhs_ring((tk, block_n), rhs.dtype, lang.sbuf)
                queues.load(t, rhs[k0 + j * tk : k0 + (j + 1) * tk, n0 : n0 + block_n])
                rhs_tiles.append(t)
            for m0 in range(0, m, block_m):
                lhs_tiles = []
                for j in range(bk_tiles):
                    t = lhs_ring((tk, block_m), lhsT.dtype, lang.sbuf)
                    queues.load(t, lhsT[k0 + j * tk : k0 + (j + 1) * tk, m0 : m0 + block_m])
                    lhs_tiles.append(t)
                for bn in range(bn_tiles):
                    for bm in range(bm_tiles):
                        ps = psum_ring((tm, tn), lang.float32, lang.psum)
                        for j in range(bk_tiles):
                            a = lhs_tiles[j][:, bm * tm : (bm + 1) * tm]
                            b = rhs_tiles[j][:, bn * tn : (bn + 1) * tn]
                            nisa.nc_matmul(ps, a, b, accumulate=j > 0)
                        key = ((m0 + bm * tm) // tm, bn)
                        if key not in tiles:  # nl.zeros: filled at the tile's first use
                            tiles[key] = results((tm, tn), lhsT.dtype, lang.sbuf)
                            nisa.memset(tiles[key], 0.0)
                        nisa.tensor_tensor(tiles[key], tiles[key], ps, lang.AluOp.add)
        for row in range(m // tm):
            packed = packed_ring((tm, block_n), lhsT.dtype, lang.sbuf)
            for bn in range(bn_tiles):
                nisa.tensor_copy(packed[:, bn * tn : (bn + 1) * tn], tiles[(row, bn)])
            queues.store(out[row * tm : (row + 1) * tm, n0 : n0 + block_n], packed)
    return out
