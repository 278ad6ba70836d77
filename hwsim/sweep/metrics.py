"""What a sweep can record per run: metric names (dotted paths into the run summary) and their
extraction from a summary, plus the columns the sweep itself adds.

Metric names are the scalar entries of ``hwsim.trace.stats.summarize`` (``total_ns``,
``mfu_pct``, ``engines.tensor.busy_pct``, ``memory.sbuf.peak_pct``, ...), plus ``max_abs_err`` and
``numerics_ok`` when a sweep runs numerics. The valid names are read from the summary of an empty
trace, so they follow the summary as it grows.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable, Mapping
from typing import Any

#: Recorded when a spec names no metrics.
DEFAULT_METRICS = (
    "total_ns",
    "mfu_pct",
    "hfu_pct",
    "mbu_pct",
    "dma_active_pct",
    "hbm_bytes",
    "sbuf_peak_bytes",
    "psum_peak_bytes",
    "engines.tensor.busy_pct",
    "engines.vector.busy_pct",
    "engines.scalar.busy_pct",
    "engines.gpsimd.busy_pct",
    "engines.sync.busy_pct",
    "bottleneck_resource",
    "bottleneck",
)
#: Only meaningful (and only allowed) when the spec sets ``numerics: true``.
NUMERICS_METRICS = ("max_abs_err", "numerics_ok", "numerics_tolerance")
#: Summary entries that describe the run rather than measure it (the row already says them).
_NOT_METRICS = frozenset({"schema", "workload", "config_name", "config_hash"})


@functools.cache
def summary_metric_names() -> tuple[str, ...]:
    """Every scalar entry of a run summary, as a dotted path."""
    from hwsim.config import load_config
    from hwsim.trace.records import Trace
    from hwsim.trace.stats import summarize

    config = load_config("tiny")
    empty = summarize(Trace(base_mhz=1000, config=config)).to_dict()
    return tuple(name for name in _scalar_paths(empty) if name not in _NOT_METRICS)


def _scalar_paths(node: Mapping[str, Any], prefix: str = "") -> Iterable[str]:
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _scalar_paths(value, path + ".")
        elif _scalar(value) is not _NOT_SCALAR:
            yield path


def check_metric(name: str, numerics: bool) -> str | None:
    """None if ``name`` can be recorded, else what is wrong (with the closest valid name)."""
    if name in NUMERICS_METRICS:
        return None if numerics else f"'{name}' needs 'numerics: true' in the spec"
    valid = summary_metric_names()
    if name in valid:
        return None
    close = difflib.get_close_matches(name, [*valid, *NUMERICS_METRICS], n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown metric '{name}'{hint}; see 'hwsim sweep --list-metrics'"


_NOT_SCALAR = object()


def _scalar(value: Any) -> Any:
    """A JSON/SQLite scalar for value (numpy scalars unwrapped), or ``_NOT_SCALAR``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:
        return item()
    return _NOT_SCALAR


def extract(summary: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """{name: value} for each dotted metric name; None where the summary has no such entry."""
    values: dict[str, Any] = {}
    for name in names:
        node: Any = summary
        for part in name.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        value = _scalar(node)
        values[name] = None if value is _NOT_SCALAR else value
    return values
