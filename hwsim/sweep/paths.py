"""Dotted paths into the hardware-config schema: checking them, with did-you-mean, and their types.

A sweep names what it varies by dotted path (``tensor_engine.rows``,
``tensor_engine.cycles_multiplier_by_dtype.bf16``). These helpers walk ``HardwareConfig``'s
fields without building a config, so a misspelt path is reported before anything runs.
"""

from __future__ import annotations

import difflib
import itertools
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from hwsim.config.schema import HardwareConfig


def _close(word: str, choices: list[str]) -> str | None:
    found = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    return found[0] if found else None


def _table_types(field: FieldInfo) -> tuple[tuple[str, ...], Any] | None:
    """(allowed keys, value annotation) if the field is a per-key table such as a dict by dtype."""
    if get_origin(field.annotation) is not dict:
        return None
    key_type, value_type = get_args(field.annotation)
    keys = get_args(key_type) if get_origin(key_type) is Literal else ()
    return tuple(str(k) for k in keys), value_type


def check_path(path: str) -> str | None:
    """None if ``path`` names a field (or a table entry) of the config, else what is wrong."""
    parts = path.split(".")
    if not all(parts):
        return f"'{path}' is not a dotted path such as tensor_engine.rows"
    model: type[BaseModel] = HardwareConfig
    for depth, part in enumerate(parts):
        here = ".".join(parts[:depth])
        fields = sorted(model.model_fields)
        field = model.model_fields.get(part)
        if field is None:
            guess = _close(part, fields)
            full = ".".join([*parts[:depth], guess, *parts[depth + 1 :]]) if guess else ""
            hint = f" (did you mean '{full}'?)" if guess else f" (valid: {', '.join(fields)})"
            where = f" in '{here}'" if here else ""
            return f"unknown config field '{part}'{where}{hint}"
        annotation = field.annotation
        last = depth == len(parts) - 1
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if last:
                names = ", ".join(sorted(annotation.model_fields))
                return f"'{path}' is a section; name one of its fields ({names})"
            model = annotation
            continue
        table = _table_types(field)
        rest = parts[depth + 1 :]
        if table is not None and len(rest) == 1:
            keys = table[0]
            if keys and rest[0] not in keys:
                guess = _close(rest[0], list(keys))
                hint = f" (did you mean '{guess}'?)" if guess else f" (valid: {', '.join(keys)})"
                return f"unknown key '{rest[0]}' of table '{'.'.join(parts[: depth + 1])}'{hint}"
            return None
        if rest:
            return f"'{'.'.join(parts[: depth + 1])}' is a value, not a section"
        return None
    return None


def field_annotation(path: str) -> Any:
    """The type annotation of the value at a valid ``path`` (a table entry's value type)."""
    model: type[BaseModel] = HardwareConfig
    parts = path.split(".")
    for depth, part in enumerate(parts):
        field = model.model_fields[part]
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
            continue
        table = _table_types(field)
        if table is not None and depth < len(parts) - 1:
            return _base_type(table[1])
        return _base_type(annotation)
    raise KeyError(path)


def _base_type(annotation: Any) -> Any:
    """``Annotated[int, Field(...)]`` -> int."""
    args = get_args(annotation)
    return args[0] if args and hasattr(annotation, "__metadata__") else annotation


def is_integer_field(path: str) -> bool:
    """Whether the value at ``path`` is an int (random samples are then rounded)."""
    return field_annotation(path) is int


def is_bytes_path(path: str) -> bool:
    """Whether a column holds a byte count (shown in KiB/MiB), not a rate such as bytes/ns."""
    words = path.rsplit(".", 1)[-1].split("_")
    rate = any(a == "per" and b in ("ns", "s", "cycle") for a, b in itertools.pairwise(words))
    return "bytes" in words and not rate
