"""Results not emitted until used: ``nl.load``, tile-returning matmuls and ``nl.copy``.

``t[...] = nl.load(x)`` is then one DMA into ``t``, ``acc += nisa.nc_matmul(a, b)`` one matmul
accumulating into ``acc`` (the first of a group overwriting) and ``t[...] = nl.copy(x)`` one copy
into ``t``, as the NKI compiler lowers them (``nl.copy`` returns "a new tile ... in SBUF, but
can be also assigned to a PSUM tensor": the assignment is where the copy writes; the NKI docs'
``nki.language.copy`` page); any other use materialises the result in a new tile.

A pending copy reads on-chip data that a later instruction may overwrite, so it never waits
past the next instruction: the kernel's next emission writes it out first
(``NkiState.flush_copy``), which keeps program order exactly as if it had been emitted eagerly.
"""

from __future__ import annotations

import functools
from typing import Any

from hwsim.dtypes import DType
from hwsim.dtypes import dtype as lookup_dtype
from hwsim.isa.ap import MemorySpace
from hwsim.lang import isa as lisa
from hwsim.lang.tiles import psum
from hwsim.lang.tiles import sbuf as _sbuf
from hwsim.nki.dtypes import hw_dtype
from hwsim.nki.masking import emitting
from hwsim.nki.state import state, user_site
from hwsim.nki.tensor import NkiTensor, allocate, dst, fail, psum_group, src, touch


def _emitting_as_made(method: Any) -> Any:
    """``method`` emitting as the call that made the result did (dropped if masked off)."""

    @functools.wraps(method)
    def run(self: Pending, *args: Any) -> Any:
        with emitting(self.dropped):
            return method(self, *args)

    return run


class Pending:
    """A result not yet emitted: materialised at its first use, or written straight into the
    tile it is assigned to (``t[...] = nl.load(x)`` is one DMA into ``t``, as NKI compiles it).
    One made by a call masked off (``hwsim.nki.masking``) emits nothing when it is used."""

    shape: tuple[int, ...]
    _result: NkiTensor | None = None
    dropped: bool = False

    def __new__(cls, *args: Any, **kwargs: Any) -> Pending:
        made = super().__new__(cls)
        made.dropped = state().dropping
        return made

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("materialize", "into_tile", "into"):
            if name in cls.__dict__:
                setattr(cls, name, _emitting_as_made(cls.__dict__[name]))

    def materialize(self) -> NkiTensor:
        raise NotImplementedError

    def into_tile(self, target: NkiTensor) -> None:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.materialize(), name)

    def __getitem__(self, key: Any) -> NkiTensor:
        return self.materialize()[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.materialize()[key] = value

    def __add__(self, o: Any) -> NkiTensor:
        return self.materialize() + o

    def __radd__(self, o: Any) -> NkiTensor:
        return o + self.materialize()

    def __sub__(self, o: Any) -> NkiTensor:
        return self.materialize() - o

    def __rsub__(self, o: Any) -> NkiTensor:
        return o - self.materialize()

    def __mul__(self, o: Any) -> NkiTensor:
        return self.materialize() * o

    def __rmul__(self, o: Any) -> NkiTensor:
        return o * self.materialize()

    def __truediv__(self, o: Any) -> NkiTensor:
        return self.materialize() / o

    def __neg__(self) -> NkiTensor:
        return -self.materialize()

    def __iadd__(self, o: Any) -> NkiTensor:
        t = self.materialize()
        t += o
        return t


class PendingLoad(Pending):
    """``nl.load(src)``: HBM -> SBUF, triggered by the Sync engine on the rotating queues."""

    def __init__(
        self, view: Any, dtype: DType, shape: tuple[int, ...], axis_vars: Any, mask: Any = None
    ) -> None:
        self.source, self.dtype, self.shape, self.axis_vars = view, dtype, shape, axis_vars
        self.mask = mask
        self.site = user_site()
        self._result = None
        # Not assigned at once (``t[...] = nl.load(x)``), it is a load into a new tile at its
        # line: written out before the kernel's next instruction, like a pending copy (a load
        # kept in a list for later is still issued where the kernel wrote it).
        st = state()
        st.flush_copy()
        self.ring_key = st.ring_key(self.site)
        st.pending_copy = self

    def _dma(self, target: NkiTensor) -> None:
        """Into ``target`` where the mask keeps (all of it without a mask): NKI's masked load
        writes the kept part of a tile of the index's whole shape."""
        lisa.dma_copy(
            dst(target, self.mask), self.source, engine="sync", queue=state().next_load_queue()
        )

    def materialize(self) -> NkiTensor:
        if self._result is None:
            state().forget_copy(self)
            out = allocate(self.shape, self.dtype, _sbuf, ring_key=self.ring_key)
            if len(self.axis_vars) == len(self.shape):
                out.axis_vars = self.axis_vars
            self._dma(out)
            self._result = out
        return self._result

    def into_tile(self, target: NkiTensor) -> None:
        state().forget_copy(self)
        if self._result is not None or tuple(target.shape) != tuple(self.shape):
            target_view = dst(target)
            lisa.tensor_copy(target_view, src(self.materialize()))
            return
        if self.mask is not None and len(self.axis_vars) == len(target.shape):
            target = NkiTensor(target.lang_view, target.owner, self.axis_vars)
        self._dma(target)
        self._result = target


class PendingCopy(Pending):
    """``nl.copy(x)`` not yet emitted: into the tile it is assigned to, else a new SBUF tile
    (allocated from the ring of the ``nl.copy`` call, worked out at the call)."""

    def __init__(self, source: NkiTensor, dtype: DType, mask: Any) -> None:
        self.source, self.dtype, self.mask = source, dtype, mask
        self.shape = tuple(source.shape)
        self._result = None
        touch(source)  # a PSUM source's zero fill and group end happen at the call, as before
        st = state()
        st.flush_copy()
        self.ring_key = st.ring_key(user_site())
        st.pending_copy = self

    def _emit(self, target: NkiTensor) -> None:
        state().forget_copy(self)
        self._result = target
        lisa.tensor_copy(dst(target, self.mask), src(self.source, self.mask))

    def materialize(self) -> NkiTensor:
        if self._result is None:
            self._emit(allocate(self.shape, self.dtype, _sbuf, ring_key=self.ring_key))
        return self._result  # type: ignore[return-value]

    def into_tile(self, target: NkiTensor) -> None:
        direct = tuple(target.shape) == self.shape and target.hw_dtype == self.dtype
        if self._result is None and direct:
            self._emit(target)
            return
        lisa.tensor_copy(dst(target), src(self.materialize()))


class PendingLoopReduce(Pending):
    """``nl.loop_reduce(x, op, loop_indices)`` not yet emitted.

    NKI's rule: "the destination tile is also the rhs input to op". Assigned into a tile
    (``acc[...] = nl.loop_reduce(x, np.add, [k])``), it is one ``tensor_tensor(acc, acc, x)``,
    so whatever ``acc`` held before the loop (``nl.zeros``, or an earlier block's values) is
    the start. Used any other way (``acc = nl.loop_reduce(...)``: the destination is a Python
    name the simulator cannot see), it reduces into an accumulator of its own, one per call
    site and per iteration of every enclosing loop it does *not* reduce over: the first
    iteration of the reduced loops copies ``x`` in, later ones combine into it. Like a pending
    copy, it is written out before the kernel's next instruction."""

    def __init__(self, source: NkiTensor, op: Any, loops: tuple[Any, ...], dtype: Any, mask: Any):
        self.source, self.op, self.mask = source, op, mask
        self.dtype = hw_dtype(dtype if dtype is not None else source.dtype)
        self.shape = tuple(source.shape)
        self.site = user_site()
        self._result = None
        st = state()
        st.flush_copy()
        # The key is fixed here, at the call: the loops' iterations are the call's.
        reduced = {id(frame) for frame in loops}
        kept = tuple((frame.site, frame.step) for frame in st.loops if id(frame) not in reduced)
        # an SPMD instance is an outer loop too: instances never share an accumulator
        instance = st.program_ids
        self.key = ("loop_reduce", tuple(f.site for f in st.loops), self.site, kept, instance)
        st.pending_copy = self

    def materialize(self) -> NkiTensor:
        if self._result is not None:
            return self._result
        st = state()
        st.forget_copy(self)
        acc = st.reductions.get(self.key)
        if acc is None:
            acc = allocate(self.shape, self.dtype, _sbuf, site=self.site)
            st.reductions[self.key] = acc
            lisa.tensor_copy(acc.lang_view, src(self.source, self.mask))
        else:
            lisa.tensor_tensor(acc.lang_view, acc.lang_view, src(self.source, self.mask), self.op)
        self._result = acc
        return acc

    def into_tile(self, target: NkiTensor) -> None:
        if self._result is not None:
            lisa.tensor_copy(dst(target), src(self._result))
            return
        state().forget_copy(self)
        if tuple(target.shape) != self.shape:
            raise fail(
                "nl.loop_reduce",
                f"the result {list(self.shape)} is assigned into {list(target.shape)}; "
                "assign it into a tile of its own shape",
            )
        view = dst(target, self.mask)
        lisa.tensor_tensor(view, view, src(self.source, self.mask), self.op)
        self._result = target


class PendingMatmul(Pending):
    """``stationary.T @ moving`` not yet emitted (a tile-returning nc_matmul / nl.matmul)."""

    def __init__(self, stationary: Any, moving: Any, mask: Any, flags: dict[str, Any]) -> None:
        self.stationary, self.moving, self.mask, self.flags = stationary, moving, mask, flags
        self.site = user_site()
        self._result = None
        m, n = stationary.shape[-1], moving.shape[-1]
        self.shape = (m, n)
        self.dtype = lookup_dtype("fp32")

    def into(self, acc: NkiTensor) -> None:
        """Accumulate into ``acc`` (PSUM): the first matmul of a group overwrites."""
        if acc.memory is not MemorySpace.PSUM:
            raise fail("+= matmul", f"{acc.tile.name} is in {acc.buffer}; accumulate into PSUM")
        acc = narrowed_like(acc, self.shape, self.stationary, self.moving)
        emit_matmul(acc, self.stationary, self.moving, None, self.mask, self.flags)

    def into_tile(self, target: NkiTensor) -> None:
        if target.memory is MemorySpace.PSUM and self._result is None:
            target = narrowed_like(target, self.shape, self.stationary, self.moving)
            emit_matmul(target, self.stationary, self.moving, False, self.mask, self.flags)
            self._result = target
            return
        lisa.tensor_copy(dst(target), src(self.materialize()))

    def materialize(self) -> NkiTensor:
        if self._result is None:
            out = allocate(self.shape, "fp32", psum, site=self.site)
            emit_matmul(out, self.stationary, self.moving, False, self.mask, self.flags)
            self._result = out
        return self._result


def narrowed_like(target: NkiTensor, shape: tuple[int, ...], stationary: Any, moving: Any) -> Any:
    """The part of a [M, N] ``target`` a matmul of a narrower ``shape`` writes, when its
    operands were narrowed by ``t[...][mask]`` (``NkiTensor.kept``) from M rows of the
    stationary / N columns of the moving operand: the positions the masks kept (the mask
    narrows the instruction, and its output with it). Anything else: ``target`` unchanged."""
    if tuple(target.shape) == tuple(shape) or len(target.shape) != 2:
        return target
    key = []
    for operand, size in ((stationary, target.shape[0]), (moving, target.shape[1])):
        kept = getattr(operand, "kept", None)
        span = kept[-1] if kept else None
        key.append(slice(span[0], span[1]) if span is not None and span[2] == size else slice(None))
    if all(k == slice(None) for k in key):
        return target
    return type(target)(target.lang_view[tuple(key)], target.owner, target.axis_vars)


def emit_matmul(
    dst: NkiTensor, stationary: Any, moving: Any, accumulate: bool | None, mask: Any, flags: Any
) -> None:
    """nc_matmul into ``dst``; ``accumulate=None`` is the compiler's choice: overwrite when
    ``dst`` has no open accumulation group, else add to it."""
    if flags.get("is_transpose"):
        _transpose_matmul(dst, stationary, moving, mask)
        return
    if state().dropping:
        return  # a masked-off matmul: the accumulation group is as it was
    stationary, moving = _in_sbuf(stationary), _in_sbuf(moving)
    group = psum_group(dst)
    acc = group.open if accumulate is None else accumulate
    if acc and not group.open and group.zero_pending:
        acc = False  # zeros then accumulate == overwrite (and no memset to accumulate onto)
    group.zero_pending = False
    lisa.nc_matmul(
        dst.masked(mask), src(stationary, mask), src(moving, mask), accumulate=acc, **flags
    )
    group.open = True


def _in_sbuf(operand: Any) -> Any:
    """A matmul operand in PSUM (a transpose's or an earlier matmul's tile the kernel feeds on)
    copied to SBUF first (VectorE), as the compiler does: TensorE reads SBUF only."""
    from hwsim.nki.tensor import as_tensor

    t = as_tensor(operand, "nc_matmul operand")
    if t.memory is not MemorySpace.PSUM:
        return operand
    return PendingCopy(t, t.hw_dtype, None).materialize()


def _transpose_matmul(dst: NkiTensor, stationary: Any, moving: Any, mask: Any) -> None:
    """``nc_matmul(..., is_transpose=True)``: with an identity as moving, the PE array writes
    the stationary tile transposed, in its own dtype (TensorE's transpose, ``nc_transpose``)."""
    moving_t = src(moving, mask)
    size = stationary.shape[0]
    if tuple(moving_t.shape) != (size, size):
        raise fail(
            "nisa.nc_matmul(is_transpose=True)",
            f"moving {list(moving_t.shape)} must be the [{size}, {size}] identity",
        )
    touch(dst)
    lisa.nc_transpose(dst.masked(mask), src(stationary, mask))
