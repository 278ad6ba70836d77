"""Row gather with indices computed on the device: out[n, :] = table[index[n], :].

The hardware's answer, and ours wherever it applies, is the indirect DMA ``dma_gather``
(software DGE: GpSimdE writes one descriptor per gathered row at run time, then the DMA engines
move the rows, HARDWARE.md §2.5):

    ids[n]      = index[n0 + n]                  int32 [<=128, 1], one DMA (sync)
    rows[n, :]  = table[ids[n], r0:r0 + rn]      ``dma_gather`` (GpSimdE + DMA engines)
    out[n0 + n, r0:r0 + rn] = rows[n, :]         a store

Its cost is O(N * R) bytes moved plus one descriptor per row, independent of the table's row
count G. It is used when a table row has unit stride (or is one element): the usual embedding
case, and every contiguous ``index_select`` / ``index.Tensor``. An index outside [0, G) stops
the run with an error naming the gather, the partition and the value (torch raises too).

Where a table row is strided (e.g. indexing the rows of a transposed view), a DMA gather would
need one descriptor per element, so the gather stays a one-hot matmul on TensorE, as on a TPU:

    onehotT[g, n] = (index[n] == g)          VectorE ``tensor_scalar(is_equal)`` per G tile
    out[n, r]     = sum_g onehotT[g, n] * table[g, r]     TensorE, G accumulated in PSUM

The indices of an output block (<= 128 rows, the stationary free size) are loaded once onto
every partition by one DMA with partition stride 0; a GpSimdE ``iota`` holds each partition's
row number g. The product is exact: each output element is one table value times 1.0 plus
zeros (fp32 accumulation), so floats come back bit-exact and integers and bools (gathered
through fp32) exactly while |value| <= 2**24. An index outside [0, G) matches no row and gives a
zero row (torch raises; callers check graph inputs with ``LoweringContext.check_index_range``).
The one-hot operand is flagged ``is_stationary_onezero``, so an fp32 gather's matmuls take the
documented 0/1 fast path (2x the fp32 speed, HARDWARE.md §2.1 [S15][S16]).
A table holding inf or NaN would spread NaN (0 * inf) to every row gathered with it. Every
block of 128 indices reads the whole table and runs G/128 x R/512 matmuls: O(N * G * R) work.
"""

from __future__ import annotations

from hwsim import lang
from hwsim.bridge.context import LoweringContext
from hwsim.bridge.dtypes import HW_FP32, HW_INT32
from hwsim.bridge.tiling.matmul import HbmMatrix
from hwsim.bridge.tiling.space import hbm_ap
from hwsim.bridge.values import HbmValue
from hwsim.kernels.ops import AluOp
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing, Evacuator, chunks


def gather_rows(ctx: LoweringContext, table: HbmValue, index: HbmValue, out: HbmValue) -> None:
    """out[n, :] = table[index[n], :] for table [G, R], index [N] (integers), out [N, R]."""
    (_, r_cols), (n_rows,) = table.shape, index.shape
    if out.shape != (n_rows, r_cols):
        raise ValueError(f"gather out shape {out.shape} is not [{n_rows}, {r_cols}]")
    if table.strides[1] == 1 or r_cols == 1:
        _gather_by_dma(ctx, table, index, out)
    else:
        _gather_by_matmul(ctx, table, index, out)


def _gather_by_dma(ctx: LoweringContext, table: HbmValue, index: HbmValue, out: HbmValue) -> None:
    """``dma_gather`` per block of <= 128 indices and row chunk; each block's store is emitted
    after the next block's gather, so GpSimdE (which triggers both) writes the next descriptors
    while the previous rows are still in flight."""
    (g_rows, r_cols), (n_rows,) = table.shape, index.shape
    row_stride, col_stride = table.strides
    (index_stride,) = index.strides
    itemsize = max(table.dtype.itemsize, out.dtype.itemsize)
    ids_ring, rows_ring = BufferRing(2), BufferRing(ctx.options.buffers)
    pending: tuple[int, int, int, int, lang.View] | None = None
    for n0, nt in chunks(n_rows, ctx.pmax):
        ids = ids_ring((nt, 1), HW_INT32, lang.sbuf)
        ctx.queues.load(
            ids, hbm_ap(index, index.offset + n0 * index_stride, nt, index_stride, (), ())
        )
        for r0, rn in chunks(r_cols, ctx.free_budget(1, itemsize)):
            rows = rows_ring((nt, rn), out.dtype, lang.sbuf)
            src = hbm_ap(
                table, table.offset + r0 * col_stride, g_rows, row_stride, (rn,), (col_stride,)
            )
            # The stores' queue: only GpSimdE triggers on it, so its transfers complete in the
            # order they are emitted, which the builder's per-queue completion counts rely on.
            nisa.dma_gather(rows, src, ids, queue=ctx.queues.store_queue)
            if pending is not None:
                _store(ctx, out, *pending)
            pending = (n0, nt, r0, rn, rows)
    if pending is not None:
        _store(ctx, out, *pending)


def _store(
    ctx: LoweringContext, out: HbmValue, n0: int, nt: int, r0: int, rn: int, rows: lang.View
) -> None:
    ctx.queues.store(HbmMatrix(out).block(n0, nt, r0, rn), rows)


def _gather_by_matmul(
    ctx: LoweringContext, table: HbmValue, index: HbmValue, out: HbmValue
) -> None:
    """The one-hot matmul gather (see the module docstring)."""
    (g_rows, r_cols), (n_rows,) = table.shape, index.shape
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
                nisa.nc_matmul(acc, hot, rows, is_stationary_onezero=True, accumulate=j > 0)
            result = results((nt, rn), result_dtype, lang.sbuf)
            evacuate(result, acc)
            ctx.queues.store(HbmMatrix(out).block(n0, nt, r0, rn), result)
