"""Tensor views that name the same memory differently: ``reshape`` (HBM and on chip),
``view(dtype)`` (a bitcast) and ``ap(pattern, offset)`` (an explicit access pattern).

Each is a new ``hwsim.lang`` tile over the memory of the tensor it comes from (the same HBM
tensor name, or the same on-chip block, which keeps the original tile alive), so nothing is
copied and every instruction through the view reads and writes the original's bytes. A view
exists only where the elements it names are contiguous in the original: NKI's rule too
("reshape ... without changing the underlying data layout").
"""

from __future__ import annotations

import math
from typing import Any

from hwsim.isa.ap import MemorySpace
from hwsim.lang.tiles import Tile, View
from hwsim.nki.dtypes import hw_dtype
from hwsim.nki.tensor import NkiTensor, fail


def _shape_arg(call: str, args: tuple[Any, ...], shape: Any) -> tuple[int, ...]:
    """``reshape((a, b))``, ``reshape(a, b)`` or ``reshape(shape=(a, b))``."""
    if shape is None:
        shape = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
    elif args:
        raise fail(call, "give the shape once (positionally or as shape=)")
    dims = tuple(int(n) for n in shape)
    if not dims or any(n < 1 for n in dims):
        raise fail(call, f"shape {list(dims)} must be non-empty and positive")
    return dims


def _window(t: NkiTensor, call: str) -> tuple[Tile, int, int, int]:
    """(tile, first partition, first free element, elements) of a view whose elements are
    contiguous in its tile (on chip: per partition, over a run of whole partitions)."""
    view = t.lang_view if isinstance(t.lang_view, View) else t.lang_view.full()
    tile = view.tile
    on_chip = tile.memory is not MemorySpace.HBM
    axes = range(1 if on_chip else 0, tile.ndim)
    if on_chip and (0 not in view.kept or view.dims[0][2] != 1):
        raise fail(call, f"{tile.name}: index the partition dimension with a slice first")
    start, elements, stride, partial = 0, 1, 1, False
    for axis in reversed(axes):  # innermost first: once one is partial, the rest are single
        first, count, step = view.dims[axis]
        if count > 1 and (step != 1 or partial):
            raise fail(call, f"{tile.name}: the view {list(t.shape)} is not contiguous")
        partial = partial or count != tile.shape[axis]
        start += first * stride
        elements *= count
        stride *= tile.shape[axis]
    return tile, view.dims[0][0] if on_chip else 0, start, elements


def _alias(base: Tile, shape: tuple[int, ...], dtype: Any, partition: int, offset: int) -> Tile:
    alias = Tile(
        base.name,
        shape,
        dtype,
        base.buffer,
        start_partition=base.start_partition + partition,
        offset_bytes=base.offset_bytes + offset,
        block=base.block,
    )
    alias._base = base  # type: ignore[attr-defined]  # the block is the base's: keep it alive
    return alias


def reshape(t: NkiTensor, *args: Any, shape: Any = None) -> NkiTensor:
    """``t.reshape(shape)``: the same elements in row-major order as ``shape``. On chip the
    partition dimension stays (only the free dimensions are regrouped)."""
    dims = _shape_arg("reshape", args, shape)
    tile, partition, start, elements = _window(t, "reshape")
    if tile.memory is MemorySpace.HBM:
        if math.prod(dims) != elements:
            raise fail("reshape", f"{list(t.shape)} ({elements} elements) to {list(dims)}")
        alias = _alias(tile, dims, tile.dtype, 0, start * tile.dtype.itemsize)
        return NkiTensor(alias, t.owner)
    partitions = t.lang_view.shape[0] if t.ndim else 1
    if dims[0] != partitions or math.prod(dims[1:]) != elements:
        raise fail(
            "reshape",
            f"on-chip {list(t.shape)} to {list(dims)}: the partition dimension ({partitions}) "
            "stays, and the free dimensions keep their element count",
        )
    alias = _alias(tile, dims, tile.dtype, partition, start * tile.dtype.itemsize)
    return NkiTensor(alias, t.owner)


def bitcast(t: NkiTensor, dtype: Any) -> NkiTensor:
    """``t.view(dtype)``: the same bytes read as ``dtype`` (the last dimension rescales)."""
    target = hw_dtype(dtype)
    tile, partition, start, _ = _window(t, "view(dtype)")
    source = tile.dtype.itemsize
    last = t.shape[-1] * source
    if last % target.itemsize:
        raise fail("view", f"the last dimension ({last} bytes) is not a whole number of {target}")
    shape = (*t.shape[:-1], last // target.itemsize)
    alias = _alias(tile, shape, target, partition, start * source)
    return NkiTensor(alias, t.owner)
