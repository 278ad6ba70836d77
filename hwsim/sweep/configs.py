"""The configs of a sweep's points, built fast: each config section validated once per content.

A point changes a few fields of a few sections of the base config; the rest of its config is
the base's. Validating every point's whole config (and serialising it whole for its hash) cost
about a millisecond a point, so a dry run of a large grid took minutes. Here each section is
validated once per distinct content (the base's, or the base's with a point's overrides of that
section), the config is assembled from the validated sections (``HardwareConfig`` runs its
cross-field checks, the sections are not validated again), and the hash is assembled from each
section's canonical JSON, kept with it. The config and hash are those ``validate_config`` and
``config_hash`` give (a test compares them); a point with any error is built the slow way, so
its message is exactly theirs.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ValidationError

from hwsim.config import HardwareConfig, config_hash
from hwsim.config.loader import apply_overrides, validate_config
from hwsim.cost.tensor_models import TENSOR_TIMING_MODELS

_SECTIONS: dict[str, type[BaseModel]] = {
    name: field.annotation  # type: ignore[misc]
    for name, field in HardwareConfig.model_fields.items()
}
#: Section names in canonical (sorted) order, each as its JSON key.
_ORDER = [(name, f"{json.dumps(name)}:") for name in sorted(_SECTIONS)]
_SCALARS = (bool, int, float, str, type(None))


class PointConfigs:
    """Builds ``(config, hash)`` of points over one ``base`` (a raw config mapping)."""

    def __init__(self, base: dict[str, Any]) -> None:
        self.base = base
        self._fast = set(base) == set(_SECTIONS) and all(
            isinstance(base[name], dict) for name in _SECTIONS
        )
        #: (section, its overrides) -> (validated section, its canonical JSON)
        self._sections: dict[tuple[str, tuple[tuple[str, Any], ...]], tuple[BaseModel, str]] = {}

    def build(self, point: dict[str, Any], source: str) -> tuple[HardwareConfig, str]:
        """The point's validated config and its hash (``ConfigError`` naming ``source``)."""
        if self._fast:
            built = self._assembled(point)
            if built is not None:
                return built
        config = validate_config(apply_overrides(self.base, point), source=source)
        return config, config_hash(config)

    def _assembled(self, point: dict[str, Any]) -> tuple[HardwareConfig, str] | None:
        """The config from cached sections, or None where anything is off (the slow way then
        reports it)."""
        overrides: dict[str, list[tuple[str, Any]]] = {name: [] for name in _SECTIONS}
        for path, value in point.items():
            section, dot, _ = path.partition(".")
            if section not in overrides or not dot:
                return None
            # equal keys for equal values of the same type (1 and 1.0 and True differ)
            same = (type(value), value) if type(value) in _SCALARS else json.dumps(value)
            overrides[section].append((path, same))
        sections: dict[str, BaseModel] = {}
        texts = []
        for name, prefix in _ORDER:
            found = self._section(name, tuple(sorted(overrides[name], key=_path)), point)
            if found is None:
                return None
            sections[name], text = found
            texts.append(prefix + text)
        try:
            config = HardwareConfig.model_validate(sections)  # cross-field checks only
        except ValidationError:
            return None
        if config.tensor_engine.timing_model not in TENSOR_TIMING_MODELS:
            return None
        canonical = "{" + ",".join(texts) + "}"
        return config, hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def _section(
        self, name: str, key: tuple[tuple[str, Any], ...], point: dict[str, Any]
    ) -> tuple[BaseModel, str] | None:
        found = self._sections.get((name, key))
        if found is not None:
            return found
        raw = apply_overrides({name: self.base[name]}, {p: point[p] for p, _ in key})[name]
        try:
            model = _SECTIONS[name].model_validate(raw)
        except ValidationError:
            return None
        text = json.dumps(model.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        self._sections[(name, key)] = (model, text)
        return model, text


def _path(override: tuple[str, Any]) -> str:
    return override[0]
