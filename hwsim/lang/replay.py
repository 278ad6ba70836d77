"""Emitting an instruction equal to one emitted before without making and recording it again.

Kernels emit equal instructions over and over: the loop nest of the V1 matmul emits 38,656
instructions, 2,448 of them distinct (its buffers rotate over the same tiles). ``emit`` looks each
call up here by what makes the instruction: its opcode, engine, tag, field names and the objects
given as fields. On a hit the builder appends a copy of the earlier instruction with the same
template (``ProgramBuilder.emit_again``), which gets the same waits at ``build()`` as recording it
afresh would, for a fraction of the work: the instruction is not made, checked, or looked up by
its static key again.

The fields are keyed by identity (``id``), so a hit means the very objects of the earlier call:
equal fields of the same types, the same sign of a zero, and the same operands being one object
(which the builder's rules tell apart from equal copies, ``hwsim.builder._operands``). Only
immutable kinds of object are keyed (access patterns, numbers, strings, None, enum members): a
list or an array passed again after a change is the same object with other contents, so a call
with one is not looked up. Each entry keeps the objects of its key alive, so their ids are not
reused while it is here. Access patterns repeat as objects because a tile makes one per view
geometry; scalars repeat as objects when they are small ints, bools, None, enum members or the
kernel's constants. A call with an equal but distinct field (a float computed in each
iteration) misses, and emits as usual.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Any

from hwsim.builder import Replay
from hwsim.isa.ap import AccessPattern

#: Entries a cache keeps before it starts over (a bound on its memory for programs whose
#: instructions are nearly all distinct).
MAX_REPLAYS = 1 << 16


class ReplayCache:
    """One kernel build's instructions by key: (the key's field objects, how to copy it)."""

    def __init__(self) -> None:
        self.replays: dict[tuple[Any, ...], tuple[tuple[Any, ...], Replay]] = {}
        #: ``hwsim.lang.repeat``'s blocks by key: (the key's objects, and per run recorded for
        #: it the values its body captured and a token per instruction it emitted).
        self.blocks: dict[tuple[Any, ...], tuple[tuple[Any, ...], list[Variant]]] = {}

    def add(self, key: tuple[Any, ...], values: tuple[Any, ...], replay: Replay) -> None:
        if len(self.replays) >= MAX_REPLAYS:
            self.replays.clear()
        self.replays[key] = (values, replay)

    def add_block(
        self, key: tuple[Any, ...], held: tuple[Any, ...], captured: Any, tokens: list[Replay]
    ) -> None:
        """Keep a recorded run of a block: its key, what its body captured, its tokens."""
        found = self.blocks.get(key)
        if found is not None:
            if len(found[1]) < MAX_VARIANTS:
                found[1].append((captured, tokens))
            return
        if len(self.blocks) >= MAX_REPLAYS:
            self.blocks.clear()
        self.blocks[key] = (held, [(captured, tokens)])


#: Recorded runs kept per block key, for bodies met with other captured values (beyond it, the
#: body just runs).
MAX_VARIANTS = 8
#: A recorded run of a block: the values its body captured, a copy token per instruction.
Variant = tuple[Any, list[Replay]]

#: Immutable field types (``keyable``); enum classes join as they are met.
_KEYABLE: set[type] = {AccessPattern, bool, int, float, str, type(None)}


def keyable(values: Iterable[Any]) -> bool:
    """Whether every field is of an immutable kind, so its identity says what it holds."""
    if _KEYABLE.issuperset(map(type, values)):
        return True
    for value in values:
        cls = type(value)
        if cls not in _KEYABLE:
            if not issubclass(cls, Enum):
                return False
            _KEYABLE.add(cls)
    return True
