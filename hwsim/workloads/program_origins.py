"""A saved program's ``origins``: the graph node each tag text stands for (``hwsim.isa.origin``).

An instruction's tag is saved as its text. ``origins`` lists each distinct text whose tag carried
an ``Origin`` once, with that origin, so loading gives those tags their origin back; a format 2
document has none (``program_codec``).
"""

from __future__ import annotations

from typing import Any

from hwsim.isa.origin import Origin, Tag
from hwsim.program import Program
from hwsim.workloads.typed_json import FieldError, codec_for, describe


def encode_origins(program: Program) -> list[dict[str, Any]]:
    """Each distinct tag text with an ``Origin`` (a bridge node's), and that origin: what the
    instructions' tags, written as their text, carried as fields."""
    origin = codec_for(Origin)
    found: dict[str, Origin] = {}
    for core in program.cores:
        for _, _, instruction in core.instructions():
            tag = instruction.tag
            if type(tag) is Tag and tag.origin is not None and tag not in found:
                found[str(tag)] = tag.origin
    return [{"tag": text, "origin": origin.encode(o)} for text, o in found.items()]


def decode_origins(data: Any) -> dict[str, Tag]:
    """The typed tag of each tag text ``origins`` lists (``encode_origins``)."""
    if type(data) is not list:
        raise FieldError(f"expected a list of tag origins, got {describe(data)}")
    tags: dict[str, Tag] = {}
    for i, item in enumerate(data):
        try:
            text, found = _entry(item)
        except FieldError as exc:
            raise exc.inside(i) from None
        if text in tags:
            raise FieldError(f"tag {text!r} is listed twice").inside("tag").inside(i)
        tags[text] = Tag(found.label, text[len(found.label) + 1 :], found)
    return tags


def _entry(item: Any) -> tuple[str, Origin]:
    if type(item) is not dict or set(item) != {"tag", "origin"} or type(item["tag"]) is not str:
        raise FieldError(f'expected {{"tag": TEXT, "origin": {{...}}}}, got {describe(item)}')
    text = item["tag"]
    try:
        found = codec_for(Origin).decode(item["origin"])
    except FieldError as exc:
        raise exc.inside("origin") from None
    scope = f"{found.label}:"
    if not text.startswith(scope):
        raise FieldError(f"tag {text!r} does not start with its origin's {scope!r}").inside("tag")
    return text, found
