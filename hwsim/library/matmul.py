"""Tiled matmul kernels at three optimisation levels, after the NKI matmul tutorial [S26].

All take ``lhsT`` [K, M] (the left operand delivered transposed, as the hardware wants the
stationary operand) and ``rhs`` [K, N], and return ``out`` [M, N] = lhsT.T @ rhs in lhsT's dtype
(fp32, bf16 or fp16; both inputs the same dtype). Any positive M, K, N is supported: edge tiles
are simply smaller. Matmuls accumulate in fp32 in PSUM.

- ``matmul_basic``: per output tile, load each [K, M] and [K, N] tile, multiply, copy out, store
  (``nki_matmul_tiled_``): small DMAs, no reuse, one PSUM buffer.
- ``matmul_blocked``: stationary reuse: a block of lhsT columns stays in SBUF while every rhs
  tile streams past it (``nki_matmul_block_free_dimension_``); tiles are re-allocated per
  iteration from emptied lists, so loads wait for the previous block's matmuls.
- ``matmul_optimized``: ``nki_matmul_fully_optimized_``: all three dimensions blocked, DMAs of
  [128, BLOCK] (>= 2 KiB per partition), partial sums of each K block folded into SBUF results,
  double-buffered inputs, rotating PSUM banks, loads and stores on separate trigger engines and
  queues, and lhsT kept in SBUF for the whole run when it fits.
"""

from __future__ import annotations

from dataclasses import replace

from hwsim import lang
from hwsim.isa.tensor_ops import MATMUL_DTYPES
from hwsim.lang import isa as nisa
from hwsim.lang.tiles import Tile
from hwsim.library.common import DmaQueues, cdiv, chunks, limits, require
from hwsim.library.optimized_matmul import Blocking, OptimizedMatmul, lhsT_loader


def matmul_shapes(kernel: str, lhsT: Tile, rhs: Tile) -> tuple[int, int, int]:
    """(K, M, N) of a matmul call, after checking what the kernels support."""
    require(
        lhsT.ndim == 2 and rhs.ndim == 2,
        kernel,
        f"lhsT {lhsT.shape} and rhs {rhs.shape} must both be 2-D ([K, M] and [K, N])",
    )
    (k, m), (k2, n) = lhsT.shape, rhs.shape
    require(k == k2, kernel, f"contraction mismatch: lhsT is [K={k}, M], rhs is [K={k2}, N]")
    require(
        lhsT.dtype == rhs.dtype and lhsT.dtype.name in MATMUL_DTYPES and lhsT.dtype.is_float,
        kernel,
        f"lhsT ({lhsT.dtype.name}) and rhs ({rhs.dtype.name}) must share one float dtype "
        f"TensorE multiplies ({', '.join(sorted(MATMUL_DTYPES))})",
    )
    return k, m, n


@lang.kernel
def matmul_basic(lhsT, rhs):
    """out[M, N] = lhsT[K, M].T @ rhs[K, N], one output tile at a time (no reuse)."""
    k, m, n = matmul_shapes("matmul_basic", lhsT, rhs)
    lim = limits()
    out = lang.ndarray((m, n), lhsT.dtype, buffer=lang.hbm, name="out")
    for m0, mt in chunks(m, lim.tile_m):
        for n0, nt in chunks(n, lim.tile_n):
            ps = lang.ndarray((mt, nt), lang.float32, buffer=lang.psum)
            for i, (k0, kt) in enumerate(chunks(k, lim.tile_k)):
                a = lang.ndarray((kt, mt), lhsT.dtype)
                nisa.dma_copy(a, lhsT[k0 : k0 + kt, m0 : m0 + mt])
                b = lang.ndarray((kt, nt), rhs.dtype)
                nisa.dma_copy(b, rhs[k0 : k0 + kt, n0 : n0 + nt])
                nisa.nc_matmul(ps, a, b, accumulate=i > 0)
            res = lang.ndarray((mt, nt), lhsT.dtype)
            nisa.tensor_copy(res, ps)
            nisa.dma_copy(out[m0 : m0 + mt, n0 : n0 + nt], res)
    return out


@lang.kernel
def matmul_blocked(lhsT, rhs, TILES_IN_BLOCK_M=2):
    """out = lhsT.T @ rhs with TILES_IN_BLOCK_M stationary tiles (all of K) kept in SBUF while
    every rhs tile streams past them."""
    k, m, n = matmul_shapes("matmul_blocked", lhsT, rhs)
    require(TILES_IN_BLOCK_M >= 1, "matmul_blocked", "TILES_IN_BLOCK_M must be >= 1")
    lim = limits()
    out = lang.ndarray((m, n), lhsT.dtype, buffer=lang.hbm, name="out")
    k_tiles = chunks(k, lim.tile_k)
    for mb0, mb in chunks(m, lim.tile_m * TILES_IN_BLOCK_M):
        lhsT_tiles = []
        for k0, kt in k_tiles:
            tile = lang.ndarray((kt, mb), lhsT.dtype)
            nisa.dma_copy(tile, lhsT[k0 : k0 + kt, mb0 : mb0 + mb])
            lhsT_tiles.append(tile)
        for n0, nt in chunks(n, lim.tile_n):
            rhs_tiles = []
            for k0, kt in k_tiles:
                tile = lang.ndarray((kt, nt), rhs.dtype)
                nisa.dma_copy(tile, rhs[k0 : k0 + kt, n0 : n0 + nt])
                rhs_tiles.append(tile)
            for m0, mt in chunks(mb, lim.tile_m):
                ps = lang.ndarray((mt, nt), lang.float32, buffer=lang.psum)
                for i, (a, b) in enumerate(zip(lhsT_tiles, rhs_tiles, strict=True)):
                    nisa.nc_matmul(ps, a[:, m0 : m0 + mt], b, accumulate=i > 0)
                res = lang.ndarray((mt, nt), lhsT.dtype)
                nisa.tensor_copy(res, ps)
                nisa.dma_copy(out[mb0 + m0 : mb0 + m0 + mt, n0 : n0 + nt], res)
    return out


#: The tutorial's meta-parameters (TILES_IN_BLOCK_M, _N, _K) [S26].
TUTORIAL_BLOCKS = (16, 2, 8)


@lang.kernel
def matmul_optimized(
    lhsT, rhs, TILES_IN_BLOCK_M=None, TILES_IN_BLOCK_N=None, TILES_IN_BLOCK_K=None
):
    """out = lhsT.T @ rhs, blocked in M, N and K as ``nki_matmul_fully_optimized_``.

    Block sizes default to the tutorial's (16, 2, 8 tiles), clamped to the problem; when those
    do not fit the config's SBUF, K, then N, then M blocks are halved until they do. Sizes given
    explicitly are used as given (an error if they do not fit).
    """
    k, m, n = matmul_shapes("matmul_optimized", lhsT, rhs)
    given = (TILES_IN_BLOCK_M, TILES_IN_BLOCK_N, TILES_IN_BLOCK_K)
    for name, value in zip("MNK", given, strict=True):
        require(
            value is None or value >= 1,
            "matmul_optimized",
            f"TILES_IN_BLOCK_{name}={value} must be >= 1",
        )
    out = lang.ndarray((m, n), lhsT.dtype, buffer=lang.hbm, name="out")
    lim = limits()
    tiles = [d if g is None else g for g, d in zip(given, TUTORIAL_BLOCKS, strict=True)]
    # An expert keeps lhsT in SBUF when it is small (a quarter of SBUF), instead of reloading it.
    resident = cdiv(k, lim.tile_k) * m * lhsT.dtype.itemsize <= lim.sbuf_bytes // 4
    blocking = Blocking(
        tiles_m=tiles[0], tiles_n=tiles[1], tiles_k=tiles[2], lhs_resident=resident
    ).clamped(k, m, n, lim)

    def need() -> int:
        return blocking.sbuf_bytes(k, m, n, lhsT.dtype, lhsT.dtype, lim)

    for axis in (2, 1, 0):  # shrink defaulted K, then N, then M blocks until they fit
        while need() > lim.sbuf_bytes and given[axis] is None and tiles[axis] > 1:
            tiles[axis] //= 2
            blocking = replace(blocking, tiles_m=tiles[0], tiles_n=tiles[1], tiles_k=tiles[2])
    require(
        need() <= lim.sbuf_bytes,
        "matmul_optimized",
        f"blocks of {blocking.tiles_m}x{blocking.tiles_n}x{blocking.tiles_k} tiles need "
        f"{need()} bytes per SBUF partition, more than the {lim.sbuf_bytes} there are: use "
        "smaller TILES_IN_BLOCK_* (results of all M rows for one N block stay in SBUF)",
    )
    queues = DmaQueues()
    OptimizedMatmul(lhsT_loader(lhsT, queues), k, m, rhs, out, blocking, queues).emit()
    return out
