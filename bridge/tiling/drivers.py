"""Tile loops shared by the lowerings: elementwise maps, free-axis reductions and whole-row ops.

Each driver plans tiles over HBM operands (``bridge.tiling.space``), loads every input tile into
SBUF (DMA, casting to the tile dtype), lets the caller emit the compute instructions for one tile,
and stores the result (DMA, casting to the output's dtype). Operand tiles rotate over
``TilingOptions.buffers`` SBUF buffers, so the loads of the next tile overlap the compute of this
one; loads are triggered by the Sync engine, stores by GpSimdE (``DmaQueues``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hwsim import lang
from hwsim.bridge.context import LoweringContext
from hwsim.bridge.tiling.broadcast import OperandLoader
from hwsim.bridge.tiling.estimate import tile_cost, transfer_ns
from hwsim.bridge.tiling.rows import row_budget
from hwsim.bridge.tiling.space import TileRef, plan
from hwsim.bridge.values import HbmValue
from hwsim.dtypes import DType
from hwsim.kernels.ops import AluOp, ReduceOp
from hwsim.lang import isa as nisa
from hwsim.lang.tiles import Tile, View
from hwsim.library.common import BufferRing

Operand = Tile | View
#: Emit one tile's compute: (dst tile, input tiles), all [partitions, free elements].
TileCompute = Callable[[Operand, list[Operand]], object]  # what it returns is ignored
#: Emit one row tile's compute for a whole-row op: (dst, src) tiles [partitions, row elements].
RowCompute = Callable[[Operand, Operand], None]

#: How partial results of a reduction combine (the reduce op applied to two partials).
COMBINE = {ReduceOp.add: AluOp.add, ReduceOp.max: AluOp.max, ReduceOp.min: AluOp.min}


def _largest(tiles: list[TileRef]) -> tuple[int, int]:
    return max(t.partitions for t in tiles), max(t.free_elements for t in tiles)


def map_tiles(
    ctx: LoweringContext,
    out: HbmValue,
    inputs: Sequence[HbmValue],
    compute: TileCompute,
    *,
    tile_dtype: DType,
    input_dtypes: Sequence[DType] | None = None,
) -> None:
    """out = compute(inputs), elementwise over ``out.shape``.

    inputs: already broadcast to ``out.shape`` (stride 0 where they broadcast). Each input tile
    is loaded in its ``input_dtypes`` entry (default ``tile_dtype``), by an ``OperandLoader``: a
    broadcast input arrives compact and reaches ``compute`` as a stride-0 view of the tile's
    [partitions, *free dims] shape, a tile equal to the previous one is not loaded again. The
    result tile has ``tile_dtype`` and is cast to ``out.dtype`` by the store.
    """
    operands = (out, *inputs)
    dtypes = [tile_dtype, *(input_dtypes or [tile_dtype] * len(inputs))]
    if len(dtypes) != len(operands):
        raise ValueError(f"{len(inputs)} inputs but {len(dtypes) - 1} input dtypes")
    budget = ctx.free_budget(len(operands), max(d.itemsize for d in dtypes))
    tiles = plan(
        out.shape,
        [(v.offset, v.strides) for v in operands],
        pmax=ctx.partitions_for(inputs),
        free_budget=budget,
        cost=tile_cost(operands, dtypes),
    )
    largest = _largest(tiles)
    loaders = [OperandLoader(ctx, ctx.options.buffers, written=out.name) for _ in inputs]
    results = BufferRing(ctx.options.buffers)
    for tile in ctx.split.mine(tiles):
        shape = (tile.partitions, tile.free_elements)
        srcs = [
            load(tile.ap(i, value), dtypes[i], shape, largest)
            for i, (load, value) in enumerate(zip(loaders, inputs, strict=True), start=1)
        ]
        dst = results(shape, tile_dtype, lang.sbuf, max_shape=largest)
        compute(dst, srcs)
        ctx.queues.store(tile.ap(0, out), dst)


def _plan_pair(
    ctx: LoweringContext, shape: Sequence[int], out: HbmValue, src: HbmValue, **how: Any
) -> list[TileRef]:
    """Tiles of ``shape`` over ``out`` (operand 0 of each tile: ``tile.ap(0, out)``) and ``src``
    (operand 1) on up to ``ctx.pmax`` partitions; ``how``: the rest of ``plan``'s options."""
    layouts = [(out.offset, out.strides), (src.offset, src.strides)]
    return plan(shape, layouts, pmax=ctx.pmax, **how)


def copy_tiles(ctx: LoweringContext, out: HbmValue, src: HbmValue) -> None:
    """out = src (any strides, dtype cast by the DMA), one HBM -> HBM DMA per tile."""
    budget = ctx.free_budget(1, 4) * ctx.pmax  # no SBUF involved: tiles only bound descriptors
    config = lang.config()

    def cost(tile: TileRef) -> float:  # the busiest DMA engine's time (its rows split them)
        return transfer_ns(config, tile.ap(1, src), tile.ap(0, out))

    tiles = _plan_pair(ctx, out.shape, out, src, free_budget=budget, cost=cost)
    for tile in ctx.split.mine(tiles):
        nisa.dma_copy(tile.ap(0, out), tile.ap(1, src), queue=ctx.queues.side_queue)


def reduce_tiles(
    ctx: LoweringContext,
    src: HbmValue,
    out: HbmValue,
    reduce_dims: Sequence[int],
    op: ReduceOp,
    *,
    scale: float | None = None,
) -> None:
    """out = reduce(src) over ``reduce_dims`` (times ``scale``), accumulating in fp32 (in int32
    for integer ``src``: exact, the partials combined on GpSimdE's int32 datapath).

    out: a view shaped like ``src`` with stride 0 on the reduced dims (keepdim view expanded).
    Rows go on partitions, reduced elements on the free axis (``tensor_reduce``); reduced dims
    that do not fit one tile are accumulated across tiles.
    """
    tile_dtype = ctx.tile_dtype(src.dtype)
    acc_dtype, engine = (lang.float32, "vector") if tile_dtype.is_float else ("int32", "gpsimd")
    budget = ctx.free_budget(1, tile_dtype.itemsize)
    tiles = _plan_pair(ctx, src.shape, out, src, free_budget=budget, reduce_dims=reduce_dims)
    largest = _largest(tiles)
    loads, partials, accs = (BufferRing(ctx.options.buffers) for _ in range(3))
    acc: Operand | None = None
    for tile in (t for run in ctx.split.mine(_runs(tiles)) for t in run):
        ring_x = loads(
            (tile.partitions, tile.free_elements), tile_dtype, lang.sbuf, max_shape=largest
        )
        x = ctx.queues.load_resident(ring_x, tile.ap(1, src))
        if tile.first:
            acc = accs((tile.partitions, 1), acc_dtype, lang.sbuf, max_shape=(largest[0], 1))
            nisa.tensor_reduce(acc, op, x)
        else:
            part = partials((tile.partitions, 1), acc_dtype, lang.sbuf, max_shape=(largest[0], 1))
            nisa.tensor_reduce(part, op, x)
            nisa.tensor_tensor(acc, acc, part, COMBINE[op], engine=engine)
        if tile.last:
            assert acc is not None
            if scale is not None:
                nisa.tensor_scalar(acc, acc, AluOp.multiply, scale)
            ctx.queues.store(tile.ap_rows(0, out), acc)


def _runs(tiles: list[TileRef]) -> list[list[TileRef]]:
    """The tiles of a reduction grouped by the output rows they accumulate into (``first`` to
    ``last``): the units a split hands out whole, so each sum keeps its order."""
    runs: list[list[TileRef]] = []
    for tile in tiles:
        if tile.first or not runs:
            runs.append([])
        runs[-1].append(tile)
    return runs


def row_tile_bytes(ctx: LoweringContext, dtype: DType, *, temporaries: int) -> int:
    """SBUF bytes per row element of ``row_tiles`` (and of a chunked row op with the same
    rings): input and output rings of the tile dtype, plus ``temporaries`` double-buffered
    fp32 tiles."""
    item = ctx.tile_dtype(dtype).itemsize
    return 2 * ctx.options.buffers * item + 2 * 4 * temporaries


def row_tiles(
    ctx: LoweringContext,
    src: HbmValue,
    out: HbmValue,
    dim: int,
    compute: RowCompute,
    *,
    temporaries: int = 1,
) -> None:
    """out = compute(src) for ops that need whole rows along ``dim`` (softmax): each tile holds
    complete rows on its free axis. ``temporaries``: fp32 row tiles compute allocates (for the
    SBUF budget). Raises TilingError when a row does not fit one tile (``rows.plan_rows`` says
    beforehand, for ops that can go by chunks)."""
    tile_dtype = ctx.tile_dtype(src.dtype)
    budget = row_budget(ctx, row_tile_bytes(ctx, src.dtype, temporaries=temporaries))
    tiles = _plan_pair(
        ctx, src.shape, out, src, free_budget=budget, reduce_dims=(dim,), whole_free=True
    )
    largest = _largest(tiles)
    loads, stores = BufferRing(ctx.options.buffers), BufferRing(ctx.options.buffers)
    for tile in ctx.split.mine(tiles):
        shape = (tile.partitions, tile.free_elements)
        ring_x = loads(shape, tile_dtype, lang.sbuf, max_shape=largest)
        x = ctx.queues.load_resident(ring_x, tile.ap(1, src))
        y = stores(shape, tile_dtype, lang.sbuf, max_shape=largest)
        compute(y, x)
        ctx.queues.store(tile.ap(0, out), y)
