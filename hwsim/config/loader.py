"""Loading hardware configs: presets and files, strict validation, overrides, the content hash."""

from __future__ import annotations

import difflib
import hashlib
import json
import typing
from collections.abc import Iterable, Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from hwsim.config.schema import HardwareConfig
from hwsim.config.yaml_compose import describe_value
from hwsim.config.yaml_safe import load_yaml, read_yaml_file
from hwsim.errors import ConfigError, shorten

#: Presets ship inside the package (``configs/`` installs as ``hwsim.configs``).
CONFIGS_DIR: Traversable = resources.files("hwsim.configs")
PRESET_NAMES = ("trn1", "trn2", "trn3", "tiny")


def list_presets() -> list[str]:
    """Names of the hardware presets shipped with the package."""
    return sorted(name for name in PRESET_NAMES if (CONFIGS_DIR / f"{name}.yaml").is_file())


def resolve_config_path(name_or_path: str | Path) -> Path | Traversable:
    """A preset name (``trn2``) or a path to a YAML file, as a file that exists."""
    text = str(name_or_path)
    if text in PRESET_NAMES:
        return CONFIGS_DIR / f"{text}.yaml"
    path = Path(text)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(f"{text}: config file not found")
        return path
    close = difflib.get_close_matches(text, PRESET_NAMES, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise ConfigError(
        f"{text}: not a preset{hint}; presets are {', '.join(PRESET_NAMES)}, or give a YAML path"
    )


def read_config_dict(path: Path | Traversable) -> dict[str, Any]:
    """The raw mapping in a YAML config file, read by the bounded loader (``yaml_safe``)."""
    data = read_yaml_file(path, ConfigError, "config file")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a YAML mapping of sections")
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """``'tensor_engine.rows=64'`` as (dotted path, value), the value read as YAML by the same
    bounded loader as files (a date, a tag or a 5000-digit number is refused)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {describe_value(text)}: expected section.field=value")
    source = f"--set {describe_value(text)}"
    path = tuple(key.split("."))
    value = (
        load_yaml(raw, source, ConfigError, path=path, show_lines=False) if raw.strip() else None
    )
    return key, value


def apply_overrides(
    data: dict[str, Any], overrides: Iterable[str] | Mapping[str, Any]
) -> dict[str, Any]:
    """``data`` with dotted-path overrides applied (validated later with the rest).

    ``data`` is never changed: the mappings along each overridden path are copied, the rest is
    shared with ``data``.
    """
    items = overrides.items() if isinstance(overrides, Mapping) else map(parse_override, overrides)
    result = dict(data)
    for key, value in items:
        node = result
        parts = key.split(".")
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = {}
            elif isinstance(child, dict):
                child = dict(child)
            else:
                where = ".".join(parts[: depth + 1])
                raise ConfigError(f"--set {key}: '{where}' is a value, not a section")
            node[part] = child
            node = child
        node[parts[-1]] = value
    return result


def load_config(
    name_or_path: str | Path = "trn2",
    overrides: Iterable[str] | Mapping[str, Any] = (),
) -> HardwareConfig:
    """Load a preset or YAML file, apply ``--set``-style overrides, and validate strictly."""
    path = resolve_config_path(name_or_path)
    data = apply_overrides(read_config_dict(path), overrides)
    return validate_config(data, source=str(name_or_path))


def validate_config(data: Mapping[str, Any], source: str = "<config>") -> HardwareConfig:
    """Validate a raw mapping; every problem is reported with its dotted path."""
    try:
        config = HardwareConfig.model_validate(data)
    except ValidationError as exc:
        lines = [_describe_error(err) for err in exc.errors()]
        raise ConfigError(f"{source}: " + "; ".join(lines)) from None
    _check_registered_names(config, source)
    return config


def _check_registered_names(config: HardwareConfig, source: str) -> None:
    from hwsim.timing.tensor_models import TENSOR_TIMING_MODELS

    name = config.tensor_engine.timing_model
    if name not in TENSOR_TIMING_MODELS:
        valid = sorted(TENSOR_TIMING_MODELS)
        close = difflib.get_close_matches(name, valid, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(
            f"{source}: tensor_engine.timing_model: unknown model '{shorten(name)}'{hint}; "
            f"valid: {', '.join(valid)}"
        )


def canonical_json(config: HardwareConfig) -> str:
    """The config as JSON with sorted keys and no spaces: what ``config_hash`` hashes."""
    return json.dumps(config.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def config_hash(config: HardwareConfig) -> str:
    """A stable content hash: same values give the same hash whatever the key order or comments."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()[:16]


def config_to_yaml(config: HardwareConfig) -> str:
    """The effective config as YAML (sections in schema order)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


# ---- error formatting -------------------------------------------------------------------------


def _describe_error(err: Mapping[str, Any]) -> str:
    loc = tuple(str(p) for p in err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        return _unknown_key_message(loc)
    path = ".".join(loc) if loc else "<top>"
    if kind == "missing":
        return f"{path}: missing required key"
    if kind == "literal_error" and loc and loc[-1] == "[key]":
        bad = err.get("input")
        dict_path = ".".join(loc[:-2])
        expected = err.get("ctx", {}).get("expected", "")
        return f"{dict_path}: unknown key '{shorten(str(bad))}' (allowed: {expected})"
    if kind == "value_error":
        message = err["msg"].removeprefix("Value error, ")
        # a model-level (cross-field) check names its own dotted paths
        return f"{path}: {message}" if loc else message
    field = _field_at(loc)
    # a literal_error message already lists the allowed values
    allowed = _allowed_range(field) if field is not None and kind != "literal_error" else ""
    got = err.get("input")
    detail = err["msg"][:1].lower() + err["msg"][1:]
    return f"{path}: {detail}, got {shorten(repr(got))}{allowed}"


def _unknown_key_message(loc: tuple[str, ...]) -> str:
    path = ".".join(loc)
    parent = _model_at(loc[:-1])
    valid = sorted(parent.model_fields) if parent is not None else []
    close = difflib.get_close_matches(loc[-1], valid, n=1, cutoff=0.5)
    if close:
        return f"{path}: unknown key (did you mean '{close[0]}'?)"
    return f"{path}: unknown key (valid keys: {', '.join(valid)})"


def _model_at(loc: tuple[str, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] = HardwareConfig
    for part in loc:
        field = model.model_fields.get(part)
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _field_at(loc: tuple[str, ...]) -> FieldInfo | None:
    for cut in range(len(loc), 0, -1):
        parent = _model_at(loc[: cut - 1])
        if parent is not None and loc[cut - 1] in parent.model_fields:
            field = parent.model_fields[loc[cut - 1]]
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


def _allowed_range(field: FieldInfo) -> str:
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
