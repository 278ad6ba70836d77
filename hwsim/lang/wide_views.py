"""Elementwise instructions over views wider than an access pattern: one instruction per slice.

A hardware access pattern has at most ``MAX_FREE_DIMS`` free dimensions. An NKI index expression
over several iterators (``t[i_p, 2 * i_y + i_x, ...]``) can give a view with more that do not
merge; the Neuron compiler then emits the instruction once per slice of the outer dimensions.
``pieces`` does the same for instructions whose every output element depends only on the same
element of each input (and on per-partition operands): it cuts the views along their outermost
free dimension of more than one element, again until each piece fits. Operands a piece does not
cut (a per-partition scalar or bias) are passed whole; an operand broadcast along the cut
dimension is a view of stride 0 there, cut like the others. Any other instruction, or operands
whose shapes do not line up, keeps the error: cutting it could change what it computes.
"""

from __future__ import annotations

from typing import Any

from hwsim.isa.ap import MAX_FREE_DIMS
from hwsim.lang.tiles import Tile, TooManyFreeDims, View

#: Opcodes each of whose output elements reads only the same element of every input operand
#: (per-partition operands broadcast along the free dims).
ELEMENTWISE_OPCODES = frozenset(
    {
        "activation",
        "dma_copy",
        "memset",
        "reciprocal",
        "scalar_tensor_tensor",
        "tensor_copy",
        "tensor_scalar",
        "tensor_tensor",
    }
)


def pieces(opcode: str, fields: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The instruction's fields cut into slices each of whose views fits an access pattern, or
    None when every view fits (or the instruction cannot be cut: its own error stands)."""
    if opcode not in ELEMENTWISE_OPCODES:
        return None
    wide = next(  # per emitted instruction: the rank first, the pattern only if it may not fit
        (
            v
            for v in fields.values()
            if isinstance(v, (Tile, View)) and _rank(v) > MAX_FREE_DIMS + 1 and _too_wide(v)
        ),
        None,
    )
    if wide is None:
        return None
    views = {name: v for name, v in fields.items() if isinstance(v, (Tile, View))}
    shape = tuple(wide.shape)
    dim = next((d for d in range(1, len(shape)) if shape[d] > 1), None)
    if dim is None:
        return None
    count = shape[dim]
    cut: list[str] = []
    for name, view in views.items():
        own = tuple(view.shape)
        if len(own) == len(shape) and own[dim] == count:
            cut.append(name)
        elif not all(n == 1 for n in own[1:]):  # neither the same slice nor per-partition
            return None
    out: list[dict[str, Any]] = []
    for index in range(count):
        piece = dict(fields)
        for name in cut:
            piece[name] = _slice(views[name], dim, index)
        out.extend(pieces(opcode, piece) or [piece])
    return out


def _rank(view: Tile | View) -> int:
    """Dimensions of a view (partition dim included), without building its shape."""
    if isinstance(view, Tile):
        return len(view.shape)
    pattern = getattr(view, "pattern", None)  # ``hwsim.nki.pattern.PatternView``
    return len(view.kept) if pattern is None else len(pattern.dims)


def _too_wide(view: Tile | View) -> bool:
    try:
        view.ap()
    except TooManyFreeDims:
        return True
    return False


def _slice(view: Tile | View, dim: int, index: int) -> View:
    """``view`` with dimension ``dim`` narrowed to element ``index`` (kept, of size 1)."""
    return (view.full() if isinstance(view, Tile) else view).element_slice(dim, index)
