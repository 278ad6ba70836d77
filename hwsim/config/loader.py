"""Loading hardware configs: presets and files, strict validation, overrides, the content hash."""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Iterable, Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from hwsim.config.schema import HardwareConfig
from hwsim.config.validation_errors import describe_validation_error
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
        lines = [describe_validation_error(err, HardwareConfig) for err in exc.errors()]
        raise ConfigError(f"{source}: " + "; ".join(lines)) from None
    _check_registered_names(config, source)
    return config


def _check_registered_names(config: HardwareConfig, source: str) -> None:
    from hwsim.cost.tensor_models import TENSOR_TIMING_MODELS

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
