"""Access-pattern views: tensor indices that are sums of index expressions (``x[i_p, 2 * i + j]``,
``t[i0, pool * i1 + i2, pool * i3 + i4]``), views with reordered dimensions (a reduction over
axes that are not the innermost) and explicit patterns (``tile.ap([[step, num], ...])``).

A ``Pattern`` keeps, per tensor axis, a constant and the iterators that index it with their
scales, and per result dimension the iterator it runs over: NKI's indexing rule (the result has
the index grid's shape). One iterator is one result dimension; an axis indexed by two iterators
gives two dimensions over one axis (its elements ``scale * v + ...`` apart). A mask narrows an
iterator's range, and the bounds are checked over the ranges as narrowed, so an edge tile is
valid once masked. ``PatternView`` is the kernel-language operand: its access pattern has one
free dimension per result dimension (strides may be 0 or negative, as hardware patterns allow).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any

from hwsim.errors import IllegalInstructionError
from hwsim.isa.ap import MAX_FREE_DIMS, AccessPattern, MemorySpace
from hwsim.lang.tiles import Tile, View, view_pattern

_IDS = itertools.count(1 << 40)  # iterator ids of patterns' own dimensions (apart from nl's)


@dataclass(frozen=True)
class Pattern:
    """axes: per tensor axis (size, element stride, constant, ((iterator, scale), ...));
    on chip axis 0 is the partition axis (its stride counts partitions). dims: the iterator of
    each result dimension (None: a dimension of size 1). ranges: iterator -> (first, count)."""

    axes: tuple[tuple[int, int, int, tuple[tuple[int, int], ...]], ...]
    dims: tuple[int | None, ...]
    ranges: tuple[tuple[int, int, int], ...]  # (iterator, first, count)
    on_chip: bool

    @property
    def range_of(self) -> dict[int, tuple[int, int]]:
        return {v: (lo, n) for v, lo, n in self.ranges}

    @property
    def shape(self) -> tuple[int, ...]:
        ranges = self.range_of
        return tuple(1 if v is None else ranges[v][1] for v in self.dims)

    def out_of_bounds(self) -> str | None:
        """What is outside the tensor, or None."""
        ranges = self.range_of
        for axis, (size, _, const, terms) in enumerate(self.axes):
            lo = hi = const
            for var, scale in terms:
                first, count = ranges[var]
                ends = (scale * first, scale * (first + count - 1))
                lo, hi = lo + min(ends), hi + max(ends)
            if lo < 0 or hi >= size:
                return f"axis {axis} is indexed {lo}..{hi}, outside 0..{size - 1}"
        return None

    def narrowed(self, mask: Any) -> Pattern:
        """The pattern over the ranges ``mask`` keeps (``hwsim.nki.index.Mask``)."""
        ranges = []
        for var, lo, n in self.ranges:
            if var in mask.ranges:
                keep_lo, keep_hi = mask.ranges[var]
                lo, n = lo + keep_lo, max(0, min(keep_hi, n) - keep_lo)
            ranges.append((var, lo, n))
        return replace(self, ranges=tuple(ranges))

    def permuted(self, order: tuple[int, ...]) -> Pattern:
        return replace(self, dims=tuple(self.dims[i] for i in order))

    def geometry(self) -> tuple[int, int, list[tuple[int, int]]]:
        """(first partition or 0, base element offset, [(count, stride)] per result dim)."""
        ranges = self.range_of
        base = partition = 0
        strides: dict[int, int] = {}
        for axis, (_, stride, const, terms) in enumerate(self.axes):
            at = const + sum(scale * ranges[var][0] for var, scale in terms)
            if self.on_chip and axis == 0:
                partition = at
            else:
                base += at * stride
            for var, scale in terms:
                step = scale if (self.on_chip and axis == 0) else scale * stride
                strides[var] = strides.get(var, 0) + step
        dims = [(1, 0) if v is None else (ranges[v][1], strides.get(v, 0)) for v in self.dims]
        return partition, base, dims


class PatternView(View):
    """A kernel-language operand over ``tile`` with the geometry of a ``Pattern``."""

    def __init__(self, tile: Tile, pattern: Pattern) -> None:
        super().__init__(tile, (("pattern", pattern),), ())  # type: ignore[arg-type]
        self.pattern = pattern

    @property
    def shape(self) -> tuple[int, ...]:
        return self.pattern.shape

    def __getitem__(self, index: Any) -> View:
        raise IllegalInstructionError(
            f"{self.tile.name}: index a computed-index view only through an instruction"
        )

    def _name(self) -> str:
        return f"{self.tile.name} (pattern {list(self.shape)})"

    def element_slice(self, dim: int, index: int) -> View:
        """The pattern with the iterator of result dimension ``dim`` held at its element
        ``index``: every axis that iterator indexes moves with it."""
        var = self.pattern.dims[dim]
        if var is None:  # a dimension of one element: nothing to narrow
            return self
        ranges = tuple(
            (v, first + index, 1) if v == var else (v, first, n)
            for v, first, n in self.pattern.ranges
        )
        return PatternView(self.tile, replace(self.pattern, ranges=ranges))

    def ap(self) -> AccessPattern:
        key = (self.dims, self.tile.start_partition, self.tile.offset_bytes)
        found = self.tile._aps.get(key)
        if found is None:
            found = self.tile._aps[key] = self._make_ap()
        return found

    def _make_ap(self) -> AccessPattern:
        tile, size = self.tile, self.tile.dtype.itemsize
        partition, base, dims = self.pattern.geometry()
        if self.pattern.on_chip:
            (partitions, step), free = dims[0], dims[1:]
            if partitions > 1 and step != 1:
                raise IllegalInstructionError(
                    f"{tile.name}: the partition dimension steps by {step} partitions; "
                    "on-chip patterns take consecutive partitions"
                )
            start, partition_stride = tile.start_partition + partition, 0
        else:
            (partitions, partition_stride), free = dims[0], dims[1:]
            start = 0
        free = [d for d in free if d[0] != 1] or [(1, 1)]
        return view_pattern(
            tile,
            self.shape,
            start,
            partitions,
            partition_stride,
            tile.offset_bytes + base * size,
            tuple(n for n, _ in free),
            tuple(s for _, s in free),
            hint="; elementwise instructions are cut into slices that fit, others are not: "
            f"index it in pieces of at most {MAX_FREE_DIMS} free dims (docs/nki.md)",
        )


def of_view(view: Tile | View, axis_vars: tuple[int | None, ...] = ()) -> Pattern:
    """The pattern of a plain tile or view: each kept dimension runs over its iterator in
    ``axis_vars`` (so masks on it still apply), else an iterator of its own."""
    if isinstance(view, PatternView):
        return view.pattern
    full = view.full() if isinstance(view, Tile) else view
    tile = full.tile
    on_chip = tile.memory is not MemorySpace.HBM
    strides = _element_strides(tile)
    axes: list[tuple[int, int, int, tuple[tuple[int, int], ...]]] = []
    dims: list[int | None] = []
    ranges: list[tuple[int, int, int]] = []
    given = iter(axis_vars)
    for axis, (start, count, step) in enumerate(full.dims):
        if axis in full.kept:
            var = next(given, None)
            var = next(_IDS) if var is None or var in dims else var
            dims.append(var)
            ranges.append((var, 0, count))
            axes.append((tile.shape[axis], strides[axis], start, ((var, step),)))
        else:
            axes.append((tile.shape[axis], strides[axis], start, ()))
    return Pattern(tuple(axes), tuple(dims), tuple(ranges), on_chip)


def _element_strides(tile: Tile) -> tuple[int, ...]:
    on_chip = tile.memory is not MemorySpace.HBM
    shape = tile.shape
    strides = [math.prod(shape[a + 1 :]) for a in range(len(shape))]
    if on_chip:
        strides[0] = 1  # counts partitions
    return tuple(strides)


def from_index(tile: Tile, items: tuple[Any, ...]) -> Pattern:
    """The pattern of ``tile[items]``: ints, slices, index expressions and sums of them
    (``hwsim.nki.index``), one iterator per grid position; slices and the axes not indexed
    are further dimensions after the grid's, in axis order."""
    from hwsim.nki.index import IndexExpr, IndexSum, terms_of

    if len(items) > tile.ndim:
        raise IllegalInstructionError(f"{tile.name}: {len(items)} indices for {tile.ndim} dims")
    strides = _element_strides(tile)
    exprs = [i for i in items if isinstance(i, (IndexExpr, IndexSum))]
    position = max(e.ndim for e in exprs) if exprs else 0
    grid: dict[int, tuple[int, int]] = {}  # position -> (iterator, count)
    axes: list[tuple[int, int, int, tuple[tuple[int, int], ...]]] = []
    for axis in range(tile.ndim):
        size = tile.shape[axis]
        item = items[axis] if axis < len(items) else slice(None)
        if isinstance(item, slice):
            start, stop, step = item.indices(size)
            var = next(_IDS)
            grid[position] = (var, len(range(start, stop, step)))
            position += 1
            axes.append((size, strides[axis], start, ((var, step),)))
            continue
        const, terms = terms_of(item)
        for var, _, count, at, _ in terms:
            if grid.setdefault(at, (var, count))[0] != var:
                raise IllegalInstructionError(
                    f"{tile.name}: two iterators at position {at} of the index grid"
                )
        axes.append((size, strides[axis], const, tuple((t[0], t[1]) for t in terms)))
    dims = tuple(grid[p][0] if p in grid else None for p in range(position))
    ranges = tuple((var, 0, count) for var, count in grid.values())
    return Pattern(tuple(axes), dims, ranges, tile.memory is not MemorySpace.HBM)


def explicit(tile: Tile, pairs: list[Any], offset: int = 0) -> Pattern:
    """``tile.ap([[step, num], ...], offset)``: NKI's access pattern, steps in elements of the
    tensor laid out row-major (on chip the first pair is the partition dimension, whose step
    must be the elements of one partition)."""
    on_chip = tile.memory is not MemorySpace.HBM
    free = math.prod(tile.shape[1:]) if on_chip else 1
    total = math.prod(tile.shape)
    dims, ranges, terms = [], [], []
    partition_terms = []
    for i, pair in enumerate(pairs):
        step, num = (int(x) for x in pair)
        var = next(_IDS)
        dims.append(var)
        ranges.append((var, 0, num))
        if on_chip and i == 0:
            if num > 1 and step != free:
                raise IllegalInstructionError(
                    f"{tile.name}.ap: the partition step {step} must be {free} (one partition)"
                )
            partition_terms.append((var, 1))
        else:
            terms.append((var, step))
    axes: tuple[tuple[int, int, int, tuple[tuple[int, int], ...]], ...]
    if on_chip:
        axes = ((tile.shape[0], 1, 0, tuple(partition_terms)), (free, 1, int(offset), tuple(terms)))
    else:
        axes = ((total, 1, int(offset), tuple(terms)),)
    return Pattern(axes, tuple(dims), tuple(ranges), on_chip)


def broadcast(view: Tile | View, axis_vars: tuple[int | None, ...], shape: tuple[int, ...]) -> View:
    """``view`` read as ``shape``: each free dimension of size 1 repeats (stride 0; an on-chip
    operand that instructions read, numpy's broadcasting)."""
    pattern = of_view(view, axis_vars)
    if len(shape) != len(pattern.dims):
        raise IllegalInstructionError(f"broadcast {list(pattern.shape)} to {list(shape)}")
    dims, ranges = list(pattern.dims), list(pattern.ranges)
    for position, (have, want) in enumerate(zip(pattern.shape, shape, strict=True)):
        if have == want:
            continue
        if have != 1 or position == 0:
            raise IllegalInstructionError(f"broadcast {list(pattern.shape)} to {list(shape)}")
        var = next(_IDS)  # an iterator no axis uses: stride 0
        dims[position] = var
        ranges.append((var, 0, want))
    tile = view if isinstance(view, Tile) else view.tile
    return PatternView(tile, replace(pattern, dims=tuple(dims), ranges=tuple(ranges)))
