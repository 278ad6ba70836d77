"""How a pydantic validation error is told to a user: the dotted path, what is wrong, and what
would be right (the closest valid key, the allowed keys or range). One formatter for every
schema a user writes: hardware configs and sweep specs."""

from __future__ import annotations

import difflib
import typing
from collections.abc import Mapping
from typing import Any, get_args

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from hwsim.errors import shorten


def describe_validation_error(err: Mapping[str, Any], root: type[BaseModel]) -> str:
    """One pydantic error of validating ``root`` as 'dotted.path: what is wrong'."""
    loc = list(err["loc"])
    path = _dotted(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        model = _model_at(root, loc[:-1])
        valid = sorted(model.model_fields) if model is not None else []
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(valid)}"
        return f"{path}: unknown key ({hint})"
    if kind == "missing":
        return f"{path}: missing required key"
    if kind == "literal_error" and loc and loc[-1] == "[key]":
        expected = err.get("ctx", {}).get("expected", "")
        bad = shorten(str(err.get("input")))
        return f"{_dotted(loc[:-2])}: unknown key '{bad}' (allowed: {expected})"
    if kind == "value_error":
        message = err["msg"].removeprefix("Value error, ")
        # a model-level (cross-field) check names its own dotted paths
        return f"{path}: {message}" if path else message
    field = _field_at(root, loc)
    # a literal_error message already lists the allowed values
    allowed = _allowed(field) if field is not None and kind != "literal_error" else ""
    detail = err["msg"][:1].lower() + err["msg"][1:]
    return f"{path or '<top>'}: {detail}, got {shorten(repr(err.get('input')))}{allowed}"


def _dotted(loc: list[Any]) -> str:
    """pydantic's location as 'a.b[2].c': list indices in brackets, dict keys as names,
    validator wrapper entries dropped."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part != "[key]" and not str(part).startswith("function-"):
            out += f".{part}" if out else str(part)
    return out


def _model_at(root: type[BaseModel], loc: list[Any]) -> type[BaseModel] | None:
    """The model at a location (through optional fields and dict/list values)."""
    model: Any = root
    for part in loc:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            if isinstance(part, int) or model is None:
                continue
            return None
        field = model.model_fields.get(str(part))
        if field is None:
            continue  # a dict key (e.g. a dotted config path) or a list index
        model = _inner_model(field.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _inner_model(annotation: Any) -> Any:
    """The BaseModel inside ``X | None``, ``dict[str, X]``, ``list[X]`` or ``Annotated[...]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _field_at(root: type[BaseModel], loc: list[Any]) -> FieldInfo | None:
    """The field a location ends in (an entry of a table: the table's value type)."""
    for cut in range(len(loc), 0, -1):
        parent = _model_at(root, loc[: cut - 1])
        name = str(loc[cut - 1])
        if parent is not None and name in parent.model_fields:
            field = parent.model_fields[name]
            value_type = get_args(field.annotation)
            if cut < len(loc) and len(value_type) == 2:
                # an entry of a per-dtype table: the bounds are on the table's value type
                return FieldInfo.from_annotation(value_type[1])
            return field
    return None


def _bound_metadata(field: FieldInfo) -> list[Any]:
    """A field's constraint objects, also those inside an optional (``X | None``) annotation."""
    found = list(field.metadata)
    for arg in typing.get_args(field.annotation):
        for meta in getattr(arg, "__metadata__", ()):
            found.extend(getattr(meta, "metadata", [meta]))
    return found


def _allowed(field: FieldInfo) -> str:
    """' (allowed: low <= value <= high)' from a field's bounds, else ' (expected TYPE)'."""
    bounds: dict[str, Any] = {}
    for meta in _bound_metadata(field):
        for name in ("ge", "gt", "le", "lt"):
            value = getattr(meta, name, None)
            if value is not None:
                bounds.setdefault(name, value)
    if not bounds:
        annotation = getattr(field.annotation, "__name__", str(field.annotation))
        return f" (expected {annotation})"
    low = (
        f"{bounds['ge']} <= " if "ge" in bounds else f"{bounds['gt']} < " if "gt" in bounds else ""
    )
    high = (
        f" <= {bounds['le']}" if "le" in bounds else f" < {bounds['lt']}" if "lt" in bounds else ""
    )
    return f" (allowed: {low}value{high})"
