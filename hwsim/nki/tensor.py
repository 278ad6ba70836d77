"""NKI tensors over kernel-language tiles: indexing with index expressions, Python operators,
masks, multi-buffered allocation, and PSUM results that become matmul accumulation.

``NkiTensor`` wraps a ``hwsim.lang`` tile or view; it remembers which iterator indexes each of
its axes so ``mask=`` can narrow it. ``PendingMatmul`` is what a tile-returning
``nisa.nc_matmul`` / ``nl.matmul`` gives: nothing is emitted until it is used, so
``acc += nisa.nc_matmul(a, b)`` is one matmul accumulating into ``acc`` (the first of a group
with ``accumulate=False``), and any other use puts it in a fresh PSUM tile.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from hwsim.dtypes import DType
from hwsim.errors import IllegalInstructionError
from hwsim.isa.ap import MemorySpace
from hwsim.lang import isa as lisa
from hwsim.lang.allocator import OutOfMemoryError
from hwsim.lang.kernel import current, source_location
from hwsim.lang.kernel import ndarray as lang_ndarray
from hwsim.lang.tiles import Buffer, IndexingError, Tile, View, hbm
from hwsim.nki import index as ix
from hwsim.nki.dtypes import hw_dtype, nki_dtype
from hwsim.nki.state import Allocation, PsumGroup, Slot, state, user_site


def fail(call: str, message: str) -> IllegalInstructionError:
    return IllegalInstructionError(f"{source_location()}: {call}: {message}")


def unsupported_name(
    module: str, prefix: str, table: dict[str, str], name: str, hint: str = ""
) -> Callable[..., Any]:
    """An NKI module's ``__getattr__``: a documented name this simulator lacks (``table``: name
    -> why) is a callable whose call is one clear error naming the kernel line; any other name
    is an AttributeError."""
    if name not in table:
        raise AttributeError(
            f"hwsim.nki.{module} has no '{name}' (docs/nki-support.md lists names)"
        )

    def unsupported(*args: Any, **kwargs: Any) -> Any:
        raise fail(
            f"{prefix}.{name}",
            f"not supported by hwsim.nki: {table[name]}{hint} (docs/nki-support.md)",
        )

    return unsupported


def _operator(name: str, reverse: bool = False) -> Callable[[NkiTensor, Any], NkiTensor]:
    """A Python operator as ``nl.<name>(tile, other)`` (reverse: ``nl.<name>(other, tile)``)."""

    def apply(self: NkiTensor, other: Any) -> NkiTensor:
        return self._op(name, other, reverse)

    return apply


def _inplace_operator(name: str) -> Callable[[NkiTensor, Any], NkiTensor]:
    """An augmented assignment (``tile += other``) as ``nl.<name>`` written into the tile."""

    def apply(self: NkiTensor, other: Any) -> NkiTensor:
        return self._inplace(name, other)

    return apply


class NkiTensor:
    """A tensor of an NKI kernel: an HBM tensor, or an SBUF/PSUM tile, or a view of one."""

    __array_priority__ = 100  # numpy scalars on the left defer to our operators

    def __init__(
        self,
        view: Tile | View,
        owner: Allocation | None = None,
        axis_vars: tuple[int | None, ...] | None = None,
    ) -> None:
        self.lang_view = view
        self.owner = owner
        self.axis_vars = axis_vars if axis_vars is not None else (None,) * len(view.shape)
        #: (tensor, key) of an index that is in bounds only once masked (NKI's masked edge
        #: tiles: ``x[k * 128 + i_p, i_f]`` with ``mask=(k * 128 + i_p < rows)``).
        self.deferred: tuple[NkiTensor, Any, IndexingError] | None = None
        #: The mask the instruction that made this tile wrote it under (only that part holds
        #: values): ``t[idx] = nisa.op(..., mask=m)`` copies that part.
        self.written_mask: Any = None
        #: ``t[index][mask]``: per axis, the (first, end) positions the mask kept of ``t``'s
        #: (None for an axis it left whole); an instruction writing a wider tile from this
        #: operand writes those positions of it (``hwsim.nki.pending.narrowed_like``).
        self.kept: tuple[tuple[int, int, int] | None, ...] | None = None

    @property
    def tile(self) -> Tile:
        return self.lang_view if isinstance(self.lang_view, Tile) else self.lang_view.tile

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.lang_view.shape)

    @property
    def dtype(self) -> Any:
        """The NKI dtype: a numpy dtype (``== nl.bfloat16`` ...); ``hw_dtype`` is hwsim's."""
        return nki_dtype(self.lang_view.dtype)

    @property
    def hw_dtype(self) -> DType:
        return self.lang_view.dtype

    @property
    def buffer(self) -> Buffer:
        return self.tile.buffer

    @property
    def memory(self) -> MemorySpace:
        return self.tile.memory

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"NkiTensor({self.tile.name}, {self.buffer}, {list(self.shape)}, {self.dtype})"

    def __getitem__(self, key: Any) -> Any:
        from hwsim.nki.pending import Pending

        if isinstance(key, ix.Mask | bool | np.bool_):  # t[index][mask]: the view masked
            out = NkiTensor(self.masked(key), self.owner, self.axis_vars)
            if isinstance(key, ix.Mask):
                out.kept = _kept_positions(self, out, key)
            return out
        items = key if isinstance(key, tuple) else (key,)
        if any(isinstance(i, (NkiTensor, Pending)) for i in items):
            return self._indirect(items)
        if ix.needs_pattern(items):
            return self._pattern(items)
        plain, axis_vars = ix.resolve(self.shape, key)
        plain = self._keep_partition_column(plain)
        try:
            view = self.lang_view[plain] if plain else self.lang_view
        except IndexingError as error:
            items = key if isinstance(key, tuple) else (key,)
            if any(isinstance(item, ix.IndexExpr) for item in items):
                shape = _grid_shape(items)
            else:  # plain slices past the end: an edge tile a mask may narrow
                shape = _slice_shape(self.shape, items)
                axis_vars = (None,) * len(shape)
            unresolved: Any = _Unresolved(shape, self.hw_dtype, self.lang_view)
            out = NkiTensor(unresolved, self.owner, axis_vars)
            out.deferred = (self, key, error)
            return out
        if len(axis_vars) != len(view.shape):  # ints dropped axes with no iterator
            axis_vars = tuple(v for v in axis_vars if v is not None)
            axis_vars = (None,) * (len(view.shape) - len(axis_vars)) + axis_vars
        return NkiTensor(view, self.owner, axis_vars)

    def _keep_partition_column(self, plain: tuple[Any, ...]) -> tuple[Any, ...]:
        """On chip, ``t[:, 0]`` keeps a free dimension: it is the [P, 1] column (NKI's tiles
        have a partition dimension and at least one free one), not a 1-D [P]."""
        if self.memory is MemorySpace.HBM or self.ndim < 2 or not plain:
            return plain
        if not isinstance(plain[0], slice) or len(plain) < self.ndim:
            return plain
        ints = [i for i, item in enumerate(plain[1:], 1) if not isinstance(item, slice)]
        if len(ints) != self.ndim - 1 or not all(isinstance(plain[i], int) for i in ints):
            return plain
        last = ints[-1]
        value = plain[last] + self.shape[last] if plain[last] < 0 else plain[last]
        return (*plain[:last], slice(value, value + 1), *plain[last + 1 :])

    def __setitem__(self, key: Any, value: Any) -> None:
        """``t[...] = value``: a copy into the indexed part (the result of ``t[...] += x`` lands
        here too, after ``__iadd__`` already wrote in place)."""
        from hwsim.nki.pending import Pending

        target = self[key]
        if isinstance(value, Pending):
            value.into_tile(target)
            return
        if isinstance(value, NkiTensor) and _same_place(value.lang_view, target.lang_view):
            return  # t[...] += x already wrote in place; nothing to copy
        from hwsim.nki import language_ops

        language_ops.assign(target, value)

    def _indirect(self, items: tuple[Any, ...]) -> Indirect:
        """``table[idx_tile, cols]`` / ``table[b, idx_tile, cols]``: rows picked by an int32
        SBUF tile (for ``nl.load``); ints before the tile pick the table."""
        from hwsim.nki.pending import Pending

        if self.memory is not MemorySpace.HBM:
            raise fail("indirect index", f"{self.tile.name} is on chip; index HBM tables so")
        at = next(i for i, item in enumerate(items) if isinstance(item, (NkiTensor, Pending)))
        if any(not isinstance(i, int) for i in items[:at]):
            raise fail("indirect index", "only ints may come before the index tile")
        table = self[tuple(items[:at])] if at else self
        rest = items[at + 1 :]
        if rest and any(isinstance(i, ix.IndexExpr) for i in rest):
            rest = tuple(slice(None) if isinstance(i, ix.IndexExpr) else i for i in rest)
        rows = table[(slice(None), *rest)] if rest else table
        return Indirect(rows, as_tensor(items[at], "indirect index"))

    def _pattern(self, items: tuple[Any, ...]) -> NkiTensor:
        """An index with sums of index expressions (``hwsim.nki.pattern``)."""
        from hwsim.nki.pattern import PatternView, from_index

        if not isinstance(self.lang_view, Tile) and self.lang_view is not self.tile:
            full = _same_place(self.lang_view, self.tile.full())
            if not full:
                raise fail("index", "index arithmetic on a view: index the whole tensor")
        pattern = from_index(self.tile, items)
        out = NkiTensor(PatternView(self.tile, pattern), self.owner, pattern.dims)
        problem = pattern.out_of_bounds()
        if problem is not None:
            out.deferred = (self, items, IndexingError(f"{source_location()}: {problem}"))
        return out

    def masked(self, mask: Any) -> Tile | View:
        """The view narrowed by ``mask``: on each axis its iterator indexes, or, for an axis with
        no masked iterator, on the masked iterator's grid position when the sizes agree (an
        instruction's operands iterate in lockstep whatever iterators index them: a [P, 1]
        scale indexed by another ``nl.mgrid`` is narrowed with the data it scales)."""
        from hwsim.nki.pattern import PatternView

        if isinstance(mask, bool | np.bool_):  # a comparison of ints: the kernel's constant
            if not mask and not state().dropping:
                raise fail("mask", "a False mask reached an instruction not masked off")
            mask = None
        if self.deferred is not None and state().dropping:
            return self._stand_in()  # out of bounds in a call that emits nothing: its shape
        if isinstance(self.lang_view, PatternView):
            if mask is None:
                if self.deferred is not None:
                    raise self.deferred[2]
                return self.lang_view
            pattern = self.lang_view.pattern.narrowed(mask)
            if 0 in pattern.shape:
                raise fail("mask", "the mask keeps no element (the instruction would do nothing)")
            problem = pattern.out_of_bounds()
            if problem is not None:
                raise fail("index", f"{problem}, even where the mask keeps it")
            return PatternView(self.tile, pattern)
        if self.deferred is not None:
            base, key, error = self.deferred
            if mask is None:
                raise error
            items = key if isinstance(key, tuple) else (key,)
            if not any(isinstance(i, ix.IndexExpr) for i in items):
                return base[_slices_narrowed(items, mask, error)].lang_view
            items = tuple(mask.narrowed(i) if isinstance(i, ix.IndexExpr) else i for i in items)
            if any(isinstance(i, ix.IndexExpr) and i.count < 1 for i in items):
                raise fail("mask", "the mask keeps no element (the instruction would do nothing)")
            return base[items].lang_view
        if mask is None:
            return self.lang_view
        key = []
        for axis, var in enumerate(self.axis_vars):
            if var in mask.ranges:
                key.append(slice(*mask.ranges[var]))
                continue
            hit = next(
                (
                    v
                    for v, (position, count) in mask.places.items()
                    if position == axis and self.shape[axis] == count  # var not in the mask
                ),
                None,
            )
            key.append(slice(*mask.ranges[hit]) if hit is not None else slice(None))
        if all(k == slice(None) for k in key):
            return self.lang_view
        if any(k.start >= k.stop for k in key if k != slice(None)):
            raise fail("mask", "the mask keeps no element (the instruction would do nothing)")
        return self.lang_view[tuple(key)]

    def _stand_in(self) -> Tile:
        """A tile of this view's shape at no place, for a call whose instructions are dropped
        (``hwsim.nki.masking``): its operands need shapes only."""
        return Tile(f"{self.tile.name}.masked_off", self.shape, self.hw_dtype, self.buffer)

    # ---- unsupported numpy-isms: one clear error each -------------------------------------
    def reshape(self, *args: Any, shape: Any = None) -> NkiTensor:
        """The same elements as ``shape`` (a view: nothing is copied; ``hwsim.nki.views``)."""
        from hwsim.nki import views

        return views.reshape(self, *args, shape=shape)

    def view(self, dtype: Any) -> NkiTensor:
        """The same bytes as ``dtype`` (a bitcast view)."""
        from hwsim.nki import views

        return views.bitcast(self, dtype)

    def ap(self, pattern: Any, offset: int = 0, **kwargs: Any) -> NkiTensor:
        """``tile.ap([[step, num], ...], offset)``: an explicit access pattern over this tensor
        (``hwsim.nki.pattern.explicit``; the tensor indexed as a whole)."""
        from hwsim.nki.pattern import PatternView, explicit

        if kwargs:
            raise fail("ap", f"unknown arguments {sorted(kwargs)}")
        view = explicit(self.tile, list(pattern), offset)
        problem = view.out_of_bounds()
        if problem is not None:
            raise fail("ap", problem)
        return NkiTensor(PatternView(self.tile, view), self.owner, view.dims)

    def broadcast_to(self, shape: Any) -> NkiTensor:
        """``nl.broadcast_to(self, shape)``."""
        from hwsim.nki import language_ops

        return language_ops.broadcast_to(self, shape)

    @property
    def T(self) -> NkiTensor:
        raise fail(".T", "use nl.transpose(x) or nisa.nc_transpose")

    def __bool__(self) -> bool:
        raise fail("bool(tile)", "a tile has no truth value while the kernel builds")

    # ---- Python operators -> nl operators -------------------------------------------------
    def _op(self, name: str, other: Any, reverse: bool = False) -> NkiTensor:
        from hwsim.nki import language_ops

        return (
            language_ops.binary(name, other, self)
            if reverse
            else language_ops.binary(name, self, other)
        )

    __add__, __radd__ = _operator("add"), _operator("add", reverse=True)
    __sub__, __rsub__ = _operator("subtract"), _operator("subtract", reverse=True)
    __mul__, __rmul__ = _operator("multiply"), _operator("multiply", reverse=True)
    __truediv__, __rtruediv__ = _operator("divide"), _operator("divide", reverse=True)
    __gt__, __ge__ = _operator("greater"), _operator("greater_equal")
    __lt__, __le__ = _operator("less"), _operator("less_equal")

    def __neg__(self) -> NkiTensor:
        return self._op("multiply", -1.0)

    def _inplace(self, name: str, other: Any) -> NkiTensor:
        from hwsim.nki import language_ops
        from hwsim.nki.pending import PendingMatmul

        if isinstance(other, PendingMatmul) and other._result is None:
            if name != "add":
                raise fail(f"tile {name}= matmul", "only += accumulates a matmul into PSUM")
            other.into(self)
            return self
        language_ops.binary(name, self, other, dst=self)
        return self

    __iadd__ = _inplace_operator("add")
    __isub__ = _inplace_operator("subtract")
    __imul__ = _inplace_operator("multiply")


class Indirect:
    """Rows of an HBM ``table`` picked by ``indices`` (an int32 [P, 1] SBUF tile)."""

    def __init__(self, table: NkiTensor, indices: NkiTensor) -> None:
        self.table, self.indices = table, indices
        self.shape = (indices.shape[0], *table.shape[1:])
        self.dtype = table.dtype


def _same_place(a: Any, b: Any) -> bool:
    """Whether two views are the same elements of the same tile."""
    if a is b:
        return True
    full_a = a.full() if isinstance(a, Tile) else a
    full_b = b.full() if isinstance(b, Tile) else b
    if not isinstance(full_a, View) or not isinstance(full_b, View):
        return False
    return (
        full_a.tile is full_b.tile and full_a.dims == full_b.dims and full_a.shape == full_b.shape
    )


class _Unresolved:
    """The shape and dtype of an index not resolvable until masked (``NkiTensor.deferred``)."""

    def __init__(self, shape: tuple[int, ...], dtype: DType, base: Any) -> None:
        self.shape, self.dtype = shape, dtype
        self.tile = base if isinstance(base, Tile) else base.tile

    def __getitem__(self, key: Any) -> Any:
        raise fail("index", "index a masked edge tile only through an instruction with mask=")


def _slice_shape(shape: tuple[int, ...], items: tuple[Any, ...]) -> tuple[int, ...]:
    """The shape ``items`` (ints and slices, a stop possibly past the end) would give."""
    if len(items) > len(shape):
        raise fail("index", f"{len(items)} indices on a tensor of shape {list(shape)}")
    out = []
    padded = (*items, *(slice(None),) * (len(shape) - len(items)))
    for size, item in zip(shape, padded, strict=True):
        if isinstance(item, slice):
            stop = size if item.stop is None else item.stop
            out.append(len(range(item.start or 0, stop, item.step or 1)))
        elif not isinstance(item, (int, np.integer)):
            raise fail("index", f"index {item!r} on a tensor of shape {list(shape)}")
    return tuple(out)


def _kept_positions(
    whole: NkiTensor, kept: NkiTensor, mask: ix.Mask
) -> tuple[tuple[int, int, int] | None, ...] | None:
    """Per axis of ``whole``: (first, end, whole size) of the positions ``mask`` kept, for the
    axes its iterators index from 0 (``nl.mgrid[0:n]``); None when the shapes do not say."""
    if len(whole.shape) != len(kept.shape):
        return None
    out: list[tuple[int, int, int] | None] = []
    for axis, (size, now) in enumerate(zip(whole.shape, kept.shape, strict=True)):
        if size == now:
            out.append(None)
            continue
        var = whole.axis_vars[axis]
        span = mask.ranges.get(var) if var is not None else None
        if span is None or span[1] - span[0] != now:
            return None
        out.append((span[0], span[1], size))
    return tuple(out)


def _slices_narrowed(items: tuple[Any, ...], mask: Any, error: Exception) -> tuple[Any, ...]:
    """Plain slices past a tensor's end, narrowed by the mask's iterators where the grid
    position and size match the slice's axis of the view (``NkiTensor.masked``'s rule)."""
    out, axis, narrowed = [], 0, False
    for item in items:
        if not isinstance(item, slice):
            out.append(item)
            continue
        start, step = item.start or 0, item.step or 1
        count = len(range(start, item.stop, step)) if item.stop is not None else None
        hit = next((v for v, (pos, n) in mask.places.items() if pos == axis and n == count), None)
        if hit is not None:
            lo, hi = mask.ranges[hit]
            if lo >= hi:
                raise fail("mask", "the mask keeps no element (the instruction would do nothing)")
            item, narrowed = slice(start + lo * step, start + (hi - 1) * step + 1, step), True
        out.append(item)
        axis += 1
    if not narrowed:
        raise error
    return tuple(out)


def _grid_shape(items: tuple[Any, ...]) -> tuple[int, ...]:
    exprs = [i for i in items if isinstance(i, ix.IndexExpr)]
    ndim = max(e.ndim for e in exprs)
    shape = [1] * ndim
    for e in exprs:
        shape[e.position] = e.count
    return tuple(shape)


def psum_group(t: NkiTensor) -> PsumGroup:
    return state().psum.setdefault(t.tile.name, PsumGroup())


def as_tensor(value: Any, call: str) -> NkiTensor:
    from hwsim.nki.pending import Pending

    if isinstance(value, Pending):
        return value.materialize()
    if isinstance(value, NkiTensor):
        return value
    raise fail(call, f"expected a tile or tensor, got {type(value).__name__}")


def touch(t: NkiTensor) -> None:
    """A non-matmul access of ``t``: emits a pending PSUM zero fill, ends its group."""
    if t.memory is not MemorySpace.PSUM:
        return
    group = psum_group(t)
    if state().dropping:
        return  # a masked-off call: nothing happens to the tile
    if group.zero_pending:
        group.zero_pending = False
        lisa.memset(t.tile, 0.0)
    group.open = False


def src(value: Any, mask: Any = None, call: str = "operand") -> Tile | View:
    """A read operand as the kernel language takes it."""
    t = as_tensor(value, call)
    touch(t)
    return t.masked(mask)


def dst(value: Any, mask: Any = None, call: str = "dst") -> Tile | View:
    """A written operand (not by a matmul)."""
    t = as_tensor(value, call)
    touch(t)
    return t.masked(mask)


def allocate(
    shape: Any,
    dtype: Any,
    buffer: Buffer,
    *,
    name: str | None = None,
    site: tuple[str, int] | None = None,
    ring_key: Any = False,
) -> NkiTensor:
    """A new tensor. In an NKI loop an on-chip tile comes from its allocation site's ring
    (module docstring of ``hwsim.nki.state``); elsewhere from the kernel language's pool.
    ``ring_key``: the ring, when it was worked out earlier (``state().ring_key`` at the call
    that asked for the tensor; None: outside NKI loops)."""
    shape = tuple(int(n) for n in shape)
    dt = hw_dtype(dtype)
    if buffer is hbm or buffer.memory is MemorySpace.HBM:
        return NkiTensor(lang_ndarray(shape, dt, hbm, name=name))
    st = state()
    key = st.ring_key(site or user_site()) if ring_key is False else ring_key
    if key is not None and buffer.memory is MemorySpace.PSUM and current().planner is not None:
        # PSUM over-allocated: the memory planner places PSUM tiles by their uses, which a
        # ring slot (one tile reused every iteration) would stretch over the whole loop, and
        # rotates them over the banks as the compiler does (MemoryPlanner._place_rotating)
        key = None
    if key is None:
        try:
            tile = lang_ndarray(shape, dt, buffer, name=name)
        except OutOfMemoryError:
            if not _release_dead_slots(st, buffer.memory):
                raise
            tile = lang_ndarray(shape, dt, buffer, name=name)
        return _owned(tile, shape)
    ring = st.rings.setdefault(key, [])
    depth = st.loops[-1].buffers if st.loops and st.loops[-1].buffers else st.buffers
    # ``depth`` sets of what the loop keeps alive at the end of an iteration: tiles kept past
    # their own iteration (V1b's K/128 rhs tiles, appended to a list in the K loop) are one
    # set, buffered as one (``NkiState.count_live``)
    want = len(ring) < depth * st.ring_live.get(key, 1)
    if want and ring and buffer.memory is MemorySpace.PSUM and not _psum_room(st, shape, dt):
        want = False  # the rings' PSUM tiles fill PSUM: this ring stops growing
        if not any(s.owner is None or s.owner() is None for s in ring):
            _release_dead_slots(st, MemorySpace.PSUM)
            want = True
    if not want:
        start = st.ring_next.get(key, 0)
        free = [
            (start + i) % len(ring)
            for i in range(len(ring))
            if ring[(start + i) % len(ring)].owner is None
            or ring[(start + i) % len(ring)].owner() is None  # type: ignore[misc]
        ]
        if free:
            return _reuse(st, key, ring, free[0], shape, dt, buffer)
    try:
        tile = lang_ndarray(shape, dt, buffer, name=name)
    except OutOfMemoryError:
        dead = [i for i, s in enumerate(ring) if s.owner is None or s.owner() is None]
        if dead:
            return _reuse(st, key, ring, dead[0], shape, dt, buffer)
        if not _release_dead_slots(st, buffer.memory):
            raise
        tile = lang_ndarray(shape, dt, buffer, name=name)  # the compiler places what fits
    ring.append(Slot(tile))
    return _claim(ring[-1], shape)


def _psum_room(st: Any, shape: tuple[int, ...], dt: DType) -> bool:
    """Whether one more PSUM tile fits beside every ring's PSUM tiles (bank granules), with
    a bank left for tiles outside rings: the compiler multi-buffers PSUM only as far as its 8
    banks (trn2) go, and a kernel with several PSUM sites in a loop gets fewer buffers each."""
    config = current().config.psum
    bank = config.bank_bytes

    def banks(nbytes: int) -> int:
        return -(-nbytes // bank)

    used = sum(
        banks(math.prod(slot.tile.shape[1:]) * slot.tile.dtype.itemsize)
        for ring in st.rings.values()
        for slot in ring
        if slot.tile.memory is MemorySpace.PSUM
    )
    return used + banks(math.prod(shape[1:]) * dt.itemsize) <= config.banks - 1


def _release_dead_slots(st: Any, memory: MemorySpace) -> bool:
    """Drop every ring's slots in ``memory`` whose tensors are all dead, so their memory can
    hold a new tile: what the compiler does when the multi-buffering it would like does not
    fit (fewer buffers). Whether any was dropped."""
    dropped = False
    for key, ring in st.rings.items():
        alive = [s for s in ring if s.owner is not None and s.owner() is not None]
        if len(alive) < len(ring) and ring[0].tile.memory is memory:
            ring[:] = alive
            st.ring_next[key] = 0
            dropped = True
    return dropped


def _reuse(st: Any, key: Any, ring: list[Slot], i: int, shape: Any, dt: DType, buf: Buffer) -> Any:
    st.ring_next[key] = (i + 1) % len(ring)
    slot = ring[i]
    have = slot.tile.shape
    fits = len(have) == len(shape) and all(n <= h for n, h in zip(shape, have, strict=True))
    if not fits or slot.tile.dtype != dt or slot.tile.buffer is not buf:
        slot.tile = lang_ndarray(shape, dt, buf)
    return _claim(slot, shape)


def _claim(slot: Slot, shape: tuple[int, ...]) -> NkiTensor:
    owner = Allocation(slot.tile.name)
    state().psum.pop(slot.tile.name, None)  # a new tensor in the slot: no open group
    slot.owner = weakref.ref(owner)
    view = slot.tile if slot.tile.shape == shape else slot.tile[tuple(slice(0, n) for n in shape)]
    return NkiTensor(view, owner)


def _owned(tile: Tile, shape: tuple[int, ...]) -> NkiTensor:
    return NkiTensor(tile, Allocation(tile.name))
