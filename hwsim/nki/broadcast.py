"""NumPy-style broadcasting of tile operands across both the partition and the free dimensions
(``[P, W, 1, 1]`` against ``[1, 1, 3, 3]``), and ``nl.where`` on top of it.

A partition broadcast of a ``[1, ...]`` tile is the ones-vector matmul ``nl.broadcast_to``
emits for a ``[1, N]`` row (the tile's free dimensions flattened into N); free dimensions of
size 1 then repeat as stride-0 reads of the operand (``hwsim.nki.pattern.broadcast``).
"""

from __future__ import annotations

import math
from typing import Any

from hwsim.lang import isa as lisa
from hwsim.lang.tiles import sbuf
from hwsim.nki.dtypes import promote
from hwsim.nki.tensor import NkiTensor, allocate, as_tensor, dst, fail, src


def shape_of(call: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast shape of same-rank operand shapes (each dimension equal or 1)."""
    if len({len(s) for s in shapes}) != 1:
        raise fail(call, f"operands of ranks {[len(s) for s in shapes]}: give them the same rank")
    out = []
    for sizes in zip(*shapes, strict=True):
        wide = {n for n in sizes if n != 1}
        if len(wide) > 1:
            raise fail(call, f"shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(wide.pop() if wide else 1)
    return tuple(out)


def expand(t: NkiTensor, shape: tuple[int, ...], mask: Any = None) -> Any:
    """``t`` as an operand of ``shape`` (same rank; each dimension of ``t`` equal or 1)."""
    from hwsim.nki.language_ops import _wide, broadcast_to

    if t.shape[0] == 1 and shape[0] > 1:
        free = math.prod(t.shape[1:])
        row = broadcast_to(t.reshape((1, free)), (shape[0], free))
        t = row.reshape((shape[0], *t.shape[1:]))
    return _wide(t, shape, mask)


def tile_or_fill(value: Any, shape: tuple[int, ...], dtype: Any, mask: Any) -> Any:
    """A tile operand of ``shape``: ``value`` broadcast, or a Python number set by a memset."""
    if _number(value):
        filled = allocate(shape, dtype, sbuf)
        lisa.memset(filled.lang_view, float(value))
        return src(filled, mask)
    return expand(as_tensor(value, "nl.where"), shape, mask)


def where(condition: Any, x: Any, y: Any, *, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """``nl.where(condition, x, y)``: ``x`` where ``condition`` is nonzero, else ``y`` (tiles
    or numbers, broadcast to one shape): VectorE ``select``."""
    cond = as_tensor(condition, "nl.where")
    tiles = [as_tensor(v, "nl.where") for v in (x, y) if not _number(v)]
    shape = shape_of("nl.where", cond.shape, *(t.shape for t in tiles))
    if dtype is None:
        dtype = promote(x, y) if tiles else "fp32"
    out = allocate(shape, dtype, sbuf)
    lisa.select(
        dst=dst(out, mask),
        predicate=expand(cond, shape, mask),
        on_true=tile_or_fill(x, shape, out.dtype, mask),
        on_false=tile_or_fill(y, shape, out.dtype, mask),
    )
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
