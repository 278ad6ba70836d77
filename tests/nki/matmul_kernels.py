"""The NKI matmul tutorial's versions, written from the public tutorial as NKI code (older style:
nl.load / tile-returning nisa.nc_matmul / psum +=; and one in the newer dst= style)."""

import hwsim.nki as nki
import hwsim.nki.isa as nisa
import hwsim.nki.language as nl


@nki.jit
def nki_matmul_tiled_(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    TILE_M, TILE_K, TILE_N = 128, 128, 512
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            res_psum = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                lhsT_tile = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_tile = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                lhsT_tile[...] = nl.load(
                    lhsT[k * TILE_K : (k + 1) * TILE_K, m * TILE_M : (m + 1) * TILE_M]
                )
                rhs_tile[...] = nl.load(
                    rhs[k * TILE_K : (k + 1) * TILE_K, n * TILE_N : (n + 1) * TILE_N]
                )
                res_psum += nisa.nc_matmul(lhsT_tile[...], rhs_tile[...])
            res_sb = nl.copy(res_psum, dtype=result.dtype)
            nl.store(result[m * TILE_M : (m + 1) * TILE_M, n * TILE_N : (n + 1) * TILE_N], res_sb)
    return result


@nki.jit
def nki_matmul_hoist_load_(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    TILE_M, TILE_K, TILE_N = 128, 128, 512
    i_lhsT = nl.mgrid[0:TILE_K, 0:TILE_M]
    i_rhs = nl.mgrid[0:TILE_K, 0:TILE_N]
    for m in nl.affine_range(M // TILE_M):
        lhsT_tiles = []
        for k in nl.affine_range(K // TILE_K):
            lhsT_tiles.append(nl.load(lhsT[k * TILE_K + i_lhsT[0], m * TILE_M + i_lhsT[1]]))
        for n in nl.affine_range(N // TILE_N):
            rhs_tiles = []
            for k in nl.affine_range(K // TILE_K):
                rhs_tiles.append(nl.load(rhs[k * TILE_K + i_rhs[0], n * TILE_N + i_rhs[1]]))
            res_psum = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                res_psum += nl.matmul(lhsT_tiles[k], rhs_tiles[k], transpose_x=True)
            res_sb = nl.copy(res_psum, dtype=result.dtype)
            nl.store(result[m * TILE_M : (m + 1) * TILE_M, n * TILE_N : (n + 1) * TILE_N], res_sb)
    return result


@nki.jit
def nki_matmul_block_free_dimension_(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    TILE_M, TILE_K, TILE_N = 128, 128, 512
    BM, BN = 2, 2
    for mb in nl.affine_range(M // (TILE_M * BM)):
        lhsT_tiles = [
            [
                nl.load(
                    lhsT[
                        k * TILE_K : (k + 1) * TILE_K,
                        (mb * BM + bm) * TILE_M : (mb * BM + bm + 1) * TILE_M,
                    ]
                )
                for k in range(K // TILE_K)
            ]
            for bm in range(BM)
        ]
        for nb in nl.affine_range(N // (TILE_N * BN)):
            rhs_tiles = [
                [
                    nl.load(
                        rhs[
                            k * TILE_K : (k + 1) * TILE_K,
                            (nb * BN + bn) * TILE_N : (nb * BN + bn + 1) * TILE_N,
                        ]
                    )
                    for k in range(K // TILE_K)
                ]
                for bn in range(BN)
            ]
            for bm in range(BM):
                for bn in range(BN):
                    res_psum = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
                    for k in range(K // TILE_K):
                        res_psum += nisa.nc_matmul(lhsT_tiles[bm][k], rhs_tiles[bn][k])
                    res_sb = nl.copy(res_psum, dtype=result.dtype)
                    m0 = (mb * BM + bm) * TILE_M
                    n0 = (nb * BN + bn) * TILE_N
                    nl.store(result[m0 : m0 + TILE_M, n0 : n0 + TILE_N], res_sb)
    return result


@nki.jit
def matmul_newer_style(lhsT, rhs):
    """The same as nki_matmul_tiled_ in the newer API: nl.ndarray + nisa.*(dst=...)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                a = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                nisa.dma_copy(dst=b, src=rhs[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            res = nl.ndarray((128, 512), dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=result[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512], src=res)
    return result


@nki.jit
def nki_matmul_fully_optimized_(
    lhsT, rhs, TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8
):
    """The tutorial's fully optimised version: M/N/K blocks, par_dim block tiles, fp32-free
    partial sums kept in SBUF across the sequential K blocks."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    TILE_M, TILE_K, TILE_N = 128, 128, 512
    BLOCK_M = TILE_M * TILES_IN_BLOCK_M
    BLOCK_N = TILE_N * TILES_IN_BLOCK_N
    BLOCK_K = TILE_K * TILES_IN_BLOCK_K
    NUM_BLOCK_M, NUM_BLOCK_N, NUM_BLOCK_K = M // BLOCK_M, N // BLOCK_N, K // BLOCK_K
    for n in nl.affine_range(NUM_BLOCK_N):
        result_tiles = nl.zeros(
            (NUM_BLOCK_M, TILES_IN_BLOCK_M, TILES_IN_BLOCK_N, nl.par_dim(TILE_M), TILE_N),
            dtype=lhsT.dtype,
            buffer=nl.sbuf,
        )
        for k in nl.sequential_range(NUM_BLOCK_K):
            i_rhs = nl.mgrid[0:TILE_K, 0:BLOCK_N]
            rhs_tiles = nl.ndarray(
                (TILES_IN_BLOCK_K, nl.par_dim(TILE_K), BLOCK_N), dtype=rhs.dtype, buffer=nl.sbuf
            )
            for bk_r in nl.affine_range(TILES_IN_BLOCK_K):
                rhs_tiles[bk_r, i_rhs.p, i_rhs.x] = nl.load(
                    rhs[(TILES_IN_BLOCK_K * k + bk_r) * TILE_K + i_rhs.p, BLOCK_N * n + i_rhs.x]
                )
            for m in nl.affine_range(NUM_BLOCK_M):
                i_lhsT = nl.mgrid[0:TILE_K, 0:BLOCK_M]
                lhsT_tiles = nl.ndarray(
                    (TILES_IN_BLOCK_K, nl.par_dim(TILE_K), BLOCK_M),
                    dtype=lhsT.dtype,
                    buffer=nl.sbuf,
                )
                for bk_l in nl.affine_range(TILES_IN_BLOCK_K):
                    lhsT_tiles[bk_l, i_lhsT.p, i_lhsT.x] = nl.load(
                        lhsT[
                            (TILES_IN_BLOCK_K * k + bk_l) * TILE_K + i_lhsT.p,
                            BLOCK_M * m + i_lhsT.x,
                        ]
                    )
                i_lhsT_mm = nl.mgrid[0:TILE_K, 0:TILE_M]
                i_rhs_mm = nl.mgrid[0:TILE_K, 0:TILE_N]
                i_res_mm = nl.mgrid[0:TILE_M, 0:TILE_N]
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    for bm in nl.affine_range(TILES_IN_BLOCK_M):
                        res_tile = nl.zeros((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(TILES_IN_BLOCK_K):
                            res_tile[...] += nisa.nc_matmul(
                                lhsT_tiles[bk, i_lhsT_mm.p, bm * TILE_M + i_lhsT_mm.x],
                                rhs_tiles[bk, i_rhs_mm.p, bn * TILE_N + i_rhs_mm.x],
                            )
                        result_tiles[m, bm, bn, i_res_mm.p, i_res_mm.x] += res_tile[
                            i_res_mm.p, i_res_mm.x
                        ]
        for m in nl.affine_range(NUM_BLOCK_M):
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                i_res = nl.mgrid[0:TILE_K, 0:TILE_N]
                i_res_packed = nl.mgrid[0:TILE_K, 0:BLOCK_N]
                result_packed = nl.ndarray(
                    (TILE_K, BLOCK_N), dtype=result_tiles.dtype, buffer=nl.sbuf
                )
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    result_packed[i_res.p, bn * TILE_N + i_res.x] = nl.copy(
                        result_tiles[m, bm, bn, i_res.p, i_res.x]
                    )
                nl.store(
                    result[
                        (TILES_IN_BLOCK_M * m + bm) * TILE_K + i_res_packed.p,
                        BLOCK_N * n + i_res_packed.x,
                    ],
                    value=result_packed[i_res_packed.p, i_res_packed.x],
                )
    return result
