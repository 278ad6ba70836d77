"""Every parameter an instruction's cost depends on: listed with its value, unit and meaning, and
set by name, for calibration scripts and sweeps.

Two kinds, one naming scheme:

- the config's, by dotted path (``dma.bandwidth_bytes_per_ns``): the fields of the config
  sections the cost model reads (``COST_SECTIONS``), described by the schema;
- the rule constants', as ``rules.<field>`` (``rules.reciprocal_cycles_per_element``):
  ``hwsim.cost.constants.RuleConstants`` of the config's generation.

``calibrated`` marks the parameters ``bench/calibrate.py`` derives from the calibration set
(HARDWARE.md §5) instead of taking them from a document. ``with_parameters`` returns the config
and rule constants with some parameters set; ``CostModel.for_config(config, rules)`` (and
``hwsim.machine.simulator.run(..., rules=...)``) then use them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hwsim.config import HardwareConfig, validate_config
from hwsim.config.loader import apply_overrides
from hwsim.cost.constants import RuleConstants, rules_for
from hwsim.errors import ConfigError

#: Config sections (or single fields) whose values reach instruction costs.
COST_SECTIONS = (
    "tensor_engine",
    "vector_engine",
    "scalar_engine",
    "gpsimd_engine",
    "dma",
    "hbm.bandwidth_bytes_per_ns_per_stack",
    "hbm.cores_per_stack",
    "sbuf.vector_gpsimd_share_access",
    "psum.vector_scalar_share_access",
)
#: Parameters derived from the calibration set by ``bench/calibrate.py``.
CALIBRATED = frozenset({"dma.descriptor_efficiency"})
#: The prefix of rule-constant names.
RULES_PREFIX = "rules."


@dataclass(frozen=True)
class CostParameter:
    """One parameter of the cost model: its name, its value on a config, what it means."""

    name: str
    value: Any
    description: str
    calibrated: bool


def cost_parameters(
    config: HardwareConfig, rules: RuleConstants | None = None
) -> list[CostParameter]:
    """Every parameter of the cost model on ``config`` (and ``rules``, default: those of its
    generation), config fields first, in schema order, then the rule constants."""
    found = []
    for section in COST_SECTIONS:
        head, _, only = section.partition(".")
        model = getattr(config, head)
        for name, info in type(model).model_fields.items():
            if only and name != only:
                continue
            path = f"{head}.{name}"
            value = getattr(model, name)
            found.append(CostParameter(path, value, info.description or "", path in CALIBRATED))
    rules = rules_for(config.chip.generation) if rules is None else rules
    for field in dataclasses.fields(rules):
        name = RULES_PREFIX + field.name
        meaning = f"{field.metadata['unit']}: {field.metadata['source']}"
        found.append(CostParameter(name, getattr(rules, field.name), meaning, name in CALIBRATED))
    return found


def with_parameters(
    config: HardwareConfig, values: Mapping[str, Any], rules: RuleConstants | None = None
) -> tuple[HardwareConfig, RuleConstants]:
    """``config`` and ``rules`` (default: its generation's) with the named parameters set: config
    paths validated like ``--set`` overrides, rule constants by field. An unknown name is an
    error listing the parameters."""
    rules = rules_for(config.chip.generation) if rules is None else rules
    known = {p.name for p in cost_parameters(config, rules)}
    unknown = [name for name in values if name not in known]
    if unknown:
        raise ConfigError(
            f"not cost parameters: {', '.join(unknown)}; the parameters are "
            f"{', '.join(sorted(known))}"
        )
    constants = {k[len(RULES_PREFIX) :]: v for k, v in values.items() if k.startswith(RULES_PREFIX)}
    overrides = {k: v for k, v in values.items() if not k.startswith(RULES_PREFIX)}
    if overrides:
        data = apply_overrides(config.model_dump(mode="json"), overrides)
        config = validate_config(data, source=f"{config.chip.name} with {', '.join(overrides)}")
    for name, value in constants.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{RULES_PREFIX}{name}: {value!r} is not a positive integer")
    return config, dataclasses.replace(rules, **constants) if constants else rules
