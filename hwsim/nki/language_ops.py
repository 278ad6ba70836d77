"""The tile-returning ``nki.language`` operators, each lowered to the instruction (and engine)
the NKI compiler picks for it:

- arithmetic and comparisons: VectorE ``tensor_tensor`` (two tiles) or ``tensor_scalar`` (a
  scalar, or a [P, 1] column broadcast along the free axis);
- transcendental functions: ScalarE ``activation``;
- free-axis reductions: VectorE ``tensor_reduce``; partition-axis: GpSimdE
  ``tensor_partition_reduce``;
- ``matmul``: TensorE into an implicit PSUM tile (``PendingMatmul``), ``transpose``: TensorE;
- ``copy`` (and the evacuation of PSUM before a store): VectorE ``tensor_copy``;
- ``broadcast_to`` of a [1, N] row: a ones-vector matmul on TensorE (what the compiler emits for
  a partition broadcast), of a [P, 1] column: a VectorE ``tensor_scalar``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hwsim.isa.ap import MemorySpace
from hwsim.kernels.ops import ActivationFunction, AluOp, ReduceOp
from hwsim.lang import isa as lisa
from hwsim.lang.tiles import View, psum, sbuf
from hwsim.nki.dtypes import hw_dtype, promote
from hwsim.nki.pending import Pending, PendingCopy, PendingLoad, PendingMatmul
from hwsim.nki.tensor import (
    Indirect,
    NkiTensor,
    allocate,
    as_tensor,
    dst,
    fail,
    src,
)

BINARY = {
    "add": AluOp.add,
    "subtract": AluOp.subtract,
    "multiply": AluOp.multiply,
    "divide": AluOp.divide,
    "maximum": AluOp.max,
    "minimum": AluOp.min,
    "power": AluOp.power,
    "equal": AluOp.is_equal,
    "not_equal": AluOp.not_equal,
    "greater": AluOp.is_gt,
    "greater_equal": AluOp.is_ge,
    "less": AluOp.is_lt,
    "less_equal": AluOp.is_le,
    "logical_and": AluOp.logical_and,
    "logical_or": AluOp.logical_or,
    "logical_xor": AluOp.logical_xor,
    "bitwise_and": AluOp.bitwise_and,
    "bitwise_or": AluOp.bitwise_or,
    "bitwise_xor": AluOp.bitwise_xor,
    "left_shift": AluOp.logical_shift_left,
    "right_shift": AluOp.logical_shift_right,
    # the ALU's remainder has the sign of x (C fmod); for x, y >= 0 it is also numpy's mod
    "mod": AluOp.mod,
    "fmod": AluOp.mod,
}

UNARY = {
    "exp": ActivationFunction.exp,
    "log": ActivationFunction.log,
    "tanh": ActivationFunction.tanh,
    "sigmoid": ActivationFunction.sigmoid,
    "relu": ActivationFunction.relu,
    "gelu": ActivationFunction.gelu,
    "gelu_apprx_tanh": ActivationFunction.gelu_apprx_tanh,
    "gelu_dx": ActivationFunction.gelu_dx,
    "silu": ActivationFunction.silu,
    "silu_dx": ActivationFunction.silu_dx,
    "softplus": ActivationFunction.softplus,
    "mish": ActivationFunction.mish,
    "sqrt": ActivationFunction.sqrt,
    "rsqrt": ActivationFunction.rsqrt,
    "square": ActivationFunction.square,
    "abs": ActivationFunction.abs,
    "sign": ActivationFunction.sign,
    "sin": ActivationFunction.sin,
    "cos": ActivationFunction.cos,
    "erf": ActivationFunction.erf,
    "erf_dx": ActivationFunction.erf_dx,
    "arctan": ActivationFunction.arctan,
}

REDUCE = {
    "sum": ReduceOp.add,
    "max": ReduceOp.max,
    "min": ReduceOp.min,
    "prod": ReduceOp.multiply,
    "all": ReduceOp.bitwise_and,
    "any": ReduceOp.bitwise_or,
}


def _result(shape: tuple[int, ...], dtype: Any, like: NkiTensor) -> NkiTensor:
    return allocate(shape, (like.dtype if dtype is None else dtype), sbuf)


def _column(t: NkiTensor) -> bool:
    """A [P] or [P, 1] tile: a per-partition scalar operand."""
    return t.ndim == 1 or (t.ndim >= 2 and all(n == 1 for n in t.shape[1:]))


def _scalar(value: Any) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)


def binary(
    name: str, x: Any, y: Any, *, dtype: Any = None, mask: Any = None, dst: Any = None
) -> NkiTensor:
    """``nl.<name>(x, y)``: elementwise with NKI broadcasting (scalar, [P, 1] column).
    ``divide`` of integer operands is true division: float32 unless ``dtype`` says otherwise
    (``pos / 38`` then ``nl.floor``, as nki-samples' resize kernel computes rows)."""
    op = BINARY[name]
    if _scalar(x) and _scalar(y):
        raise fail(f"nl.{name}", "both operands are Python numbers; compute them in Python")
    if name == "divide" and dtype is None and dst is None and _all_int(x, y):
        dtype = "fp32"
    if dtype is None and dst is None:
        dtype = promote(x, y)
    if _scalar(x):
        t = as_tensor(y, f"nl.{name}")
        out = dst if dst is not None else _result(t.shape, dtype, t)
        lisa.tensor_scalar(_dst(out, mask), src(t, mask), op, float(x), reverse0=True)
        return out
    t = as_tensor(x, f"nl.{name}")
    if _scalar(y):
        out = dst if dst is not None else _result(t.shape, dtype, t)
        lisa.tensor_scalar(_dst(out, mask), src(t, mask), op, float(y))
        return out
    u = as_tensor(y, f"nl.{name}")
    if t.shape == u.shape:
        out = dst if dst is not None else _result(t.shape, dtype, t)
        lisa.tensor_tensor(_dst(out, mask), src(t, mask), src(u, mask), op)
        return out
    if _column(u) and u.shape[0] == t.shape[0]:
        out = dst if dst is not None else _result(t.shape, dtype, t)
        lisa.tensor_scalar(_dst(out, mask), src(t, mask), op, src(u, mask))
        return out
    if _column(t) and t.shape[0] == u.shape[0]:
        out = dst if dst is not None else _result(u.shape, dtype, u)
        lisa.tensor_scalar(_dst(out, mask), src(u, mask), op, src(t, mask), reverse0=True)
        return out
    if t.shape[0] == 1 and u.shape[1:] == t.shape[1:]:
        return binary(name, broadcast_to(t, u.shape), u, dtype=dtype, mask=mask, dst=dst)
    if _free_broadcast(t, u) or _free_broadcast(u, t):
        shape = tuple(max(a, b) for a, b in zip(t.shape, u.shape, strict=True))
        out = dst if dst is not None else _result(shape, dtype, t)
        lisa.tensor_tensor(_dst(out, mask), _wide(t, shape, mask), _wide(u, shape, mask), op)
        return out
    if u.shape[0] == 1 and t.shape[1:] == u.shape[1:]:
        return binary(name, t, broadcast_to(u, t.shape), dtype=dtype, mask=mask, dst=dst)
    from hwsim.nki import broadcast

    shape = broadcast.shape_of(f"nl.{name}", t.shape, u.shape)
    out = dst if dst is not None else _result(shape, dtype, t)
    a, b = broadcast.expand(t, shape, mask), broadcast.expand(u, shape, mask)
    lisa.tensor_tensor(_dst(out, mask), a, b, op)
    return out


def _all_int(*values: Any) -> bool:
    """Whether every operand is an int tile or a Python int."""
    for v in values:
        if isinstance(v, (NkiTensor, Pending)):
            if as_tensor(v, "operand").hw_dtype.is_float:
                return False
        elif not isinstance(v, (int, np.integer)):
            return False
    return True


def _free_broadcast(a: NkiTensor, b: NkiTensor) -> bool:
    """Same rank and partitions, every free dimension of ``a`` equal to ``b``'s or 1."""
    return (
        a.ndim == b.ndim
        and a.shape[0] == b.shape[0]
        and all(x in (y, 1) for x, y in zip(a.shape[1:], b.shape[1:], strict=True))
    )


def _wide(t: NkiTensor, shape: tuple[int, ...], mask: Any) -> Any:
    """``t`` as an operand of ``shape``: free dimensions of size 1 repeat (a stride-0 read)."""
    from hwsim.nki.pattern import broadcast

    view = src(t, mask)
    return view if tuple(view.shape) == shape else broadcast(view, t.axis_vars, shape)


def _dst(out: Any, mask: Any) -> Any:
    return dst(out, mask)


def unary(name: str, x: Any, *, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """``nl.exp(x)`` & co.: ScalarE activation."""
    t = as_tensor(x, f"nl.{name}")
    out = _result(t.shape, dtype, t)
    lisa.activation(dst(out, mask), UNARY[name], src(t, mask))
    return out


def rounding(name: str, x: Any, *, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """``nl.floor`` / ``nl.ceil`` / ``nl.trunc``: four VectorE ALU steps in fp32 (no engine
    has a rounding activation): r = fmod(x, 1) (the sign of x), t = x - r (x truncated), then
    floor = t - (r < 0), ceil = t + (r > 0); the result is cast to ``dtype``."""
    t = as_tensor(x, f"nl.{name}")
    part, whole = _result(t.shape, "fp32", t), _result(t.shape, "fp32", t)
    lisa.tensor_scalar(dst(part, mask), src(t, mask), AluOp.mod, 1.0)
    lisa.tensor_tensor(dst(whole, mask), src(t, mask), src(part, mask), AluOp.subtract)
    out = _result(t.shape, dtype, t)
    if name == "trunc":
        lisa.tensor_copy(dst(out, mask), src(whole, mask))
        return out
    side = AluOp.is_lt if name == "floor" else AluOp.is_gt
    lisa.tensor_scalar(dst(part, mask), src(part, mask), side, 0.0)
    step = AluOp.subtract if name == "floor" else AluOp.add
    lisa.tensor_tensor(dst(out, mask), src(whole, mask), src(part, mask), step)
    return out


def negative(x: Any, *, dtype: Any = None, mask: Any = None) -> NkiTensor:
    return binary("multiply", x, -1.0, dtype=dtype, mask=mask)


def reciprocal(x: Any, *, dtype: Any = None, mask: Any = None) -> NkiTensor:
    t = as_tensor(x, "nl.reciprocal")
    out = _result(t.shape, dtype, t)
    lisa.reciprocal(dst(out, mask), src(t, mask))
    return out


def _free_axes(name: str, t: NkiTensor, axis: Any) -> int:
    """How many innermost free axes ``axis`` names (they must be the innermost ones)."""
    axes = sorted({a % t.ndim for a in ((axis,) if isinstance(axis, int) else tuple(axis))})
    if 0 in axes:
        raise fail(f"nl.{name}", "reduce the partition axis alone (axis=0) or free axes only")
    if axes != list(range(t.ndim - len(axes), t.ndim)):
        raise fail(f"nl.{name}", f"axis={axis}: reduce the innermost free axes")
    return len(axes)


def reduced_last(name: str, t: NkiTensor, axis: Any, keepdims: bool) -> tuple[NkiTensor, Any]:
    """``t`` viewed with the reduced free axes innermost (an access-pattern view, no copy), and
    the axis argument for it: a reduction over free axes that are not the innermost ones
    (``nl.sum(t[i0, 2 * i1 + i2, 2 * i3 + i4], axis=[2, 4])``) reads them in that order."""
    from hwsim.nki.pattern import PatternView, of_view

    axes = sorted({a % t.ndim for a in ((axis,) if isinstance(axis, int) else tuple(axis))})
    if 0 in axes or axes == list(range(t.ndim - len(axes), t.ndim)):
        return t, axis
    if keepdims:
        raise fail(f"nl.{name}", f"axis={axis} with keepdims: reduce the innermost free axes")
    order = tuple(a for a in range(t.ndim) if a not in axes) + tuple(axes)
    pattern = of_view(t.lang_view, t.axis_vars).permuted(order)
    view = NkiTensor(PatternView(t.tile, pattern), t.owner, pattern.dims)
    view.deferred = t.deferred
    return view, tuple(range(t.ndim - len(axes), t.ndim))


def reduce(
    name: str, x: Any, axis: Any, *, dtype: Any = None, keepdims: bool = False, mask: Any = None
) -> NkiTensor:
    t = as_tensor(x, f"nl.{name}")
    t, axis = reduced_last(name, t, axis, keepdims)
    if axis == 0 or axis == (0,):
        out = _result((1, *t.shape[1:]), dtype, t)
        lisa.tensor_partition_reduce(dst(out, mask), REDUCE[name], src(t, mask))
        return out
    count = _free_axes(name, t, axis)
    kept = t.shape[: t.ndim - count]
    shape = (*kept, *([1] * count)) if keepdims else (kept if len(kept) > 1 else (kept[0], 1))
    out = _result(shape, dtype, t)
    lisa.tensor_reduce(dst(out, mask), REDUCE[name], src(t, mask), axes=count)
    return out


def mean(x: Any, axis: Any, *, dtype: Any = None, keepdims: bool = False, mask: Any = None) -> Any:
    """``nl.mean``: a VectorE sum, then a VectorE multiply by 1/n."""
    t = as_tensor(x, "nl.mean")
    total = reduce(
        "sum", t, axis, dtype=("fp32" if dtype is None else dtype), keepdims=keepdims, mask=mask
    )
    count = int(np.prod([t.shape[a] for a in ((axis,) if isinstance(axis, int) else axis)]))
    lisa.tensor_scalar(total.lang_view, total.lang_view, AluOp.multiply, 1.0 / count)
    return total


def copy(x: Any, *, dtype: Any = None, mask: Any = None) -> PendingCopy:
    """``nl.copy``: VectorE tensor_copy (the PSUM -> SBUF evacuation); ``t[...] = nl.copy(x)``
    is one copy into ``t`` (``PendingCopy``)."""
    t = as_tensor(x, "nl.copy")
    return PendingCopy(t, hw_dtype(dtype if dtype is not None else t.dtype), mask)


def assign(target: NkiTensor, value: Any) -> None:
    """``t[...] = value``: a copy (VectorE) or a memset of a number."""
    if _scalar(value):
        lisa.memset(dst(target), float(value))
        return
    if isinstance(value, Pending):
        value.into_tile(target)
        return
    mask = getattr(value, "written_mask", None)  # a result computed under a mask: copy that
    if mask is False:
        return  # the result of a call masked off entirely (``hwsim.nki.masking``)
    lisa.tensor_copy(dst(target, mask), src(value, mask))


def matmul(x: Any, y: Any, *, transpose_x: bool = False, mask: Any = None) -> PendingMatmul:
    """``nl.matmul``: x @ y (or x.T @ y with transpose_x=True) into an implicit PSUM tile; without
    transpose_x, x is transposed first on TensorE (as the compiler inserts). An operand in PSUM
    (an earlier matmul's or transpose's result) is copied to SBUF first (VectorE), as the
    compiler does: TensorE reads SBUF only."""
    stationary = _in_sbuf(as_tensor(x, "nl.matmul"))
    if not transpose_x:
        stationary = copy(transpose(stationary, mask=mask)).materialize()
    return PendingMatmul(stationary, _in_sbuf(as_tensor(y, "nl.matmul")), mask, {})


def _in_sbuf(t: NkiTensor) -> NkiTensor:
    return copy(t).materialize() if t.memory is MemorySpace.PSUM else t


def transpose(x: Any, *, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """``nl.transpose``: [P, F] -> [F, P] on TensorE, into PSUM (F <= 128)."""
    t = as_tensor(x, "nl.transpose")
    if t.ndim != 2:
        raise fail("nl.transpose", f"a 2-D tile, got {list(t.shape)}")
    out = allocate((t.shape[1], t.shape[0]), (t.dtype if dtype is None else dtype), psum)
    lisa.nc_transpose(dst(out), src(t, mask))
    return out


def softmax(x: Any, axis: Any = -1, *, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """``nl.softmax`` over the free axis: max (VectorE), exp(x - max) with the row sums (ScalarE
    activation_reduce), 1/sum (VectorE reciprocal), scaling (VectorE tensor_scalar)."""
    t = as_tensor(x, "nl.softmax")
    _free_axes("softmax", t, axis)
    rows = t.shape[0]
    peak = allocate((rows, 1), "fp32", sbuf)
    lisa.tensor_reduce(peak.lang_view, ReduceOp.max, src(t, mask), axes=t.ndim - 1, negate=True)
    out = _result(t.shape, dtype, t)
    total = allocate((rows, 1), "fp32", sbuf)
    lisa.activation_reduce(
        dst(out, mask),
        ActivationFunction.exp,
        src(t, mask),
        reduce_res=total.lang_view,
        bias=peak.lang_view,
    )
    lisa.reciprocal(total.lang_view, total.lang_view)
    lisa.tensor_scalar(dst(out, mask), src(out, mask), AluOp.multiply, total.lang_view)
    return out


def broadcast_to(x: Any, shape: Any) -> NkiTensor:
    """[1, N] -> [P, N] (ones-vector matmul on TensorE, then VectorE copy) or [P, 1] -> [P, N]."""
    t = as_tensor(x, "nl.broadcast_to")
    shape = tuple(int(n) for n in shape)
    if t.shape == shape:
        return t
    if t.ndim == 2 and t.shape[0] == 1 and t.shape[1] == shape[1] and not t.hw_dtype.is_float:
        return _broadcast_int_row(t, shape)
    if t.ndim == 2 and t.shape[0] == 1 and t.shape[1] == shape[1]:
        ones = allocate((1, shape[0]), t.dtype, sbuf)
        lisa.memset(ones.lang_view, 1.0)
        acc = allocate(shape, "fp32", psum)
        lisa.nc_matmul(acc.lang_view, ones.lang_view, src(t), is_stationary_onezero=True)
        return copy(acc, dtype=t.dtype).materialize()
    if _column(t) and t.shape[0] == shape[0]:
        out = allocate(shape, t.dtype, sbuf)
        lisa.memset(out.lang_view, 0.0)
        lisa.tensor_scalar(out.lang_view, out.lang_view, AluOp.add, src(t))
        return out
    raise fail("nl.broadcast_to", f"cannot broadcast {list(t.shape)} to {list(shape)}")


def _broadcast_int_row(t: NkiTensor, shape: tuple[int, ...]) -> NkiTensor:
    """An integer [1, N] row to [P, N]: TensorE multiplies floats only, so the row's bytes are
    read as 16-bit halves (a bitcast view), each exact in fp32 (VectorE cast), broadcast by the
    ones-vector matmul, cast back to 16 bits and read as the row's dtype: every bit kept."""
    halves = t.view("uint16") if t.hw_dtype.itemsize == 4 else t
    wide = allocate(halves.shape, "fp32", sbuf)
    lisa.tensor_copy(wide.lang_view, src(halves))
    spread = broadcast_to(wide, (shape[0], halves.shape[1]))
    out = allocate((shape[0], halves.shape[1]), halves.dtype, sbuf)
    lisa.tensor_copy(out.lang_view, src(spread))
    return out.view(t.dtype) if halves is not t else out


def load(src_: Any, *, mask: Any = None, dtype: Any = None) -> PendingLoad | NkiTensor:
    """``nl.load``: HBM -> a new SBUF tile, triggered by the Sync engine (queues rotate);
    emitted at first use, or straight into the tile it is assigned to."""

    if isinstance(src_, Indirect):
        return _gather(src_, dtype, mask)
    t = as_tensor(src_, "nl.load")
    if t.memory is not MemorySpace.HBM:
        raise fail("nl.load", f"{t.tile.name} is in {t.buffer}; nl.load reads HBM")
    view = t.masked(mask)
    axis_vars = t.axis_vars
    shape: tuple[int, ...]
    if not t.shape:  # one element (``sinks[b, h]``): NKI loads it as a [1, 1] tile
        view, shape, axis_vars = _element_view(view), (1, 1), (None, None)
    else:
        shape = tuple(t.shape) if len(t.shape) > 1 else _one_dim(t)
    if len(view.shape) == 1:
        view = view if len(shape) == 1 else _as_2d(t, view, shape)
    return PendingLoad(
        view, hw_dtype(dtype if dtype is not None else t.dtype), shape, axis_vars, mask
    )


def _element_view(view: Any) -> View:
    """A view of one element of an HBM tensor as its last (up to) two axes, each of size 1."""
    tile = view.tile if isinstance(view, View) else view
    dims = view.dims if isinstance(view, View) else tuple((0, n, 1) for n in tile.shape)
    return View(tile, dims, tuple(range(max(0, tile.ndim - 2), tile.ndim)))


def _one_dim(t: NkiTensor) -> tuple[int, int]:
    """The tile a 1-D HBM view loads into: [n, 1] when it keeps a leading axis of its tensor
    and an int picked a later one (``A[0:128, i]``: a column, the partition axis kept, as
    NKI), else one row [1, n] (``A[i, 0:512]``, a 1-D tensor)."""
    view = t.lang_view
    n = t.shape[0]
    if (
        isinstance(view, View)
        and view.tile.ndim > 1
        and view.kept
        and view.kept[0] < view.tile.ndim - 1
    ):
        return (n, 1)
    return (1, n)


def _as_2d(t: NkiTensor, view: Any, shape: tuple[int, ...]) -> Any:
    """A 1-D HBM view as the [n, 1] column or [1, n] row it loads into (a pattern view)."""
    from dataclasses import replace

    from hwsim.nki.pattern import PatternView, of_view

    pattern = of_view(view)
    dims = (*pattern.dims, None) if shape[1] == 1 else (None, *pattern.dims)
    return PatternView(view.tile, replace(pattern, dims=dims))


def _gather(rows: Indirect, dtype: Any, mask: Any = None) -> NkiTensor:
    """``nl.load(table[idx, :])``: an indirect DMA, hwsim's ``dma_gather`` (software DGE on
    GpSimdE, as the compiler lowers it; docs/kernel-language.md)."""
    out = allocate(rows.shape, (rows.dtype if dtype is None else dtype), sbuf)
    lisa.dma_gather(dst(out, mask), rows.table.lang_view, src(rows.indices, mask))
    return out


def store(dst_: Any, value: Any, *, mask: Any = None) -> None:
    """``nl.store``: a tile -> HBM, triggered by GpSimdE on its own queue (so stores never hold up
    loads); a PSUM value is first copied to SBUF (VectorE), as DMAs do not read PSUM."""
    from hwsim.nki.state import state

    target = as_tensor(dst_, "nl.store")
    if target.memory is not MemorySpace.HBM:
        raise fail("nl.store", f"{target.tile.name} is in {target.buffer}; nl.store writes HBM")
    v = as_tensor(value, "nl.store")
    if v.memory is MemorySpace.PSUM:
        v = copy(v, dtype=target.dtype).materialize()
    lisa.dma_copy(target.masked(mask), src(v, mask), engine="gpsimd", queue=state().store_queue)


def loop_reduce(x: Any, op: Any, loop_indices: Any = None, *, dtype: Any = None, mask: Any = None):
    """``nl.loop_reduce(x, op, loop_indices)``: reduce ``x`` elementwise across the iterations of
    the loops ``loop_indices`` names. Assigned into a tile, that tile is the op's other input (one
    VectorE tensor_tensor, NKI's rule); rebound to a name, one accumulator per iteration of the
    other enclosing loops, seeded by the first reduced iteration."""
    from hwsim.nki.isa_ops import alu_op
    from hwsim.nki.pending import PendingLoopReduce
    from hwsim.nki.state import state

    st = state()
    if not st.loops:
        raise fail("nl.loop_reduce", "call it inside an nl.affine_range / sequential_range loop")
    source = as_tensor(x, "nl.loop_reduce")
    frames = _reduced_loops(st.loops, loop_indices)
    return PendingLoopReduce(source, alu_op(op, "nl.loop_reduce"), frames, dtype, mask)


def _reduced_loops(loops: list[Any], loop_indices: Any) -> tuple[Any, ...]:
    """The enclosing loop frames ``loop_indices`` names: loop variables (which know their loop),
    or plain numbers, each matched to the one enclosing loop at that value; none given: the
    innermost loop."""
    from hwsim.nki.state import LoopIndex

    if loop_indices is None:
        return (loops[-1],)
    items = loop_indices if isinstance(loop_indices, list | tuple) else [loop_indices]
    frames = []
    for item in items:
        if isinstance(item, LoopIndex) and any(item.frame is f for f in loops):
            frames.append(item.frame)
            continue
        if isinstance(item, LoopIndex):
            raise fail("nl.loop_reduce", f"loop index {int(item)} belongs to a loop that ended")
        matches = [f for f in loops if isinstance(item, int) and f.value == item]
        if len(matches) != 1:
            raise fail(
                "nl.loop_reduce",
                f"loop_indices entry {item!r} does not name one enclosing loop "
                f"({len(matches)} are at that value); pass the loop variable itself",
            )
        frames.append(matches[0])
    return tuple(frames)
