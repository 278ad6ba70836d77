"""Row gather with indices computed on the device: out[n, :] = table[index[n], :] on TensorE.

Our ISA has no indirect (address-from-data) DMA, so a gather whose indices are only known when
the program runs is a one-hot matmul, as on a TPU:

    onehotT[g, n] = (index[n] == g)          VectorE ``tensor_scalar(is_equal)`` per G tile
    out[n, r]     = sum_g onehotT[g, n] * table[g, r]     TensorE, G accumulated in PSUM

The indices of an output block (<= 128 rows, the stationary free size) are loaded once onto
every partition by one DMA with partition stride 0; a GpSimdE ``iota`` holds each partition's
row number g. The product is exact: each output element is one table value times 1.0 plus
zeros (fp32 accumulation), so floats come back bit-exact and integers and bools (gathered
through fp32) exactly while |value| <= 2**24. An index outside [0, G) matches no row and gives a
zero row (torch raises; callers check graph inputs with ``LoweringContext.check_index_range``).
A table holding inf or NaN would spread NaN (0 * inf) to every row gathered with it.

Cost: every block of 128 indices reads the whole table and runs G/128 x R/512 matmuls, i.e.
O(N * G * R) TensorE work — right for small vocabularies and masks, where an indirect DMA would
be the hardware's answer for large ones.
"""

from __future__ import annotations

from bridge.context import LoweringContext
from bridge.dtypes import HW_FP32
from bridge.tiling.matmul import HbmMatrix
from bridge.tiling.space import hbm_ap
from bridge.values import HbmValue
from hwsim import lang
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing, Evacuator, chunks
from kernels.ops import AluOp


def gather_rows(ctx: LoweringContext, table: HbmValue, index: HbmValue, out: HbmValue) -> None:
    """out[n, :] = table[index[n], :] for table [G, R], index [N] (integers), out [N, R]."""
    (g_rows, r_cols), (n_rows,) = table.shape, index.shape
    if out.shape != (n_rows, r_cols):
        raise ValueError(f"gather out shape {out.shape} is not [{n_rows}, {r_cols}]")
    lim = ctx.limits
    compute = ctx.tile_dtype(table.dtype) if table.dtype.is_float else HW_FP32
    g_tiles = chunks(g_rows, lim.tile_k)
    pk = min(g_rows, lim.tile_k)  # partitions a one-hot tile uses
    row_ids = lang.ndarray((pk, len(g_tiles)), lang.float32, lang.sbuf)
    nisa.iota(row_ids, offset=0, channel_multiplier=1, steps=(lim.tile_k,))
    ids_ring, hots, tables = BufferRing(2), BufferRing(3), BufferRing(3)
    psum, results, evacuate = BufferRing(2), BufferRing(ctx.options.buffers), Evacuator()
    result_dtype = compute if out.dtype.is_float else HW_FP32
    (index_stride,) = index.strides
    for n0, nt in chunks(n_rows, lim.tile_m):
        ids = ids_ring((pk, nt), lang.float32, lang.sbuf)
        start = index.offset + n0 * index_stride
        ctx.queues.load(ids, hbm_ap(index, start, pk, 0, (nt,), (index_stride,)))
        for r0, rn in chunks(r_cols, lim.tile_n):
            acc = psum((nt, rn), lang.float32, lang.psum)
            for j, (g0, gk) in enumerate(g_tiles):
                hot = hots((gk, nt), compute, lang.sbuf)  # onehotT[g, n] = (ids[n] == g0 + g)
                nisa.tensor_scalar(hot, ids[:gk, :], AluOp.is_equal, row_ids[:gk, j : j + 1])
                rows = tables((gk, rn), compute, lang.sbuf)
                ctx.queues.load(rows, HbmMatrix(table).block(g0, gk, r0, rn))
                nisa.nc_matmul(acc, hot, rows, accumulate=j > 0)
            result = results((nt, rn), result_dtype, lang.sbuf)
            evacuate(result, acc)
            ctx.queues.store(HbmMatrix(out).block(n0, nt, r0, rn), result)
