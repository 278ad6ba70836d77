"""The NKI tutorial's tiled matmul with its blocking factors and buffer depth as knobs, and the
search space ``hwsim tune`` explores over them.

``matmul_tiled_blocked(lhsT, rhs, TILES_IN_BLOCK_M, TILES_IN_BLOCK_N, TILES_IN_BLOCK_K,
BUFFERS)`` is one loop nest: per block of TILES_IN_BLOCK_M x 128 output rows and
TILES_IN_BLOCK_N x 512 output columns, a K loop in steps of TILES_IN_BLOCK_K x 128 rows; each
step loads, per K tile, one lhsT tile as wide as the M block and one rhs tile as wide as the N
block (a wider tile is one DMA of longer contiguous rows), then runs the block's matmuls.

- With every block factor 1 it is the tutorial's tiled version (V1a, ``matmul_tiled``): per
  (M tile, N tile), a K loop that loads one [128 x 128] lhsT tile and one [128 x 512] rhs tile
  per matmul, accumulating in one PSUM bank; then one evacuation and one store.
- While the block's accumulators fit the PSUM banks (M x N block tiles <= banks), they
  accumulate over the whole of K in PSUM, as V1a does.
- Larger blocks accumulate each K step's PSUM group into SBUF result tiles (zero-filled, then
  added on VectorE), as the tutorial's fully optimised version does; TILES_IN_BLOCK_M=16,
  TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8 is its blocking.

BUFFERS is the depth of the input rings (sets of one K step's tiles): loads run up to
BUFFERS - 1 steps ahead of the matmuls. A point whose rings do not fit SBUF is refused before
anything is emitted (the tuner records it as infeasible). Any positive M, K, N works (edge tiles
are smaller).
"""

from __future__ import annotations

from hwsim import lang
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing, DmaQueues, chunks, limits, require
from hwsim.library.matmul import matmul_shapes
from hwsim.library.tutorial_matmul import LOAD_QUEUES, _granules
from hwsim.tune.space import space

#: The knobs' values worth trying on a NeuronCore (128-row tiles, 8 PSUM banks, 24-32 MiB SBUF).
BLOCK_FACTORS = (1, 2, 4, 8, 16)
BUFFER_DEPTHS = (1, 2, 3, 4)


def _ring_bytes(block: tuple[int, int, int], tiles: tuple[int, int, int], buffers: int, item: int):
    """SBUF bytes per partition of the input rings and the result tiles of one point."""
    bm, bn, bk = block
    _, tm, tn = tiles
    lhs = bk * _granules(bm * tm * item)
    rhs = bk * _granules(bn * tn * item)
    results = 2 * bm * _granules(bn * tn * item)
    return buffers * (lhs + rhs) + results


def fits_sbuf(point: dict, config) -> bool:
    """The search space's filter: the point's rings fit the config's SBUF (bf16 inputs, the
    tutorial's dtype; the kernel itself checks its real dtype and refuses what does not fit)."""
    if config is None:  # no machine named: every point may fit
        return True
    lim = limits(config)
    block = (point["TILES_IN_BLOCK_M"], point["TILES_IN_BLOCK_N"], point["TILES_IN_BLOCK_K"])
    tiles = (lim.tile_k, lim.tile_m, lim.tile_n)
    return _ring_bytes(block, tiles, point["BUFFERS"], 2) <= lim.sbuf_bytes


@space(
    where=fits_sbuf,
    TILES_IN_BLOCK_M=BLOCK_FACTORS,
    TILES_IN_BLOCK_N=BLOCK_FACTORS,
    TILES_IN_BLOCK_K=BLOCK_FACTORS,
    BUFFERS=BUFFER_DEPTHS,
)
@lang.kernel
def matmul_tiled_blocked(
    lhsT, rhs, TILES_IN_BLOCK_M=1, TILES_IN_BLOCK_N=1, TILES_IN_BLOCK_K=1, BUFFERS=4
):
    """out[M, N] = lhsT[K, M].T @ rhs[K, N]; the knobs as in the module docstring (the
    defaults are the tutorial's tiled version, V1a)."""
    name = "matmul_tiled_blocked"
    k, m, n = matmul_shapes(name, lhsT, rhs)
    bm, bn, bk = TILES_IN_BLOCK_M, TILES_IN_BLOCK_N, TILES_IN_BLOCK_K
    require(min(bm, bn, bk, BUFFERS) >= 1, name, "block factors and BUFFERS must be >= 1")
    lim = limits()
    tk, tm, tn = min(lim.tile_k, k), min(lim.tile_m, m), min(lim.tile_n, n)
    item = lhsT.dtype.itemsize
    need = _ring_bytes((bm, bn, bk), (tk, tm, tn), BUFFERS, item)
    require(
        need <= lim.sbuf_bytes,
        name,
        f"blocks {bm}x{bn}x{bk} with {BUFFERS} buffers need {need} bytes per SBUF partition, "
        f"more than the {lim.sbuf_bytes} there are: use smaller blocks or fewer buffers",
    )
    out = lang.ndarray((m, n), lhsT.dtype, buffer=lang.hbm, name="out")
    in_psum = bm * bn <= lim.psum_banks
    lhs_ring, rhs_ring = BufferRing(BUFFERS * bk), BufferRing(BUFFERS * bk)
    psum_ring = BufferRing(lim.psum_banks)
    result_ring = BufferRing(2 * bm)
    queues = DmaQueues(load_queues=LOAD_QUEUES)
    k_steps = chunks(k, bk * tk)
    for mb0, mb in chunks(m, bm * tm):
        m_tiles = chunks(mb, tm)
        for nb0, nb in chunks(n, bn * tn):
            n_tiles = chunks(nb, tn)
            results = [
                result_ring((mt, nb), lhsT.dtype, lang.sbuf, max_shape=(tm, bn * tn))
                for _, mt in m_tiles
            ]
            groups = {}
            if in_psum:
                for i, (_, mt) in enumerate(m_tiles):
                    for j, (_, nt) in enumerate(n_tiles):
                        groups[i, j] = psum_ring(
                            (mt, nt), lang.float32, lang.psum, max_shape=(tm, tn)
                        )
            for step, (k0, kk) in enumerate(k_steps):
                pairs = []
                for kt0, kt in chunks(kk, tk):
                    a = lhs_ring((kt, mb), lhsT.dtype, lang.sbuf, max_shape=(tk, bm * tm))
                    queues.load(a, lhsT[k0 + kt0 : k0 + kt0 + kt, mb0 : mb0 + mb])
                    b = rhs_ring((kt, nb), rhs.dtype, lang.sbuf, max_shape=(tk, bn * tn))
                    queues.load(b, rhs[k0 + kt0 : k0 + kt0 + kt, nb0 : nb0 + nb])
                    pairs.append((a, b))
                for i, (m0, mt) in enumerate(m_tiles):
                    for j, (n0, nt) in enumerate(n_tiles):
                        ps = (
                            groups[i, j]
                            if in_psum
                            else psum_ring((mt, nt), lang.float32, lang.psum, max_shape=(tm, tn))
                        )
                        for t, (a, b) in enumerate(pairs):
                            first = t == 0 and (step == 0 or not in_psum)
                            nisa.nc_matmul(
                                ps, a[:, m0 : m0 + mt], b[:, n0 : n0 + nt], accumulate=not first
                            )
                        if not in_psum:
                            acc = results[i][:, n0 : n0 + nt]
                            if step == 0:
                                nisa.tensor_copy(acc, ps)
                            else:
                                nisa.tensor_tensor(acc, acc, ps, lang.AluOp.add)
            for i, (m0, mt) in enumerate(m_tiles):
                if in_psum:
                    for j, (n0, nt) in enumerate(n_tiles):
                        nisa.tensor_copy(results[i][:, n0 : n0 + nt], groups[i, j])
                queues.store(out[mb0 + m0 : mb0 + m0 + mt, nb0 : nb0 + nb], results[i])
    return out
