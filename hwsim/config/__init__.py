"""Hardware configs: the schema, the bounded YAML loader, validation, overrides, the time base."""

from hwsim.config.loader import (
    CONFIGS_DIR,
    PRESET_NAMES,
    config_hash,
    config_to_yaml,
    list_presets,
    load_config,
    validate_config,
)
from hwsim.config.schema import DTYPE_NAMES, HardwareConfig
from hwsim.config.timebase import TimeBase

__all__ = [
    "CONFIGS_DIR",
    "DTYPE_NAMES",
    "PRESET_NAMES",
    "HardwareConfig",
    "TimeBase",
    "config_hash",
    "config_to_yaml",
    "list_presets",
    "load_config",
    "validate_config",
]
