"""Tiles of the kernel language: ``ndarray`` in HBM, SBUF or PSUM, and views made by indexing.

Indexing follows numpy (ints and slices with positive steps); a view turns into the hardware
access pattern of an instruction operand: the first remaining dimension is the partition
dimension, the rest are up to 4 strided free dimensions. On-chip tiles are [P, *free] with
P <= partitions, laid out row-major within each partition, like NKI tiles.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hwsim.dtypes import DType
from hwsim.errors import IllegalInstructionError
from hwsim.isa.ap import MAX_FREE_DIMS, AccessPattern, MemorySpace

if TYPE_CHECKING:
    from hwsim.lang.allocator import Block


@dataclass(frozen=True)
class Buffer:
    """Where a tile lives: ``hbm``, ``sbuf`` or ``psum`` (NKI's ``buffer=`` argument)."""

    memory: MemorySpace

    def __repr__(self) -> str:
        return self.memory.value


hbm = Buffer(MemorySpace.HBM)
sbuf = Buffer(MemorySpace.SBUF)
psum = Buffer(MemorySpace.PSUM)


class Tile:
    """A kernel tensor. Created with ``ndarray(...)``; index it to get views for instructions.

    On-chip tiles own a block of their memory for as long as the Python object lives (views keep
    their tile alive); when the last reference goes, the block returns to the pool for reuse.
    """

    def __init__(
        self,
        name: str,
        shape: tuple[int, ...],
        dtype: DType,
        buffer: Buffer,
        *,
        start_partition: int = 0,
        offset_bytes: int = 0,
        block: Block | None = None,
    ) -> None:
        self.name = name
        self.shape = tuple(int(n) for n in shape)
        self.dtype = dtype
        self.buffer = buffer
        self.start_partition = start_partition
        self.offset_bytes = offset_bytes
        self.block = block  # the allocator's record; released when this object dies
        #: Access patterns already made from views of this tile, by view geometry and place:
        #: kernels index the same tiles the same way in every loop iteration.
        self._aps: dict[tuple[Any, ...], AccessPattern] = {}
        self._full_dims = tuple((0, n, 1) for n in self.shape)
        self._full_kept = tuple(range(len(self.shape)))
        #: The views indexing gave, as ``View._entry`` lists: ``tile[index]`` by
        #: ``_index_key(index)``; ``view[index]`` in the view's entry by the key (in
        #: ``_subviews`` by (its dims, its kept, the key) for a view with no entry). Kept here,
        #: with no reference to a view: a view refers to its tile, and a cycle would delay
        #: freeing the tile's block.
        self._views: dict[tuple[Any, ...], list[Any]] = {}
        self._subviews: dict[tuple[Any, ...], list[Any]] = {}

    @property
    def memory(self) -> MemorySpace:
        return self.buffer.memory

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        return f"{self.name}: {self.buffer}[{', '.join(map(str, self.shape))}] {self.dtype}"

    def _element_strides(self) -> tuple[int, ...]:
        """Strides in elements of each dimension (the partition dim has stride 0 on chip)."""
        strides = []
        step = 1
        for n in reversed(self.shape[1:] if self.memory is not MemorySpace.HBM else self.shape):
            strides.append(step)
            step *= n
        strides.reverse()
        if self.memory is MemorySpace.HBM:
            return tuple(strides)
        return (0, *strides)

    def full(self) -> View:
        return View(self, self._full_dims, self._full_kept)

    def __getitem__(self, index: Any) -> View:
        key = _index_key(index)
        if key is None:
            return _index(self, self._full_dims, self._full_kept, index, None)
        found = self._views.get(key)
        if found is None:
            view = _index(self, self._full_dims, self._full_kept, index, None)
            found = self._views[key] = [view.dims, view.kept, None, 0, 0, None]
        return View(self, found[0], found[1], found)

    def ap(self) -> AccessPattern:
        return self.full().ap()


class IndexingError(IllegalInstructionError):
    """An index or slice of a tile or view that is out of its bounds or of an unsupported kind."""


def _where() -> str:
    """``file:line: `` of the kernel line doing the indexing (for messages)."""
    from hwsim.lang.kernel import source_location  # kernel imports this module

    return f"{source_location()}: "


def _as_int(value: Any) -> int | None:
    """An index or slice bound as an int, or None if it is not one (ints and numpy ints only:
    ``int()`` would truncate a float, and a bool is not a position)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _slice_text(item: slice) -> str:
    """``start:stop[:step]`` as written in the kernel."""
    parts = [
        "" if item.start is None else str(item.start),
        "" if item.stop is None else str(item.stop),
    ]
    if item.step is not None:
        parts.append(str(item.step))
    return ":".join(parts)


class View:
    """A strided window onto a tile: per tile dimension (start, count, step), some dims kept."""

    def __init__(
        self,
        tile: Tile,
        dims: tuple[tuple[int, int, int], ...],
        kept: tuple[int, ...],
        entry: list[Any] | None = None,
    ) -> None:
        self.tile = tile
        self.dims = dims
        self.kept = kept
        #: The tile's cache entry of this view's geometry, when indexing found one:
        #: [dims, kept, access pattern or None, start partition, offset] (``ap``), and the
        #: entries of its subviews by index key (None until it is indexed).
        self._entry = entry

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.dims[d][1] for d in self.kept)

    @property
    def dtype(self) -> DType:
        return self.tile.dtype

    def __repr__(self) -> str:
        return f"{self.tile.name}{list(self.shape)}"

    def element_slice(self, dim: int, index: int) -> View:
        """This view with dimension ``dim`` narrowed to its element ``index`` (kept, of size
        1): one slice of an instruction cut along ``dim`` (``hwsim.lang.wide_views``)."""
        return self[(slice(None),) * dim + (slice(index, index + 1),)]

    def __getitem__(self, index: Any) -> View:
        tile = self.tile
        key = _index_key(index)
        if key is None:
            return _index(tile, self.dims, self.kept, index, self)
        entry = self._entry
        if entry is not None:  # its subviews by index alone (hashing dims each time is slower)
            subviews = entry[5]
            if subviews is None:
                subviews = entry[5] = {}
        else:
            subviews = tile._subviews
            key = (self.dims, self.kept, key)
        found = subviews.get(key)
        if found is None:
            view = _index(tile, self.dims, self.kept, index, self)
            found = subviews[key] = [view.dims, view.kept, None, 0, 0, None]
        return View(tile, found[0], found[1], found)

    def _name(self) -> str:
        """The tile's name, with the view's shape when this is a window onto part of it."""
        full = self.kept == tuple(range(self.tile.ndim)) and all(
            d == (0, n, 1) for d, n in zip(self.dims, self.tile.shape, strict=True)
        )
        return self.tile.name if full else f"{self.tile.name} (view {list(self.shape)})"

    def _fail(self, message: str) -> IndexingError:
        """The error for a bad index: where in the kernel, which tile or view, what is wrong
        (built only when raised: finding the source line walks the stack)."""
        return IndexingError(f"{_where()}{self._name()}: {message}")

    def _slice(self, item: slice, position: int, count: int) -> tuple[int, int, int]:
        """(first, count, step) of ``item`` within a dimension of ``count`` elements.

        Bounds are checked, never clamped: numpy would silently shorten ``x[0:256]`` of a
        128-row tile to 128 rows, which makes a wrong tile size look like a working kernel.
        Negative bounds are refused too (NKI documents no negative slice bounds; a kernel that
        means "the last k" writes ``n - k``)."""
        step = 1 if item.step is None else _as_int(item.step)
        first = 0 if item.start is None else _as_int(item.start)
        stop = count if item.stop is None else _as_int(item.stop)
        if None in (step, first, stop):
            raise self._fail(
                f"slice {_slice_text(item)} of dimension {position}: bounds and steps must be "
                "ints (a float would be truncated)"
            )
        assert step is not None and first is not None and stop is not None
        if step > 0 and 0 <= first < stop <= count:
            return first, -(-(stop - first) // step), step
        what = f"slice {_slice_text(item)} of dimension {position} (size {count})"
        if step <= 0:
            raise self._fail(f"{what}: slice steps must be positive, got {step}")
        if first < 0 or stop < 0:
            raise self._fail(
                f"{what} has a negative bound; negative slice bounds are not supported "
                f"(write {count} - k for the last k elements)"
            )
        if first >= count:
            raise self._fail(f"{what} is out of bounds; valid starts are 0..{count - 1}")
        if stop > count:
            raise self._fail(f"{what} is out of bounds; valid stops are {first + 1}..{count}")
        raise self._fail(f"{what} is empty; the stop must be above the start")

    def _int_index(self, item: Any, position: int, count: int) -> int:
        """An int index (negative counts from the end, as in numpy), bounds checked."""
        value = _as_int(item)
        if value is None:
            raise self._fail(
                f"index {item!r} of dimension {position} must be an int or a slice, "
                f"not {type(item).__name__}"
            )
        if not -count <= value < count:
            raise self._fail(
                f"index {value} out of range for size {count} of dimension {position} "
                f"(valid: {-count}..{count - 1})"
            )
        return value + count if value < 0 else value

    def ap(self) -> AccessPattern:
        """The access pattern of this view as an instruction operand (made once per view
        geometry of the tile at its current place)."""
        tile = self.tile
        entry = self._entry
        if (
            entry is not None
            and entry[2] is not None
            and entry[3] == tile.start_partition
            and entry[4] == tile.offset_bytes
        ):
            return entry[2]
        key = (self.dims, self.kept, tile.start_partition, tile.offset_bytes)
        found = tile._aps.get(key)
        if found is None:
            found = tile._aps[key] = self._make_ap()
        if entry is not None:  # the same object ``_aps`` holds: identity is kept
            entry[2], entry[3], entry[4] = found, tile.start_partition, tile.offset_bytes
        return found

    def _make_ap(self) -> AccessPattern:
        tile = self.tile
        strides = tile._element_strides()
        size = tile.dtype.itemsize
        base_elements = sum(
            start * stride for (start, _, _), stride in zip(self.dims, strides, strict=True)
        )
        kept = list(self.kept) or [0]
        if tile.memory is MemorySpace.HBM and len(kept) == 1:  # a 1-D view is one row
            partitions, partition_stride, free_axes, start_partition = 1, 0, kept, 0
        elif tile.memory is MemorySpace.HBM:
            partition_axis, free_axes = kept[0], kept[1:]
            partitions = self.dims[partition_axis][1]
            partition_stride = strides[partition_axis] * self.dims[partition_axis][2]
            start_partition = 0
        else:
            if kept[0] != 0:  # the partition dim was indexed away: one partition remains
                partitions, free_axes = 1, kept
                start_partition = tile.start_partition + self.dims[0][0]
            else:
                start, partitions, step = self.dims[0]
                if step != 1:
                    raise IllegalInstructionError(
                        f"{tile.name}: the partition dimension cannot be strided (step {step})"
                    )
                start_partition, free_axes = tile.start_partition + start, kept[1:]
            partition_stride = 0
        sizes = tuple(self.dims[a][1] for a in free_axes) or (1,)
        free_strides = tuple(strides[a] * self.dims[a][2] for a in free_axes) or (1,)
        return view_pattern(
            tile,
            self.shape,
            start_partition,
            partitions,
            partition_stride,
            tile.offset_bytes + base_elements * size,
            sizes,
            free_strides,
        )


class TooManyFreeDims(IllegalInstructionError):
    """A view whose free dims do not merge into an access pattern's ``MAX_FREE_DIMS``."""


def view_pattern(
    tile: Tile,
    shape: tuple[int, ...],
    start_partition: int,
    partitions: int,
    partition_stride: int,
    offset_bytes: int,
    sizes: tuple[int, ...],
    strides: tuple[int, ...],
    hint: str = "",
) -> AccessPattern:
    """The access pattern of a view of ``tile`` (``shape``) with these free dims (elements);
    adjacent dims contiguous together are merged only when there are more than the hardware's
    ``MAX_FREE_DIMS``, and more that do not merge are an error (``hint``: what to do instead)."""
    if len(sizes) > MAX_FREE_DIMS:
        sizes, strides = _merge_free_dims(sizes, strides)
    if len(sizes) > MAX_FREE_DIMS:
        raise TooManyFreeDims(
            f"{tile.name}: view {list(shape)} needs {len(sizes)} free dims "
            f"(hardware access patterns have at most {MAX_FREE_DIMS}, and the strides "
            f"{list(strides)} do not merge){hint}"
        )
    return AccessPattern(
        tile.memory,
        tile.dtype,
        start_partition,
        partitions,
        offset_bytes,
        sizes,
        strides,
        partition_stride,
        tile.name if tile.memory is MemorySpace.HBM else "",
    )


def _merge_free_dims(
    sizes: tuple[int, ...], strides: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Merge adjacent free dims that are contiguous with each other (fewer, longer dims)."""
    merged_sizes = [sizes[-1]]
    merged_strides = [strides[-1]]
    for n, s in zip(reversed(sizes[:-1]), reversed(strides[:-1]), strict=True):
        if n == 1:
            continue
        if merged_sizes[0] == 1:
            merged_sizes[0], merged_strides[0] = n, s
        elif s == merged_sizes[0] * merged_strides[0]:
            merged_sizes[0] *= n
        else:
            merged_sizes.insert(0, n)
            merged_strides.insert(0, s)
    return tuple(merged_sizes), tuple(merged_strides)


def _index_key(index: Any) -> tuple[Any, ...] | None:
    """A hashable key equal only for indices selecting the same view: plain ints and slices of
    plain ints (a slice does not hash before Python 3.12), or None for anything else (numpy
    ints, floats, bools: equal to ints as keys, yet treated apart or refused by ``_index``)."""
    items = index if type(index) is tuple else (index,)
    key = []
    for item in items:
        kind = type(item)
        if kind is int:
            key.append(item)
        elif kind is slice:
            first, stop, step = item.start, item.stop, item.step
            if (
                (first is None or type(first) is int)
                and (stop is None or type(stop) is int)
                and (step is None or type(step) is int)
            ):
                key.append((first, stop, step))
            else:
                return None
        else:
            return None
    return tuple(key)


def _index(
    tile: Tile,
    dims_in: tuple[tuple[int, int, int], ...],
    kept_in: tuple[int, ...],
    index: Any,
    view: View | None,
) -> View:
    """The view ``index`` selects of the view (``view``; None: the whole tile) with these dims.

    Plain int bounds in range take the inline paths below; anything else (numpy ints, bad
    bounds, other types) goes through ``View._slice`` / ``View._int_index``, which also raise
    the errors (kernels index tiles in every loop iteration, so the common case stays short).
    """
    if not isinstance(index, tuple):
        index = (index,)
    if len(index) > len(kept_in):
        raise (view or View(tile, dims_in, kept_in))._fail(
            f"{len(index)} indices for a view of {len(kept_in)} dims"
        )
    dims = list(dims_in)
    kept = []
    for position, item in enumerate(index):
        axis = kept_in[position]
        start, count, step = dims[axis]
        if type(item) is slice:
            first, stop, stride = item.start, item.stop, item.step
            if first is None:
                first = 0
            if stop is None:
                stop = count
            if stride is None:
                stride = 1
            if (
                type(first) is int
                and type(stop) is int
                and type(stride) is int
                and stride > 0
                and 0 <= first < stop <= count
            ):
                new_count = -(-(stop - first) // stride)
            else:
                first, new_count, stride = (view or View(tile, dims_in, kept_in))._slice(
                    item, position, count
                )
            dims[axis] = (start + first * step, new_count, step * stride)
            kept.append(axis)
        else:
            if type(item) is not int or not -count <= item < count:
                item = (view or View(tile, dims_in, kept_in))._int_index(item, position, count)
            elif item < 0:
                item += count
            dims[axis] = (start + item * step, 1, step)
    if len(index) < len(kept_in):
        kept.extend(kept_in[len(index) :])
    return View(tile, tuple(dims), tuple(kept))


Operand = Tile | View


def broadcast_to(operand: Operand, shape: tuple[int, ...]) -> View:
    """An on-chip ``operand`` read as ``shape`` (numpy's rule, same rank): each free dim of size
    1 may repeat ``n`` times with step 0, so an instruction reads its one element ``n`` times.

    Access-pattern strides are signed element counts (HARDWARE.md §1.4 [S24-aps]), and 0 is one
    of them: a [P, 1] column viewed as [P, N] costs an engine what any [P, N] operand costs,
    while the DMA that filled it moved P elements, not P x N. Only for instructions to read:
    writing through such a view would write one element N times. The partition dim cannot
    repeat (every partition is its own lane, §1.4 [S1]): copy a row to every partition with a
    DMA whose partition stride is 0, or a ones-vector matmul.
    """
    view = operand.full() if isinstance(operand, Tile) else operand
    target = tuple(int(n) for n in shape)
    if view.tile.memory is MemorySpace.HBM:
        raise view._fail("broadcast_to views on-chip tiles; an HBM access pattern takes stride 0")
    if len(target) != len(view.kept):
        raise view._fail(f"broadcast_to {list(target)}: the view has {len(view.kept)} dims")
    dims = list(view.dims)
    for position, (axis, n) in enumerate(zip(view.kept, target, strict=True)):
        start, count, _ = dims[axis]
        if count == n:
            continue
        if count != 1 or n < 1:
            raise view._fail(f"cannot broadcast dimension {position} of size {count} to {n}")
        if position == 0:
            raise view._fail(
                f"cannot broadcast the partition dimension to {n}: every partition is its own "
                "lane (load the row into every partition with a DMA of partition stride 0)"
            )
        dims[axis] = (start, n, 0)
    return View(view.tile, tuple(dims), view.kept)


def as_ap(operand: Operand, what: str) -> AccessPattern:
    """The access pattern of a tile or view argument (a clear error for anything else)."""
    if isinstance(operand, (Tile, View)):
        return operand.ap()
    raise IllegalInstructionError(
        f"{what}: expected a tile or a view of one, got {type(operand).__name__}"
    )
