"""The JSON schema of ``RunSummary.to_dict()``, derived from the dataclasses of
``hwsim.trace.summary`` (so it cannot drift from them), written to docs/summary.schema.json:

    python -m hwsim.trace.summary_schema > docs/summary.schema.json

tests/trace/test_summary_types.py checks the file is current and that real summaries conform.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any

from hwsim.engines import engine_names
from hwsim.trace.summary import (
    ON_CHIP,
    RUN_FIELDS,
    SUMMARY_SCHEMA,
    RunSummary,
)

_SCALARS: dict[Any, dict[str, Any]] = {
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    bool: {"type": "boolean"},
}
#: Top-level keys ``to_dict`` derives from the fields (Neuron Explorer names), with their types.
_DERIVED: dict[str, Any] = {
    "total_time": float,
    "hardware_flops": int,
    "model_flops": int,
    "mfu_estimated_percent": float,
    "hfu_estimated_percent": float,
    "mbu_estimated_percent": float,
    "dma_active_time_percent": float,
    **{f"{m}_peak_bytes": int for m in ON_CHIP},
}


def summary_json_schema() -> dict[str, Any]:
    """The schema (JSON Schema draft 2020-12) of ``RunSummary.to_dict()``."""
    schema = _type_schema(RunSummary)
    properties = schema["properties"]
    del properties["extras"]  # written as top-level keys of their own
    schema["required"] = [n for n in schema["required"] if n not in RUN_FIELDS and n != "extras"]
    for name, hint in _DERIVED.items():
        properties[name] = _type_schema(hint)
        schema["required"].append(name)
    for engine in engine_names():
        properties[f"{engine}_engine_active_time_percent"] = {"type": "number"}
        properties[f"{engine}_instruction_count"] = {"type": "integer"}
    schema["additionalProperties"] = True  # ``extras`` of summaries read back
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SUMMARY_SCHEMA,
        **schema,
        "title": "hwsim run summary (RunSummary.to_dict())",
    }


def _type_schema(hint: Any) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [_type_schema(a) for a in typing.get_args(hint) if a is not type(None)]
        (only,) = options
        return {"anyOf": [only, {"type": "null"}]}
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    if origin is dict:
        key, value = typing.get_args(hint)
        out = {"type": "object", "additionalProperties": _type_schema(value)}
        if key is int:
            out["propertyNames"] = {"pattern": "^[0-9]+$"}  # JSON object keys are strings
        return out
    if origin is list:
        (item,) = typing.get_args(hint)
        return {"type": "array", "items": _type_schema(item)}
    if hint is Any:
        return {}
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        fields = dataclasses.fields(hint)
        return {
            "type": "object",
            "title": getattr(hint, "__name__", ""),
            "properties": {f.name: _type_schema(hints[f.name]) for f in fields},
            "required": [f.name for f in fields],
            "additionalProperties": False,
        }
    raise TypeError(f"no JSON schema for {hint!r}")


if __name__ == "__main__":
    print(json.dumps(summary_json_schema(), indent=1))
