"""Element gathers and scatters: ``gather``, ``scatter`` (src / value), ``scatter_add``,
``index_put`` (with and without ``accumulate``).

Both directions reduce to one flat element (or row) number per index position, computed on the
device in one pass (``element_index``): GpSimdE ``iota`` writes the affine part
sum_{d != dim} i_d * stride_d of every position straight from the tile's coordinates, one
VectorE ``scalar_tensor_tensor`` adds index * stride_dim (through fp32: exact while the numbers
stay below 2**24, checked when lowering).

- **gather** is then the indirect DMA ``dma_gather`` of one-element rows (``tiling/gather.py``):
  one descriptor per output element, O(N) whatever the size of x.
- **scatter** (overwrite) has no indirect-write DMA in the ISA. It is computed per *target*
  row g instead, as a one-hot search on VectorE: winner[g] = max_n (n + 1) * (idx[n] == g), the
  last index position that writes g (torch's CPU kernels write in order, so the last one wins
  on duplicates), then one ``dma_gather`` of the winning source rows and a ``select`` against
  the original value: O(G * N) VectorE work plus O(G * R) DMA.
- **accumulate** (``scatter_add``, ``index_put(accumulate=True)``) is a one-hot matmul on
  TensorE: out[g, :] = x[g, :] + sum_n (idx[n] == g) * src[n, :], K = the index positions
  (``_scatter_add_rows``), accumulated in fp32 PSUM: O(G * N * R) multiply-adds, exact for
  integers within 2**24 and for floats up to the fp32 sum order.

Indices that are graph inputs are bounds-checked every run (``IndexError`` like torch); a
computed index out of range is silently dropped by the scatter (matches no row).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch

from hwsim import lang
from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import HW_FP32, HW_INT32, INT_DTYPES, MOVABLE_DTYPES, NUMERIC_DTYPES
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.lowerings.indexing import EXACT_FP32_INTEGER
from hwsim.bridge.lowerings.views import materialize
from hwsim.bridge.registry import OpCall, register_lowering
from hwsim.bridge.tiling.drivers import copy_tiles, map_tiles
from hwsim.bridge.tiling.gather import gather_rows
from hwsim.bridge.tiling.matmul import HbmMatrix
from hwsim.bridge.tiling.space import hbm_ap, plan
from hwsim.bridge.values import HbmValue
from hwsim.kernels.ops import AluOp, ReduceOp
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing, Evacuator, chunks, reduce_into

aten = torch.ops.aten


def _check_numbers(op: Any, count: int, what: str) -> None:
    if count > EXACT_FP32_INTEGER:
        raise Unsupported(
            op, Reason.SHAPE, f"{count} {what}: element numbers are fp32 (exact to 2**24)"
        )


def _int_index_check(position: int):
    def check(call: OpCall) -> None:
        index = call.args[position]
        if index.dtype not in INT_DTYPES:
            raise Unsupported(call.op, Reason.DTYPE, f"index dtype {index.dtype}")

    return check


def element_index(
    ctx: LoweringContext,
    shape: tuple[int, ...],
    weights: tuple[int, ...],
    index: HbmValue | None = None,
    index_weight: int = 0,
) -> HbmValue:
    """[prod(shape)] int32: sum_d i_d * weights[d] (+ index[i] * index_weight) per position i of
    ``shape``: one iota per tile (the weights act as a virtual operand's strides) and, with an
    index, one fp32 multiply-add."""
    out = ctx.new_value(shape, HW_INT32)
    operands = [(out.offset, out.strides), (0, weights)]
    if index is not None:
        operands.append((index.offset, index.strides))
    tiles = plan(shape, operands, pmax=ctx.pmax, free_budget=ctx.free_budget(3, 4))
    bases, loads = BufferRing(ctx.options.buffers), BufferRing(ctx.options.buffers)
    for tile in tiles:
        size = (tile.partitions, *tile.free_sizes)
        base = bases(size, HW_INT32, lang.sbuf)
        steps = tile.free_strides[1]
        nisa.iota(
            base,
            offset=tile.offsets[1],
            channel_multiplier=tile.partition_strides[1] if tile.partitions > 1 else 0,
            steps=tuple(steps),
        )
        if index is not None:
            idx = loads(size, HW_INT32, lang.sbuf)
            ctx.queues.load(idx, tile.ap(2, index))
            nisa.scalar_tensor_tensor(
                base, idx, AluOp.multiply, float(index_weight), AluOp.add, base
            )
        ctx.queues.store(tile.ap(0, out), base)
    flat = out.view((math.prod(shape),))
    assert flat is not None
    return flat


def _flat_table(x: HbmValue) -> HbmValue:
    """x's storage span as a [G, 1] table of one-element rows (element i at row i)."""
    span = 1 + sum((n - 1) * s for n, s in zip(x.shape, x.strides, strict=True))
    return HbmValue(x.tile, (span, 1), (1, 1), x.offset)


@register_lowering(aten.gather.default, dtypes=MOVABLE_DTYPES, check=_int_index_check(2))
def gather(
    ctx: LoweringContext, x: HbmValue, dim: int, index: HbmValue, *, sparse_grad: bool = False
) -> HbmValue:
    """out[i] = x[i with i_dim = index[i]]: one element per DMA descriptor."""
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    if index.ndim == 0 or x.ndim == 0:
        x, index = x.view((1,)) or x.unsqueeze(0), index.view((1,)) or index.unsqueeze(0)
    dim %= x.ndim
    ctx.check_index_range(index, 0, x.shape[dim], f"gather into a dim of size {x.shape[dim]}")
    _check_numbers(ctx.call.op, _flat_table(x).shape[0], "elements")
    weights = tuple(0 if d == dim else s for d, s in enumerate(x.strides))
    lin = element_index(ctx, index.shape, weights, index, x.strides[dim])
    rows = out.view((out.numel, 1))
    assert rows is not None
    gather_rows(ctx, _flat_table(x), lin, rows)
    return out


# ---- scatters ------------------------------------------------------------------------------


def scatter_rows(
    ctx: LoweringContext,
    out: HbmValue,
    index: HbmValue,
    src: HbmValue,
    *,
    accumulate: bool,
) -> None:
    """out[index[n], :] = src[n, :] (or +=) for out [G, R] (contiguous, holding x already),
    index [N] int32 row numbers, src [N, R] (any strides)."""
    if accumulate:
        _scatter_add_rows(ctx, out, index, src)
    else:
        _scatter_last_wins(ctx, out, index, src)


def _index_on_partitions(
    ctx: LoweringContext, ring: BufferRing, index: HbmValue, n0: int, nt: int, parts: int
) -> Any:
    """index[n0 : n0 + nt] as fp32 on each of ``parts`` partitions (one stride-0 DMA)."""
    ids = ring((parts, nt), lang.float32, lang.sbuf)
    (stride,) = index.strides
    ctx.queues.load(ids, hbm_ap(index, index.offset + n0 * stride, parts, 0, (nt,), (stride,)))
    return ids


def _scatter_last_wins(ctx: LoweringContext, out: HbmValue, index: HbmValue, src: HbmValue):
    """winner[g] = max_n (n + 1) * (index[n] == g) per block of 128 target rows (g on
    partitions, n on the free axis), then out[g] = src[winner[g] - 1] where winner[g] > 0."""
    (g_rows, r_cols), (n_rows,) = out.shape, index.shape
    _check_numbers(ctx.call.op, max(g_rows, n_rows + 1), "rows")
    winner = ctx.new_value((g_rows,), HW_INT32)
    n_block = min(n_rows, ctx.free_budget(4, 4))
    hits, partials, results = (BufferRing(ctx.options.buffers) for _ in range(3))
    row_ids, id_ring = BufferRing(2), BufferRing(2)
    for g0, gt in chunks(g_rows, ctx.pmax):
        g_col = row_ids((gt, 1), lang.float32, lang.sbuf)
        nisa.iota(g_col, offset=g0, channel_multiplier=1, steps=(0,))
        best = results((gt, 1), lang.float32, lang.sbuf)
        for j, (n0, nt) in enumerate(chunks(n_rows, n_block)):
            ids = _index_on_partitions(ctx, id_ring, index, n0, nt, gt)
            rank = hits((gt, nt), lang.float32, lang.sbuf)
            nisa.iota(rank, offset=n0 + 1, channel_multiplier=0, steps=(1,))
            # (ids == g) * (n + 1), then its max along the free axis
            nisa.scalar_tensor_tensor(rank, ids, AluOp.is_equal, g_col, AluOp.multiply, rank)
            reduce_into(best, rank, ReduceOp.max, first=j == 0, partials=partials)
        ctx.queues.store(hbm_ap(winner, winner.offset + g0, gt, 1, (), ()), best)
    # source row of each target (winner - 1, clamped to 0 where nothing writes it)
    pick = ctx.new_value((g_rows,), HW_INT32)
    map_tiles(
        ctx,
        pick,
        [winner],
        lambda d, s: nisa.tensor_scalar(d, s[0], AluOp.subtract, 1.0, op1=AluOp.max, operand1=0.0),
        tile_dtype=HW_INT32,
    )
    picked = ctx.new_value((g_rows, r_cols), out.dtype)
    gather_rows(ctx, _dense_rows(ctx, src), pick, picked)
    tile = ctx.tile_dtype(out.dtype) if out.dtype.is_float else HW_INT32
    flags = BufferRing(2)

    def choose(dst: Any, srcs: list[Any]) -> None:
        hit, new, old = srcs
        flag = flags(tuple(dst.shape), HW_INT32, lang.sbuf)
        nisa.tensor_scalar(flag, hit, AluOp.is_gt, 0.0)
        nisa.select(dst, flag, new, old)

    map_tiles(
        ctx,
        out,
        [winner.unsqueeze(1).expand((g_rows, r_cols)), picked, out],
        choose,
        tile_dtype=tile,
        input_dtypes=[HW_INT32, tile, tile],
    )


def _dense_rows(ctx: LoweringContext, src: HbmValue) -> HbmValue:
    """src [N, R] with unit-stride rows (the DMA gather's table), copied if it has not."""
    if src.shape[1] == 1 or src.strides[1] == 1:
        return src
    return materialize(ctx, src)


def _scatter_add_rows(ctx: LoweringContext, out: HbmValue, index: HbmValue, src: HbmValue):
    """out[g, :] += sum_n (index[n] == g) src[n, :]: per block of 128 targets g and 512
    columns, one matmul per block of 128 index positions n (K), the one-hot [n, g] stationary;
    the PSUM sum is added to x in fp32."""
    (g_rows, r_cols), (n_rows,) = out.shape, index.shape
    lim = ctx.limits
    compute = ctx.tile_dtype(out.dtype) if out.dtype.is_float else HW_FP32
    ids_ring, hots, rows_ring = BufferRing(2), BufferRing(3), BufferRing(3)
    psum, olds, evacuate = BufferRing(2), BufferRing(ctx.options.buffers), Evacuator()
    (index_stride,) = index.strides
    n_tiles = chunks(n_rows, lim.tile_k)
    for g0, gt in chunks(g_rows, lim.tile_m):
        g_row = lang.ndarray((min(n_rows, lim.tile_k), gt), lang.float32, lang.sbuf)
        nisa.iota(g_row, offset=g0, channel_multiplier=0, steps=(1,))
        for r0, rn in chunks(r_cols, lim.tile_n):
            acc = psum((gt, rn), lang.float32, lang.psum)
            for j, (n0, nk) in enumerate(n_tiles):
                ids = ids_ring((nk, 1), lang.float32, lang.sbuf)
                start = index.offset + n0 * index_stride
                ctx.queues.load(ids, hbm_ap(index, start, nk, index_stride, (), ()))
                hot = hots((nk, gt), compute, lang.sbuf)  # hot[n, g] = (index[n] == g)
                nisa.tensor_scalar(hot, g_row[:nk, :], AluOp.is_equal, ids)
                rows = rows_ring((nk, rn), compute, lang.sbuf)
                ctx.queues.load(rows, HbmMatrix(src).block(n0, nk, r0, rn))
                nisa.nc_matmul(acc, hot, rows, is_stationary_onezero=True, accumulate=j > 0)
            old = olds((gt, rn), lang.float32, lang.sbuf)
            ctx.queues.load(old, HbmMatrix(out).block(g0, gt, r0, rn))
            total = olds((gt, rn), lang.float32, lang.sbuf)
            evacuate(total, acc)
            nisa.tensor_tensor(total, total, old, AluOp.add)
            ctx.queues.store(HbmMatrix(out).block(g0, gt, r0, rn), total)


def _copy_of(ctx: LoweringContext, x: HbmValue) -> HbmValue:
    """A new contiguous value holding x (the scatter's destination)."""
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    copy_tiles(ctx, out, x)
    return out


def _scatter(
    ctx: LoweringContext, x: HbmValue, dim: int, index: HbmValue, src: Any, accumulate: bool
) -> HbmValue:
    """scatter / scatter_add along ``dim`` as a flat element scatter into a copy of x."""
    result = out = _copy_of(ctx, x)
    if index.numel == 0:
        return out
    if x.ndim == 0:
        x, out, index = x.unsqueeze(0), out.unsqueeze(0), index.view((1,)) or index.unsqueeze(0)
        if isinstance(src, HbmValue) and src.ndim == 0:
            src = src.unsqueeze(0)
    dim %= x.ndim
    ctx.check_index_range(index, 0, x.shape[dim], f"scatter into a dim of size {x.shape[dim]}")
    _check_numbers(ctx.call.op, out.numel, "elements")
    weights = tuple(0 if d == dim else s for d, s in enumerate(out.strides))
    lin = element_index(ctx, index.shape, weights, index, out.strides[dim])
    if isinstance(src, HbmValue):  # the part of src that index covers
        for d, n in enumerate(index.shape):
            src = src.slice(d, 0, n)
    else:
        from hwsim.bridge.lowerings.creation import fill_views

        single = ctx.new_value((1,), out.dtype)
        fill_views(ctx, [single], float(src))
        src = HbmValue(single.tile, index.shape, (0,) * index.ndim, single.offset)
    values = src if src.view((index.numel, 1)) is None else src.view((index.numel, 1))
    if values.shape != (index.numel, 1):
        values = materialize(ctx, src).view((index.numel, 1))
    table = out.view((out.numel, 1))
    assert table is not None and values is not None
    scatter_rows(ctx, table, lin, values, accumulate=accumulate)
    return result


def _scatter_check(call: OpCall) -> None:
    _int_index_check(2)(call)
    if call.kwargs.get("reduce") is not None:
        raise Unsupported(call.op, Reason.SHAPE, f"scatter reduce={call.kwargs['reduce']!r}")


@register_lowering(
    aten.scatter.src, aten.scatter.value, dtypes=MOVABLE_DTYPES, check=_scatter_check
)
def scatter(ctx: LoweringContext, x: HbmValue, dim: int, index: HbmValue, src: Any) -> HbmValue:
    return _scatter(ctx, x, dim, index, src, accumulate=False)


@register_lowering(aten.scatter_add.default, dtypes=NUMERIC_DTYPES, check=_int_index_check(2))
def scatter_add(
    ctx: LoweringContext, x: HbmValue, dim: int, index: HbmValue, src: HbmValue
) -> HbmValue:
    return _scatter(ctx, x, dim, index, src, accumulate=True)


def _index_put_check(call: OpCall) -> None:
    from hwsim.bridge.lowerings.indexing import _index_check

    _index_check(call)


@register_lowering(
    aten.index_put.default,
    dtypes=MOVABLE_DTYPES,
    check=_index_put_check,
    value_dependent_checked=True,
)
def index_put(
    ctx: LoweringContext,
    x: HbmValue,
    indices: list[HbmValue | None],
    values: HbmValue,
    accumulate: bool = False,
) -> HbmValue:
    """out = x.clone(); out[..., i0, i1, ...] = values (+= with ``accumulate``), adjacent integer
    index tensors broadcast together, rows of the trailing dims scattered whole."""
    from hwsim.bridge.lowerings.indexing import _linear_index, _select

    out = _copy_of(ctx, x)
    first = next(d for d, t in enumerate(indices) if t is not None)
    tensors = [t for t in indices if t is not None]
    k = len(tensors)
    lead, indexed, trail = x.shape[:first], x.shape[first : first + k], x.shape[first + k :]
    for t, size in zip(tensors, indexed, strict=True):
        ctx.check_index_range(t, -size, size, f"index_put into a dim of size {size}")
    shape = tuple(torch.broadcast_shapes(*(t.shape for t in tensors)))
    count, rows, row_elements = math.prod(shape), math.prod(indexed), math.prod(trail)
    if count == 0 or out.numel == 0:
        return out
    _check_numbers(ctx.call.op, max(rows, count + 1), "rows")
    lin = _linear_index(ctx, tensors, indexed, shape, wrap=True)
    table = out.view((*lead, rows, row_elements))
    src = values.expand((*lead, *shape, *trail))
    src_rows = src.view((*lead, count, row_elements))
    if src_rows is None:
        src_rows = materialize(ctx, src).view((*lead, count, row_elements))
    assert table is not None and src_rows is not None
    for at in itertools.product(*(range(n) for n in lead)):
        scatter_rows(ctx, _select(table, at), lin, _select(src_rows, at), accumulate=accumulate)
    return out
