"""Errors of sweeps (a spec that does not validate, a sweep that cannot run), and how a schema
validation error is described: the dotted path, what is wrong, the closest valid key."""

from __future__ import annotations

import difflib
from typing import Any, get_args

from pydantic import BaseModel

from hwsim.errors import HwsimError, shorten


class SweepError(HwsimError):
    """A sweep cannot run (missing extra, unreachable cluster, unreadable database, ...)."""


class SpecError(SweepError):
    """A sweep spec is invalid; the message names the spec file and each dotted path."""


def describe_validation_error(err: Any, root: type[BaseModel]) -> str:
    """One pydantic error of validating ``root`` as 'dotted.path: what is wrong'."""
    loc = [str(p) for p in err["loc"]]
    path = _dotted(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        model = _model_at(root, loc[:-1])
        valid = sorted(model.model_fields) if model is not None else []
        close = difflib.get_close_matches(loc[-1], valid, n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(valid)}"
        return f"{path}: unknown key ({hint})"
    if kind == "missing":
        return f"{path}: missing required key"
    if kind == "value_error":
        message = err["msg"].removeprefix("Value error, ")
        return f"{path}: {message}" if path else message
    detail = err["msg"][:1].lower() + err["msg"][1:]
    return f"{path or '<top>'}: {detail}, got {shorten(repr(err.get('input')))}"


def _dotted(loc: list[str]) -> str:
    """pydantic's location as 'a.b[2].c' (validator wrapper entries dropped)."""
    out = ""
    for part in loc:
        if part.isdigit():
            out += f"[{part}]"
        elif part != "[key]" and not part.startswith("function-"):
            out += f".{part}" if out else part
    return out


def _model_at(root: type[BaseModel], loc: list[str]) -> type[BaseModel] | None:
    """The model at a location (through optional fields and dict/list values)."""
    model: Any = root
    for part in loc:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            if part.isdigit() or model is None:
                continue
            return None
        field = model.model_fields.get(part)
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
