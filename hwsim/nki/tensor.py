"""NKI tensors over kernel-language tiles: indexing with index expressions, Python operators,
masks, multi-buffered allocation, and PSUM results that become matmul accumulation.

``NkiTensor`` wraps a ``hwsim.lang`` tile or view; it remembers which iterator indexes each of
its axes so ``mask=`` can narrow it. ``PendingMatmul`` is what a tile-returning
``nisa.nc_matmul`` / ``nl.matmul`` gives: nothing is emitted until it is used, so
``acc += nisa.nc_matmul(a, b)`` is one matmul accumulating into ``acc`` (the first of a group
with ``accumulate=False``), and any other use puts it in a fresh PSUM tile.
"""

from __future__ import annotations

import weakref
from typing import Any

from hwsim.dtypes import DType
from hwsim.dtypes import dtype as lookup_dtype
from hwsim.errors import IllegalInstructionError
from hwsim.isa.ap import MemorySpace
from hwsim.lang import isa as lisa
from hwsim.lang.allocator import OutOfMemoryError
from hwsim.lang.kernel import ndarray as lang_ndarray
from hwsim.lang.kernel import source_location
from hwsim.lang.tiles import Buffer, IndexingError, Tile, View, hbm
from hwsim.nki import index as ix
from hwsim.nki.state import Allocation, PsumGroup, Slot, state, user_site


def fail(call: str, message: str) -> IllegalInstructionError:
    return IllegalInstructionError(f"{source_location()}: {call}: {message}")


class NkiTensor:
    """A tensor of an NKI kernel: an HBM tensor, or an SBUF/PSUM tile, or a view of one."""

    __array_priority__ = 100  # numpy scalars on the left defer to our operators

    def __init__(
        self,
        view: Tile | View,
        owner: Allocation | None = None,
        axis_vars: tuple[int | None, ...] | None = None,
    ) -> None:
        self.view = view
        self.owner = owner
        self.axis_vars = axis_vars if axis_vars is not None else (None,) * len(view.shape)
        #: (tensor, key) of an index that is in bounds only once masked (NKI's masked edge
        #: tiles: ``x[k * 128 + i_p, i_f]`` with ``mask=(k * 128 + i_p < rows)``).
        self.deferred: tuple[NkiTensor, Any, IndexingError] | None = None

    @property
    def tile(self) -> Tile:
        return self.view if isinstance(self.view, Tile) else self.view.tile

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.view.shape)

    @property
    def dtype(self) -> DType:
        return self.view.dtype

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

        items = key if isinstance(key, tuple) else (key,)
        if items and isinstance(items[0], (NkiTensor, Pending)):
            return self._indirect((as_tensor(items[0], "indirect index"), *items[1:]))
        plain, axis_vars = ix.resolve(self.shape, key)
        try:
            view = self.view[plain] if plain else self.view
        except IndexingError as error:
            items = key if isinstance(key, tuple) else (key,)
            if not any(isinstance(item, ix.IndexExpr) for item in items):
                raise
            shape = _grid_shape(items)
            out = NkiTensor(_Unresolved(shape, self.dtype, self.view), self.owner, axis_vars)  # type: ignore[arg-type]
            out.deferred = (self, key, error)
            return out
        if len(axis_vars) != len(view.shape):  # ints dropped axes with no iterator
            axis_vars = tuple(v for v in axis_vars if v is not None)
            axis_vars = (None,) * (len(view.shape) - len(axis_vars)) + axis_vars
        return NkiTensor(view, self.owner, axis_vars)

    def __setitem__(self, key: Any, value: Any) -> None:
        """``t[...] = value``: a copy into the indexed part (the result of ``t[...] += x`` lands
        here too, after ``__iadd__`` already wrote in place)."""
        from hwsim.nki.pending import Pending

        target = self[key]
        if isinstance(value, Pending):
            value.into_tile(target)
            return
        if isinstance(value, NkiTensor) and _same_place(value.view, target.view):
            return  # t[...] += x already wrote in place; nothing to copy
        from hwsim.nki import language_ops

        language_ops.assign(target, value)

    def _indirect(self, items: tuple[Any, ...]) -> Indirect:
        """``table[idx_tile, cols]``: rows picked by an int32 SBUF tile (for ``nl.load``)."""
        if self.memory is not MemorySpace.HBM:
            raise fail("indirect index", f"{self.tile.name} is on chip; index HBM tables so")
        rest = self[(slice(None), *items[1:])] if len(items) > 1 else self
        return Indirect(rest, items[0])

    def masked(self, mask: ix.Mask | None) -> Tile | View:
        """The view narrowed by ``mask``: on each axis its iterator indexes, or, for an axis with
        no iterator, on the masked iterator's grid position when the sizes agree."""
        if self.deferred is not None:
            base, key, error = self.deferred
            if mask is None:
                raise error
            items = key if isinstance(key, tuple) else (key,)
            items = tuple(mask.narrowed(i) if isinstance(i, ix.IndexExpr) else i for i in items)
            if any(isinstance(i, ix.IndexExpr) and i.count < 1 for i in items):
                raise fail("mask", "the mask keeps no element (the instruction would do nothing)")
            return base[items].view
        if mask is None:
            return self.view
        key = []
        for axis, var in enumerate(self.axis_vars):
            if var in mask.ranges:
                key.append(slice(*mask.ranges[var]))
                continue
            hit = next(
                (
                    v
                    for v, (position, count) in mask.places.items()
                    if var is None and position == axis and self.shape[axis] == count
                ),
                None,
            )
            key.append(slice(*mask.ranges[hit]) if hit is not None else slice(None))
        if all(k == slice(None) for k in key):
            return self.view
        if any(k.start >= k.stop for k in key if k != slice(None)):
            raise fail("mask", "the mask keeps no element (the instruction would do nothing)")
        return self.view[tuple(key)]

    # ---- unsupported numpy-isms: one clear error each -------------------------------------
    def reshape(self, *shape: Any) -> NkiTensor:
        raise fail("reshape", "tiles cannot be reshaped here; index the HBM tensor instead")

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

    def __add__(self, o: Any) -> NkiTensor:
        return self._op("add", o)

    def __radd__(self, o: Any) -> NkiTensor:
        return self._op("add", o, True)

    def __sub__(self, o: Any) -> NkiTensor:
        return self._op("subtract", o)

    def __rsub__(self, o: Any) -> NkiTensor:
        return self._op("subtract", o, True)

    def __mul__(self, o: Any) -> NkiTensor:
        return self._op("multiply", o)

    def __rmul__(self, o: Any) -> NkiTensor:
        return self._op("multiply", o, True)

    def __truediv__(self, o: Any) -> NkiTensor:
        return self._op("divide", o)

    def __rtruediv__(self, o: Any) -> NkiTensor:
        return self._op("divide", o, True)

    def __neg__(self) -> NkiTensor:
        return self._op("multiply", -1.0)

    def __gt__(self, o: Any) -> NkiTensor:
        return self._op("greater", o)

    def __ge__(self, o: Any) -> NkiTensor:
        return self._op("greater_equal", o)

    def __lt__(self, o: Any) -> NkiTensor:
        return self._op("less", o)

    def __le__(self, o: Any) -> NkiTensor:
        return self._op("less_equal", o)

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

    def __iadd__(self, o: Any) -> NkiTensor:
        return self._inplace("add", o)

    def __isub__(self, o: Any) -> NkiTensor:
        return self._inplace("subtract", o)

    def __imul__(self, o: Any) -> NkiTensor:
        return self._inplace("multiply", o)


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
    dt = lookup_dtype(dtype)
    if buffer is hbm or buffer.memory is MemorySpace.HBM:
        return NkiTensor(lang_ndarray(shape, dt, hbm, name=name))
    st = state()
    key = st.ring_key(site or user_site()) if ring_key is False else ring_key
    if key is None:
        tile = lang_ndarray(shape, dt, buffer, name=name)
        return _owned(tile, shape)
    ring = st.rings.setdefault(key, [])
    want = len(ring) < st.buffers
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
    # A ring's first buffer is the tile itself; the others are multi-buffering, which the
    # compiler gives only as memory allows: one that does not fit now is not made while a
    # buffer of the ring is free again (the loads of the next iteration then wait for this one's
    # readers instead of pushing live tiles out of SBUF).
    dead = [i for i, s in enumerate(ring) if s.owner is None or s.owner() is None]
    try:
        tile = lang_ndarray(shape, dt, buffer, name=name, defer=not dead)
    except OutOfMemoryError:
        if not dead:
            raise
        return _reuse(st, key, ring, dead[0], shape, dt, buffer)
    ring.append(Slot(tile))
    return _claim(ring[-1], shape)


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
