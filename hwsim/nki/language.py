"""``nki.language`` (``nl``) on the simulator: dtypes, buffers, tensors, loops, SPMD ids, index
expressions and the operators (``hwsim.nki.language_ops`` has what each lowers to).

An operator is an ``NlOp``: callable (``nl.exp(x)``) and usable as an ``op=`` of an nki.isa call
(``nisa.tensor_tensor(..., op=nl.add)``), as in NKI.
"""

from __future__ import annotations

import builtins as _b
import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from hwsim.isa.ap import MemorySpace
from hwsim.lang import isa as lisa
from hwsim.lang.kernel import current
from hwsim.lang.tiles import Buffer, Tile, hbm, psum, sbuf
from hwsim.nki import broadcast
from hwsim.nki import language_ops as ops

# ---- dtypes (numpy scalar types, as NKI's: hwsim.nki.dtypes) -------------------------------
from hwsim.nki.dtypes import (  # noqa: F401 (nl names)
    bfloat16,
    bool_,
    finfo,
    float4_e2m1fn_x4,
    float8_e4m3,
    float8_e4m3fn_x4,
    float8_e5m2,
    float8_e5m2_x4,
    float16,
    float32,
    iinfo,
    int8,
    int16,
    int32,
    static_cast,
    tfloat32,
    uint8,
    uint16,
    uint32,
)
from hwsim.nki.index import arange, ds, mgrid
from hwsim.nki.masking import honours_constant_mask
from hwsim.nki.pending import PendingMatmul
from hwsim.nki.state import state
from hwsim.nki.tensor import NkiTensor, allocate, fail, unsupported_name

# ---- buffers --------------------------------------------------------------------------------
shared_hbm = private_hbm = hbm
__all_buffers__ = (sbuf, psum, hbm)


class par_dim:
    """``nl.par_dim(n)``: marks the partition dimension of a shape. A leading dimension before
    it (``(nbuf, par_dim(128), 512)``) asks for multi-buffering, modelled here by allocation
    rings (hwsim.nki.state), so the shape given to the allocator drops nothing: use it only
    as the first dimension, or index the block dimension as a Python list."""

    def __init__(self, size: int) -> None:
        self.size = int(size)

    def __index__(self) -> int:
        return self.size

    def __int__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"par_dim({self.size})"


class tile_size:
    """Tile limits (NKI: class attributes). Values of trn1/trn2/trn3 (HARDWARE.md §1-2)."""

    pmax = 128
    psum_fmax = 512
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_min_align = 4
    sbuf_min_align = 1
    total_available_sbuf_size = 24 * 1024 * 1024


class fp32:
    min = -3.4028234663852886e38
    max = 3.4028234663852886e38


# ---- tensors --------------------------------------------------------------------------------
def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, par_dim)):
        shape = (shape,)
    return tuple(int(n) for n in shape)


def _blocks(shape: Any) -> int:
    """How many block dimensions come before the ``par_dim`` of a shape (0 if none)."""
    if isinstance(shape, (int, par_dim)):
        return 0
    marks = [i for i, n in enumerate(shape) if isinstance(n, par_dim)]
    return marks[0] if marks else 0


def _tensor(shape: Any, dtype: Any, buffer: Buffer) -> Any:
    """A tile, or a BlockTensor when block dimensions come before par_dim."""
    from hwsim.nki.blocks import BlockTensor
    from hwsim.nki.direct import DirectBuffer, direct_tile, traced_once
    from hwsim.nki.dtypes import hw_dtype

    dims = _shape(shape)
    count = _blocks(shape)
    if isinstance(buffer, DirectBuffer):
        buffer = traced_once(buffer)  # type: ignore[assignment]  # a DirectBuffer stands in
    if count:
        return BlockTensor(dims[:count], dims[count:], hw_dtype(dtype), buffer)
    if isinstance(buffer, DirectBuffer):
        return direct_tile(dims, hw_dtype(dtype), buffer, ())
    return allocate(dims, dtype, buffer)


def ndarray(shape: Any, dtype: Any, *, buffer: Buffer = sbuf, name: str = "", **kwargs: Any) -> Any:
    """``nl.ndarray(shape, dtype, buffer=nl.sbuf)``; HBM tensors are kernel outputs or scratch."""
    if buffer is hbm:
        return _hbm(_shape(shape), dtype, name)
    return _tensor(shape, dtype, buffer)


empty = ndarray


def _hbm(shape: tuple[int, ...], dtype: Any, name: str) -> NkiTensor:
    """An HBM tensor. SPMD instances share the k-th one they allocate (``shared_hbm``)."""
    st = state()
    index = st.shared_hbm_seen
    st.shared_hbm_seen += 1
    if index < len(st.shared_hbm):
        return st.shared_hbm[index]
    t = allocate(shape, dtype, hbm, name=name or f"out{index}" if index else name or "out")
    st.shared_hbm.append(t)
    return t


def zeros(shape: Any, dtype: Any, *, buffer: Buffer = sbuf, name: str = "", **kw: Any) -> Any:
    """``nl.zeros``: in PSUM the zero fill is left pending (a following ``+=`` matmul starts its
    accumulation group instead, as the compiler does); elsewhere a VectorE memset."""
    if buffer is hbm:
        raise fail("nl.zeros", "HBM zeros: allocate with nl.ndarray and store a zero tile")
    if _blocks(shape):
        blocked = _tensor(shape, dtype, buffer)
        blocked.fill_on_first_use(0.0)
        return blocked
    t = _tensor(shape, dtype, buffer)
    if t.memory is MemorySpace.PSUM:
        from hwsim.nki.tensor import psum_group

        psum_group(t).zero_pending = True
    else:
        lisa.memset(t.lang_view, 0.0)
    return t


def full(shape: Any, fill_value: float, dtype: Any, *, buffer: Buffer = sbuf, **kw: Any) -> Any:
    if _blocks(shape):
        blocked = _tensor(shape, dtype, buffer)
        blocked.fill_on_first_use(float(fill_value))
        return blocked
    t = _tensor(shape, dtype, buffer)
    lisa.memset(t.lang_view, float(fill_value))
    return t


def ones(shape: Any, dtype: Any, *, buffer: Buffer = sbuf, **kw: Any) -> Any:
    return full(shape, 1.0, dtype, buffer=buffer)


def zeros_like(a: Any, dtype: Any = None, *, buffer: Buffer = sbuf, **kw: Any) -> Any:
    return zeros(a.shape, (a.dtype if dtype is None else dtype), buffer=buffer)


def ndarray_like(a: Any, dtype: Any = None, *, buffer: Buffer = sbuf, **kw: Any) -> Any:
    return ndarray(a.shape, (a.dtype if dtype is None else dtype), buffer=buffer)


empty_like = ndarray_like


def shared_constant(constant: Any, dtype: Any = None, **kw: Any) -> NkiTensor:
    """A constant array as an HBM input tensor (NKI: folded into the NEFF)."""
    from hwsim.nki.dtypes import hw_dtype

    array = np.asarray(constant)
    if dtype is None:  # Python floats and ints are float64 / int64 arrays: the 32-bit ones
        dtype = {"float64": np.float32, "int64": np.int32}.get(array.dtype.name, array.dtype)
    dt = hw_dtype(dtype)
    context = current()
    name = context.fresh_name("const")
    context.builder.program.add_tensor(name, array.shape, dt, "input", array.astype(dt.numpy))
    return NkiTensor(Tile(name, array.shape, dt, hbm))


def shared_identity_matrix(n: int, dtype: Any = "fp32", **kw: Any) -> NkiTensor:
    return shared_constant(np.eye(n, dtype=np.float32), dtype)


def iota(expr: Any, dtype: Any, *, mask: Any = None, **kw: Any) -> NkiTensor:
    """``nl.iota(expr, dtype)``: a tile holding the values of an index expression (GpSimdE)."""
    from hwsim.nki.index import IndexExpr, IndexSum

    if isinstance(expr, IndexSum):
        return _iota_of_sum(expr, dtype)
    if not isinstance(expr, IndexExpr):
        raise fail("nl.iota", "expr must be an index expression (nl.arange / nl.mgrid)")
    shape = expr.shape if expr.ndim > 1 else (1, expr.count)
    out = allocate(shape, dtype, sbuf)
    position = expr.position if expr.ndim > 1 else 1
    if position == 0:
        lisa.iota(
            out.lang_view,
            steps=(0,) * (len(shape) - 1),
            offset=expr.offset,
            channel_multiplier=expr.scale,
        )
    else:
        steps = tuple(expr.scale if d == position else 0 for d in _b.range(1, len(shape)))
        lisa.iota(out.lang_view, steps=steps, offset=expr.offset)
    return out


def _iota_of_sum(expr: Any, dtype: Any) -> NkiTensor:
    """``nl.iota(3 * g.y + g.z, dtype)``: a sum of index expressions, one per grid position,
    is one iota whose steps are the terms' scales (a term on the partitions is the channel
    multiplier); the tile has the grid's shape with size 1 where no term varies."""
    ndim = expr.ndim
    shape = [1] * ndim
    scales = [0] * ndim
    for term in expr.terms:
        if term.ndim != ndim or scales[term.position]:
            raise fail(
                "nl.iota",
                "each term of the expression must index its own position of one grid "
                f"(got {expr!r})",
            )
        shape[term.position], scales[term.position] = term.count, term.scale
    offset = expr.offset + _b.sum(term.offset for term in expr.terms)
    if ndim == 1:  # a 1-D sum lies on the free axis of one partition, as nl.iota(arange(n))
        shape, scales = [1, shape[0]], [0, scales[0]]
    out = allocate(tuple(shape), dtype, sbuf)
    lisa.iota(out.lang_view, steps=tuple(scales[1:]), offset=offset, channel_multiplier=scales[0])
    return out


def load(src: Any, *, mask: Any = None, dtype: Any = None, **kw: Any) -> Any:
    return ops.load(src, mask=mask, dtype=dtype)


def store(dst: Any, value: Any, *, mask: Any = None, **kw: Any) -> None:
    ops.store(dst, value, mask=mask)


def load_transpose2d(src: Any, *, mask: Any = None, dtype: Any = None) -> NkiTensor:
    """HBM [P, F] -> SBUF [F, P]: a transposing DMA (DmaTranspose) for 2-byte dtypes; other
    dtypes move as a DMA whose source pattern walks the tensor transposed (one element per
    descriptor run, as slow as such a DMA is)."""
    from dataclasses import replace

    from hwsim.nki.pattern import PatternView, of_view
    from hwsim.nki.tensor import as_tensor

    t = as_tensor(src, "nl.load_transpose2d")
    view = t.masked(mask)
    out = allocate((view.shape[1], view.shape[0]), (t.dtype if dtype is None else dtype), sbuf)
    queue = state().next_load_queue()
    if t.hw_dtype.itemsize == 2:
        lisa.dma_transpose(out.lang_view, view, engine="sync", queue=queue)
        return out
    pattern = of_view(view)
    base = view if isinstance(view, Tile) else view.tile
    transposed = PatternView(base, replace(pattern, dims=pattern.dims[::-1]))
    lisa.dma_copy(out.lang_view, transposed, engine="sync", queue=queue)
    return out


# ---- loops, SPMD ----------------------------------------------------------------------------
def _range(kind: str, args: tuple[int, ...], directives: Any = None) -> Iterator[int]:
    """The loop; ``directives``: ``ncc.multi_buffer(k)`` sets the body's ring depth."""
    from hwsim.nki.compiler import multi_buffer

    given = directives if isinstance(directives, (list, tuple)) else [directives]
    depth = next((d.depth for d in given if isinstance(d, multi_buffer)), None)
    return state().loop(kind, _b.range(*[int(a) for a in args]), depth)


def affine_range(*args: int, directives: Any = None, **kw: Any) -> Iterator[int]:
    """Iterations without loop-carried dependencies (tiles in the body are multi-buffered)."""
    return _range("affine_range", args, directives)


def sequential_range(*args: int, directives: Any = None, **kw: Any) -> Iterator[int]:
    """Iterations in order: a scheduler barrier between iterations (the kernel language's
    sequential_range), and the region recorded in the program's meta."""
    return _range("sequential_range", args, directives)


def static_range(*args: int, directives: Any = None, **kw: Any) -> Iterator[int]:
    return _range("static_range", args, directives)


def range(*args: int, directives: Any = None, **kw: Any) -> Iterator[int]:
    return _range("range", args, directives)


def program_id(axis: int = 0) -> int:
    st = state()
    if not 0 <= axis < len(st.program_ids):
        raise fail("nl.program_id", f"axis {axis} of a {len(st.grid)}-D launch grid {st.grid}")
    return st.program_ids[axis]


def num_programs(axes: Any = None) -> Any:
    grid = state().grid
    if axes is None:
        return int(np.prod(grid))
    if isinstance(axes, int):
        return grid[axes] if axes < len(grid) else 1
    return tuple(grid[a] for a in axes)


def program_ndim() -> int:
    """Dimensions of the launch grid (0 for a kernel launched without one, as NKI)."""
    return state().grid_ndim


class spmd_dim:
    """``nl.spmd_dim(...)``: a launch-grid dimension (grids run here as instances on one core)."""

    def __init__(self, *sizes: Any) -> None:
        self.size = int(np.prod([int(s) for s in sizes])) if sizes else 1

    def __int__(self) -> int:
        return self.size

    __index__ = __int__


class nc(spmd_dim):
    """``nl.nc(n)``: a grid dimension over the logical NeuronCore's physical cores (LNC)."""


@contextlib.contextmanager
def no_reorder() -> Iterator[None]:
    """Keep the block's instructions in program order among themselves: the kernel language's
    ``no_reorder`` (honoured by a scheduled build, the default), and recorded in the
    program's meta (``nki_no_reorder``, per-engine pcs under program order)."""
    from hwsim.lang.scheduling import no_reorder as lang_no_reorder
    from hwsim.nki.state import NkiState, user_site

    st = state()
    start = NkiState.stream_marks()
    site = user_site()
    with lang_no_reorder():
        yield
    st.no_reorder.append(NkiState.region(start, f"{site[0].rsplit('/', 1)[-1]}:{site[1]}"))


def device_print(*args: Any, **kw: Any) -> None:
    """Accepted; prints nothing (values exist only once the simulation runs)."""
    state().note("nl.device_print: accepted, prints nothing (no values while building)")


# ---- operators ------------------------------------------------------------------------------
class NlOp:
    """An nl operator: callable on tiles, and an ``op=`` value of nki.isa calls."""

    def __init__(self, name: str, kind: str) -> None:
        self.name, self.kind = name, kind
        self.__name__ = name

    def __repr__(self) -> str:
        return f"nl.{self.name}"

    @honours_constant_mask
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("engine", None)
        if self.kind == "binary":
            return ops.binary(self.name, *args, **kwargs)
        if self.kind == "unary":
            return ops.unary(self.name, *args, **kwargs)
        if self.kind == "reduce":
            return ops.reduce(self.name, *args, **kwargs)
        raise AssertionError(self.kind)


_OPS: dict[str, NlOp] = {}
for _name in ops.BINARY:
    _OPS[_name] = NlOp(_name, "binary")
for _name in ops.UNARY:
    _OPS[_name] = NlOp(_name, "unary")
for _name in ops.REDUCE:
    _OPS[_name] = NlOp(_name, "reduce")
globals().update(_OPS)
max = _OPS["max"]
min = _OPS["min"]
abs = _OPS["abs"]
all = _OPS["all"]
any = _OPS["any"]
sum = _OPS["sum"]

negative = honours_constant_mask(ops.negative)


def floor(x: Any, *, dtype: Any = None, mask: Any = None, **kw: Any) -> NkiTensor:
    """Largest integer <= x, elementwise (VectorE: ``hwsim.nki.language_ops.rounding``)."""
    return ops.rounding("floor", x, dtype=dtype, mask=mask)


def ceil(x: Any, *, dtype: Any = None, mask: Any = None, **kw: Any) -> NkiTensor:
    """Smallest integer >= x, elementwise (VectorE: ``hwsim.nki.language_ops.rounding``)."""
    return ops.rounding("ceil", x, dtype=dtype, mask=mask)


def trunc(x: Any, *, dtype: Any = None, mask: Any = None, **kw: Any) -> NkiTensor:
    """x rounded toward 0, elementwise (VectorE: ``hwsim.nki.language_ops.rounding``)."""
    return ops.rounding("trunc", x, dtype=dtype, mask=mask)


floor, ceil, trunc = map(honours_constant_mask, (floor, ceil, trunc))
reciprocal = honours_constant_mask(ops.reciprocal)
mean = honours_constant_mask(ops.mean)
copy = honours_constant_mask(ops.copy)
matmul = honours_constant_mask(ops.matmul)
transpose = honours_constant_mask(ops.transpose)
softmax = honours_constant_mask(ops.softmax)
broadcast_to = ops.broadcast_to
loop_reduce = honours_constant_mask(ops.loop_reduce)
load = honours_constant_mask(load)
store = honours_constant_mask(store)
load_transpose2d = honours_constant_mask(load_transpose2d)
iota = honours_constant_mask(iota)
where = honours_constant_mask(broadcast.where)
_EXPORTED = (PendingMatmul, arange, ds, mgrid)  # re-exported nl names


#: nki.language names of the public docs that this simulator does not implement, and why.
UNSUPPORTED = {
    "gather_flattened": "indirect on-chip gather: use nisa.local_gather",
    "random_seed": "use nisa.set_rng_seed",
    "rand": "use nisa.rng / nisa.rand2",
    "dropout": "use nisa.dropout",
    "atomic_rmw": "atomic HBM read-modify-write is not modelled",
    "invert": "use nl.bitwise_xor(x, -1)",
    "expand_dims": "tiles cannot be reshaped here",
    "var": "use nisa.bn_stats / nisa.bn_aggr",
    "arctan2": "no two-input arctan is modelled",
}


def __getattr__(name: str) -> Any:
    """An NKI name this simulator lacks: calling it is one clear error naming the kernel line."""
    return unsupported_name("language", "nl", UNSUPPORTED, name)
