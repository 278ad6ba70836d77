"""Batched emission: a block of a kernel's loop traced once and instantiated again.

``repeat(body, operands, params)`` runs ``body`` (a function of no arguments that emits
instructions) the first time it meets a key, recording a copy token per instruction it emits;
the next time the same body is met with the same key it appends those instructions again
(``ProgramBuilder.emit_block``: the same objects, shared by their positions, each given a copy
of its own at ``build()`` where it gets waits) without running it. A loop nest whose inner block
emits the same instructions in many iterations (the accumulation group of a blocked matmul, once
per output tile and block) then costs one ISA call per distinct block instead of one per
instruction.

The key is what the body may depend on, and the caller names it: the tiles and views it uses
(by the objects: the same tile, the same view geometry) and ``params``, hashable values it reads
(offsets, sizes, flags; compared by value). Also in it: the body's code, the kernel's tag name
and the source line of the call (the tags the body's instructions get depend on it). A body that
reads or changes anything else (a counter, a buffer ring's position, a list it appends to)
must not be repeated: a copy does not run it, so it would neither see nor make the change.

What the body captures is compared too, so the commonest slip, a loop variable the body closes
over but the key lacks, cannot make a wrong copy: the values of its closure cells, its default
arguments and the object of a bound method are compared (``==``) with those of the recorded run
at every meeting of the key. A body met with other values runs again and its run is kept beside
the first (``MAX_VARIANTS`` per key): right, only without the copy. Objects compared equal that
changed inside (a list appended to in place, an object's attribute) are not seen, nor the sign
of a zero (``0.0 == -0.0``; ``params`` compare so too).

A block is kept only when its recording shows it can be replayed exactly: it emitted nothing the
builder cannot copy (HBM operands, whose input status is worked out per instruction; waits given
by hand), and it changed no other kernel state (allocated, freed or named no tile, drew no DMA
queue, placed no HBM tensor). When the kernel is placed by the memory planner, scheduled by an
instruction scheduler, or has a hook on its ``emit``, the body simply runs.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from hwsim.errors import HwsimError
from hwsim.lang.kernel import current, source_location
from hwsim.lang.tiles import Tile, View


def repeat(
    body: Callable[[], None],
    operands: Sequence[Tile | View] = (),
    params: Hashable = (),
) -> None:
    """Run ``body``, or append again what it emitted when it last ran with an equal key."""
    context = current()
    replays = context.replays
    if (
        replays is None
        or context.recording is not None  # inside a block being recorded: part of it
        or context.before_emit
        or not context.emits_to_builder()
    ):
        body()
        return
    where = source_location()
    try:
        hash(params)
    except TypeError:
        raise HwsimError(
            f"{where}: lang.repeat(params={params!r}): params must be hashable (numbers, "
            "strings, tuples of them), since they are compared by value"
        ) from None
    # A function by its code (a closure made anew per iteration has the same); any other
    # callable by itself (held by the key).
    held: list[Any] = []
    key: list[Any] = [getattr(body, "__code__", body), context.name, where, params]
    for operand in operands:
        if not isinstance(operand, (Tile, View)):
            raise HwsimError(
                f"{where}: lang.repeat operands are tiles and views, got {type(operand).__name__}"
                " (pass other values the body reads in params)"
            )
        view = operand.full() if isinstance(operand, Tile) else operand
        pattern = view.ap()  # one object per view geometry of one tile (kept alive by ``held``)
        held.append(pattern)
        key.append((id(pattern), view.dims, view.kept))
    captured = _captured(body)
    if captured is None:
        body()
        return
    block_key = tuple(key)
    found = replays.blocks.get(block_key)
    if found is not None:
        for then, kept in found[1]:
            if _same(then, captured, _MAX_DEPTH):
                context.watchdog.count(len(kept))
                context.builder.emit_block(kept)
                return
    changes = context.state_changes
    tokens: list[Any] = []
    context.recording = tokens
    try:
        body()
    finally:
        context.recording = None
    if (
        context.state_changes == changes
        and context.planner is None
        and all(token is not None for token in tokens)
    ):
        builder = context.builder
        replays.add_block(
            block_key, tuple(held), captured, [builder.detached(token) for token in tokens]
        )


def _captured(body: Callable[[], None]) -> tuple[Any, ...] | None:
    """What ``body`` holds besides its code: its closure cells' values, its default arguments
    and, for a bound method, its object; None if a cell is not bound yet (the body then always
    runs)."""
    values: list[Any] = [
        getattr(body, "__self__", None),
        getattr(body, "__defaults__", None),
        getattr(body, "__kwdefaults__", None),
    ]
    for cell in getattr(body, "__closure__", None) or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # bound later in the enclosing function
            return None
    return tuple(values)


#: How deep ``_same`` follows containers, the captured tuple itself included (a deeper
#: difference counts as unequal).
_MAX_DEPTH = 5


def _same(a: Any, b: Any, depth: int) -> bool:
    """Whether a body captured equal values (``a`` and ``b``: what it captured then and now).
    Views are equal when they are the same geometry of the same tile (a kernel makes a new view
    object each time it indexes); anything else by ``==``, and an object whose ``==`` raises or
    has no truth value (a numpy array) is equal only to itself."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is View:
        return a.tile is b.tile and a.dims == b.dims and a.kept == b.kept
    try:
        if a == b:  # the common case, at C speed: the same objects, equal numbers
            return True
    except Exception:  # any failure of a user's __eq__ means "not known equal"
        pass
    if depth == 0:
        return False
    if kind is tuple or kind is list:
        return len(a) == len(b) and all(_same(x, y, depth - 1) for x, y in zip(a, b, strict=True))
    if kind is dict:
        return a.keys() == b.keys() and all(_same(a[k], b[k], depth - 1) for k in a)
    return False
