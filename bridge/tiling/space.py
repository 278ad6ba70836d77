"""Tiling an iteration space over strided HBM operands into [partitions, free] tiles.

Like PyTorch's TensorIterator: every operand (output first, then inputs, all broadcast to the
iteration shape with stride 0 where they broadcast) is described by its element offset and
strides; size-1 dims are dropped and adjacent dims are merged ("coalesced") where every operand
allows it, so a contiguous tensor of any rank becomes one dim. Then:

- one dim becomes the partition dim (chunked by the partition count, 128): by default the
  largest of the dims left over by the free part, so tiles use as many partitions as they can;
  given a tile ``cost`` (``tiling.estimate``: the DMA descriptors of every operand and the
  compute), a pointwise plan also tries each dim on partitions (the innermost others free) and
  keeps the cheapest, so a dim contiguous in HBM stays on the free axis;
- up to three dims become the free dims of the tile (at most ``free_budget`` elements per
  partition; a single dim larger than that is chunked);
- every other dim is a Python loop over tiles.

A single remaining dim of n elements is split into [rows, cols] (plus a one-row tail when n is not
a multiple) so it still fills the partitions. Reductions name the dims that must sit in the free
part (``reduce_dims``): those never merge with kept dims, reduce dims that do not fit the free part
become loops whose tiles accumulate into the same output tile (``key``, ``first``, ``last``).

Each ``TileRef`` holds, per operand, the offset and strides of its [partitions, *free] window,
and turns into an HBM access pattern (partition stride + up to 3 free dims, any strides): the
DMAs read exactly the elements PyTorch's strided semantics name, whatever the layout.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from hwsim.bridge.values import HbmValue
from hwsim.isa.ap import AccessPattern, MemorySpace

#: Free dims a tile takes at most (hardware access patterns have 4; one is left for callers).
MAX_TILE_FREE_DIMS = 3


#: The cost (any unit, e.g. ns) of one tile of a plan: see ``tiling.estimate``.
TileCost = Callable[["TileRef"], float]


class TilingError(ValueError):
    """The space cannot be tiled as asked (e.g. a whole row does not fit the free budget)."""


@dataclass(frozen=True)
class Dim:
    """One dim of the iteration space: its size and each operand's stride (elements)."""

    size: int
    strides: tuple[int, ...]
    reduce: bool = False


@dataclass(frozen=True)
class TileRef:
    """One tile: per operand, the offset and strides of a [partitions, *free_sizes] window.

    Tiles with the same ``key`` contribute to the same output tile (reductions); ``first`` and
    ``last`` mark the first and last of them. In a pointwise plan every tile has its own key.
    """

    offsets: tuple[int, ...]
    partitions: int
    partition_strides: tuple[int, ...]
    free_sizes: tuple[int, ...]
    free_strides: tuple[tuple[int, ...], ...]
    key: int = 0
    first: bool = True
    last: bool = True

    @property
    def free_elements(self) -> int:
        return math.prod(self.free_sizes)

    def ap(self, operand: int, value: HbmValue) -> AccessPattern:
        """The HBM access pattern of operand ``operand`` (``value`` names its tensor)."""
        return hbm_ap(
            value,
            self.offsets[operand],
            self.partitions,
            self.partition_strides[operand],
            self.free_sizes,
            self.free_strides[operand],
        )

    def ap_rows(self, operand: int, value: HbmValue) -> AccessPattern:
        """[partitions, 1]: one element per partition (the result of a free-axis reduction)."""
        return hbm_ap(
            value, self.offsets[operand], self.partitions, self.partition_strides[operand], (), ()
        )


def hbm_ap(
    value: HbmValue,
    offset: int,
    partitions: int,
    partition_stride: int,
    free_sizes: Sequence[int],
    free_strides: Sequence[int],
) -> AccessPattern:
    """An access pattern into ``value``'s HBM tensor (element offset and strides)."""
    return AccessPattern(
        MemorySpace.HBM,
        value.dtype,
        0,
        partitions,
        offset * value.dtype.itemsize,
        tuple(free_sizes) or (1,),
        tuple(free_strides) or (1,),
        partition_stride if partitions > 1 else 0,
        value.name,
    )


def coalesce(dims: Sequence[Dim]) -> list[Dim]:
    """Drop size-1 dims; merge an outer dim into the next inner one when, for every operand,
    outer stride == inner size * inner stride (and both are reduce dims or both are not)."""
    merged: list[Dim] = []
    for dim in dims:
        if dim.size == 1:
            continue
        if merged:
            outer = merged[-1]
            if outer.reduce == dim.reduce and all(
                o == dim.size * i for o, i in zip(outer.strides, dim.strides, strict=True)
            ):
                merged[-1] = Dim(outer.size * dim.size, dim.strides, dim.reduce)
                continue
        merged.append(dim)
    return merged


def plan(
    shape: Sequence[int],
    operands: Sequence[tuple[int, Sequence[int]]],
    *,
    pmax: int,
    free_budget: int,
    reduce_dims: Sequence[int] = (),
    whole_free: bool = False,
    cost: TileCost | None = None,
) -> list[TileRef]:
    """Tiles covering ``shape`` for operands given as (element offset, strides over ``shape``).

    whole_free: the reduce dims must fit one tile's free part (no accumulation loops); raises
    TilingError otherwise.
    cost: what one tile costs (``tiling.estimate``); a pointwise plan then takes, of the default
    layout and each "dim d on partitions" layout, the one whose tiles cost least in all (the
    default on a tie). Without it, the default layout.
    """
    reduce_set = {d % max(1, len(shape)) for d in reduce_dims}
    dims = coalesce(
        [
            Dim(n, tuple(strides[d] for _, strides in operands), d in reduce_set)
            for d, n in enumerate(shape)
        ]
    )
    offsets = tuple(offset for offset, _ in operands)
    zero = tuple(0 for _ in operands)
    if reduce_set:
        if not any(d.reduce for d in dims):  # every reduced dim has size 1
            dims.append(Dim(1, zero, True))
        return list(_reduction_tiles(offsets, dims, pmax, free_budget, whole_free))
    if not dims:  # a single element
        return [TileRef(offsets, 1, zero, (1,), tuple((1,) for _ in operands))]
    if len(dims) == 1:
        return [
            tile
            for region_offsets, region in _split_1d(offsets, dims[0], pmax, free_budget)
            for tile in _pointwise_tiles(region_offsets, region, free_budget, pmax, cost)
        ]
    return list(_pointwise_tiles(offsets, dims, free_budget, pmax, cost))


def _split_1d(
    offsets: tuple[int, ...], dim: Dim, pmax: int, budget: int
) -> list[tuple[tuple[int, ...], list[Dim]]]:
    """n elements -> [rows, cols] (rows <= about pmax) plus a [1, tail] region."""
    n = dim.size
    cols = max(1, min(budget, -(-n // pmax)))
    rows, tail = divmod(n, cols)
    regions = [(offsets, [Dim(rows, tuple(s * cols for s in dim.strides)), Dim(cols, dim.strides)])]
    if tail:
        shifted = tuple(o + rows * cols * s for o, s in zip(offsets, dim.strides, strict=True))
        zero = tuple(0 for _ in dim.strides)
        regions.append((shifted, [Dim(1, zero), Dim(tail, dim.strides)]))
    return regions


@dataclass(frozen=True)
class _Layout:
    """Which dim goes on partitions, which on the free axis (chunked by ``split``), which loop."""

    part: int | None
    free: list[int]
    split: int
    loops: list[int]

    def tiles(self, dims: list[Dim], pmax: int) -> int:
        """How many tiles the layout makes."""
        count = math.prod(dims[i].size for i in self.loops)
        if self.part is not None:
            count *= -(-dims[self.part].size // pmax)
        head = dims[self.free[0]].size
        return count * (-(-head // self.split) if self.split else 1)


def _default_layout(dims: list[Dim], budget: int) -> _Layout:
    """The innermost dims free (as many as fit), the largest other dim on partitions."""
    free, split = _choose_free(dims, list(range(len(dims))), budget, keep_one=True)
    rest = [i for i in range(len(dims)) if i not in free]
    part = max(rest, key=lambda i: dims[i].size) if rest else None
    return _Layout(part, free, split, [i for i in rest if i != part])


def _layout_with_partition(dims: list[Dim], budget: int, part: int) -> _Layout:
    """Dim ``part`` on partitions, the innermost of the others free (as many as fit)."""
    others = [i for i in range(len(dims)) if i != part]
    free, split = _choose_free(dims, others, budget, keep_one=False)
    return _Layout(part, free, split, [i for i in others if i not in free])


def _pointwise_tiles(
    offsets: tuple[int, ...], dims: list[Dim], budget: int, pmax: int, cost: TileCost | None
) -> Iterator[TileRef]:
    layout = _default_layout(dims, budget)
    if cost is not None and len(dims) > 1:
        layouts = [layout, *(_layout_with_partition(dims, budget, p) for p in range(len(dims)))]

        def total(candidate: _Layout) -> float:
            first = next(_enumerate(offsets, dims, *_parts(candidate), [], pmax))
            return candidate.tiles(dims, pmax) * cost(first)

        costs = [total(c) for c in layouts]
        layout = layouts[min(range(len(layouts)), key=lambda k: (costs[k], k))]
    yield from _enumerate(offsets, dims, *_parts(layout), [], pmax)


def _parts(layout: _Layout) -> tuple[int | None, list[int], int, list[int]]:
    return layout.part, layout.free, layout.split, layout.loops


def _reduction_tiles(
    offsets: tuple[int, ...], dims: list[Dim], pmax: int, budget: int, whole_free: bool
) -> Iterator[TileRef]:
    reduce = [i for i, d in enumerate(dims) if d.reduce]
    free, split = _choose_free(dims, reduce, budget, keep_one=False)
    reduce_loops = [i for i in reduce if i not in free]
    if whole_free and (split or reduce_loops):
        row = math.prod(dims[i].size for i in reduce)
        raise TilingError(
            f"a row of {row} elements (the reduced dims) does not fit one tile of at most "
            f"{budget} elements per partition in {MAX_TILE_FREE_DIMS} free dims"
        )
    keep = [i for i, d in enumerate(dims) if not d.reduce]
    part = max(keep, key=lambda i: dims[i].size) if keep else None
    keep_loops = [i for i in keep if i != part]
    yield from _enumerate(offsets, dims, part, free, split, keep_loops, reduce_loops, pmax)


def _choose_free(
    dims: list[Dim], candidates: list[int], budget: int, *, keep_one: bool
) -> tuple[list[int], int]:
    """The free dims (a suffix of ``candidates``) and the chunk size of the outermost of them
    (0: not chunked). ``keep_one`` leaves at least one candidate for the partition dim."""
    last = candidates[-1]
    if dims[last].size > budget:
        return [last], budget
    free = [last]
    total = dims[last].size
    floor = 1 if keep_one else 0
    for i in reversed(candidates[floor:-1]):
        if len(free) == MAX_TILE_FREE_DIMS or total * dims[i].size > budget:
            break
        free.insert(0, i)
        total *= dims[i].size
    return free, 0


def _enumerate(
    offsets: tuple[int, ...],
    dims: list[Dim],
    part: int | None,
    free: list[int],
    split: int,
    keep_loops: list[int],
    reduce_loops: list[int],
    pmax: int,
) -> Iterator[TileRef]:
    """Tiles in order: for each output tile (kept loops x partition chunks [x free chunks when
    the free dims are not reduced]) every contribution (reduce loops x free chunks)."""
    count = len(offsets)
    zero = (0,) * count
    part_size = dims[part].size if part is not None else 1
    part_strides = dims[part].strides if part is not None else zero
    head = free[0]
    chunks = (
        [(c, min(split, dims[head].size - c)) for c in range(0, dims[head].size, split)]
        if (split)
        else [(0, dims[head].size)]
    )
    free_is_reduce = dims[head].reduce
    outer = [range(dims[i].size) for i in keep_loops]
    inner = [range(dims[i].size) for i in reduce_loops]
    key = 0
    for keep_index in itertools.product(*outer):
        base = _shift(offsets, dims, keep_loops, keep_index)
        for p0 in range(0, part_size, pmax):
            p = min(pmax, part_size - p0)
            at_p = tuple(o + p0 * s for o, s in zip(base, part_strides, strict=True))
            groups = [chunks] if free_is_reduce else [[c] for c in chunks]
            for group in groups:
                steps = [(r, c) for r in itertools.product(*inner) for c in group]
                for n, (reduce_index, (c0, cn)) in enumerate(steps):
                    at = _shift(at_p, dims, reduce_loops, reduce_index)
                    at = tuple(o + c0 * s for o, s in zip(at, dims[head].strides, strict=True))
                    sizes = (cn, *(dims[i].size for i in free[1:]))
                    strides = tuple(tuple(dims[i].strides[k] for i in free) for k in range(count))
                    yield TileRef(
                        at, p, part_strides, sizes, strides, key, n == 0, n == len(steps) - 1
                    )
                key += 1


def _shift(
    offsets: tuple[int, ...], dims: list[Dim], axes: list[int], index: tuple[int, ...]
) -> tuple[int, ...]:
    if not axes:
        return offsets
    return tuple(
        o + sum(i * dims[a].strides[k] for a, i in zip(axes, index, strict=True))
        for k, o in enumerate(offsets)
    )
