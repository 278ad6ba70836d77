"""Appending one ISA instruction to the kernel being built: the step under every ISA call.

``emit`` converts tiles/views to access patterns, builds the registered instruction by opcode, tags
it with the kernel's source line, and appends it in program order (the builder adds the
semaphores). The ISA call modules (``hwsim.lang.isa`` and its ``isa_*`` companions) are thin
wrappers that name the fields.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, TypeVar

from hwsim.engines import BUILTIN_ENGINES
from hwsim.errors import IllegalInstructionError
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import ISA, Instruction
from hwsim.isa.origin import Origin, Tag
from hwsim.lang import wide_views
from hwsim.lang.allocator import OutOfMemoryError
from hwsim.lang.kernel import current, source_location
from hwsim.lang.replay import keyable
from hwsim.lang.tiles import Tile, View

#: Engine names (NKI: ``nki.isa.engine``): the built-in engines, in hardware order.
tensor_engine, vector_engine, scalar_engine, gpsimd_engine, sync_engine = BUILTIN_ENGINES


def emit(opcode: str, engine: str, **fields: Any) -> Instruction:
    """Append one instruction by opcode; tile and view arguments become access patterns.

    A call equal to an earlier one (the same objects as fields, the same tag) appends a copy of
    the earlier instruction (``hwsim.lang.replay``), unless something stands between this call
    and the builder: the memory planner, an instruction scheduler, or a hook on the context's
    ``emit``."""
    sliced = wide_views.pieces(opcode, fields)
    if sliced is not None:  # views wider than an access pattern: one instruction per slice
        emitted = [emit(opcode, engine, **piece) for piece in sliced]
        return emitted[-1]
    context = current()
    context.watchdog.count()
    for hook in context.before_emit:
        hook()
    given = fields if context.planner is None else dict(fields)  # the planner needs the tiles
    for name, value in fields.items():  # in place: ``fields`` is this call's own dict
        if isinstance(value, _TILE_KINDS):
            fields[name] = value.ap()
    where = (context.name, id(context.origin), source_location())
    tag = _TAGS.get(where) or _new_tag(where, context.origin)
    replays = context.replays
    key = None
    recording = context.recording
    direct = context.emits_to_builder()
    if replays is not None and direct and keyable(fields.values()):
        key = (opcode, engine, tag, tuple(fields), *map(id, fields.values()))  # see ``replay``
        found = replays.replays.get(key)
        if found is not None:
            if recording is not None:
                recording.append(found[1])
            return context.builder.emit_again(found[1])
    instruction = ISA[opcode](engine=engine, tag=tag, **fields)
    if context.planner is None:
        context.fresh = instruction
        final = context.emit(instruction)
        replay = context.builder.last_replay if direct else None
        if replay is not None and replay[0] is not final:
            replay = None  # (the builder's last one, from before)
        if replay is not None and key is not None:
            replays.add(key, tuple(fields.values()), replay)  # type: ignore[union-attr]
        if recording is not None:
            recording.append(replay)
        return final
    if recording is not None:
        recording.append(None)
    tiles = []
    for name, value in given.items():
        if isinstance(value, _TILE_KINDS):
            tiles.append((name, value if isinstance(value, Tile) else value.tile))
        elif isinstance(value, AccessPattern) and value.memory is not MemorySpace.HBM:
            raise OutOfMemoryError(
                f"{source_location()}: {opcode} argument '{name}' is an access pattern, not a "
                f"view of a tile, in a kernel whose tiles do not fit {value.memory.value.upper()}: "
                "the memory planner moves tiles and cannot tell which one this pattern is in; "
                "pass a tile view, or make the kernel's tiles fit"
            )
    return context.emit(instruction, tiles)


_TILE_KINDS = (Tile, View)

#: ``name:file:line`` tags by (tag name, id of the origin, source location): one per kernel
#: line, not one per instruction (at 1M instructions, about 90 MB of copies). Keyed by the
#: origin's id, not its value (hashing it per instruction costs): the tag holds the origin, so
#: while the entry exists that id is not reused.
_TAGS: dict[tuple[str, int, str], Tag] = {}
_MAX_TAGS = 1 << 16


def _new_tag(key: tuple[str, int, str], origin: Origin | None) -> Tag:
    if len(_TAGS) >= _MAX_TAGS:
        _TAGS.clear()
    tag = _TAGS[key] = Tag(key[0], key[2], origin)
    return tag


def scalar_operand(value: Any) -> Any:
    """A scalar argument as an instruction takes it: a tile/view as is, a number as float."""
    return value if isinstance(value, (Tile, View)) else float(value)


EnumT = TypeVar("EnumT", bound=Enum)


def enum_arg(kind: type[EnumT], value: Any, call: str, name: str) -> EnumT:
    """``value`` as a member of ``kind`` (by member or value); a one-line error listing the
    valid values otherwise."""
    if isinstance(value, kind):
        return value
    try:  # the lookup ``kind(value)`` starts with, without its Python-level call
        member = kind._value2member_map_.get(value)
    except TypeError:  # unhashable: ``kind(value)`` says what is wrong
        member = None
    if member is not None:
        return member  # type: ignore[return-value]
    try:
        return kind(value)
    except ValueError:
        valid = ", ".join(str(m.value) for m in kind)
        raise IllegalInstructionError(
            f"{source_location()}: {call}({name}={value!r}): valid values are {valid}"
        ) from None
