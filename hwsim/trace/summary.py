"""The typed run summary: ``RunSummary`` and its parts, what ``hwsim.trace.stats.summarize``
returns and every reader of a summary (CLI, report, plots, sweeps, bridge) takes.

``to_dict()`` is the JSON form the design promises (``hwsim run --json``, summary.json, the trace
header, sweep metric paths), key for key and in order: the fields below, plus the Neuron Explorer
names derived from them (``total_time``, ``mfu_estimated_percent``,
``<engine>_engine_active_time_percent``, ...). ``from_dict`` reads that form back, including
summaries written by older versions (missing fields take their defaults; unknown top-level keys are
kept in ``extras`` and written back). ``hwsim.trace.summary_schema`` derives the JSON schema from
these classes (docs/summary.schema.json). Definitions of the numbers: ``hwsim.trace.stats``.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hwsim.engines import engine_names
from hwsim.strict_json import as_float
from hwsim.trace.records import engine_order

SUMMARY_SCHEMA = "hwsim.summary/1"


@dataclass
class EngineStats:
    """One engine's share of the run (percentages of T x cores)."""

    label: str = ""
    busy_ticks: int = 0
    busy_pct: float = 0.0
    trigger_busy_pct: float = 0.0  # busy issuing DMA triggers
    instructions: int = 0
    opcodes: dict[str, int] = field(default_factory=dict)  # most frequent first
    wait_ticks: int = 0
    wait_pct: float = 0.0
    wait_ticks_by_source: dict[str, int] = field(default_factory=dict)
    wait_pct_by_source: dict[str, float] = field(default_factory=dict)


@dataclass
class FlopStats:
    hardware_flops: int = 0
    tensor_flops: int = 0
    tensor_flops_by_dtype: dict[str, int] = field(default_factory=dict)
    model_flops: int = 0
    achieved_flops_per_s: float = 0.0
    hfu_pct: float = 0.0
    mfu_pct: float = 0.0


@dataclass
class DmaStats:
    active_ticks: int = 0
    active_pct: float = 0.0
    transfers: int = 0
    pieces: int = 0
    bytes: int = 0
    hbm_read_bytes: int = 0
    hbm_write_bytes: int = 0
    engine_busy_pct: dict[int, float] = field(default_factory=dict)  # by DMA engine index
    queue_bytes: dict[int, int] = field(default_factory=dict)  # by queue ID
    data_efficiency_pct: float = 100.0
    descriptor_bytes_mean: float = 0.0


@dataclass
class MemoryStats:
    """SBUF or PSUM occupancy: its peak and a step series reduced to bin maxima."""

    peak_bytes: int = 0
    capacity_bytes: int = 0
    peak_pct: float = 0.0
    allocations: int = 0
    series_ns: list[float] = field(default_factory=list)
    series_bytes: list[int] = field(default_factory=list)


@dataclass
class CriticalPathStats:
    length: int = 0
    instructions: int = 0
    dma_transfers: int = 0
    ticks_by_resource: dict[str, int] = field(default_factory=dict)
    share_pct: dict[str, float] = field(default_factory=dict)


@dataclass
class Peaks:
    """The machine's peaks the utilisations divide by (all cores of the run)."""

    dtype: str = "bf16"
    cores: int = 1
    flops_per_s: float = 0.0
    flops_per_s_by_dtype: dict[str, float] = field(default_factory=dict)
    hbm_bytes_per_s: float = 0.0
    dma_bytes_per_s: float = 0.0
    dma_engines: int = 0


@dataclass
class TagStats:
    """One source tag's instructions (the summary lists the busiest)."""

    tag: str = ""
    instructions: int = 0
    flops: int = 0
    hbm_bytes: int = 0
    busy_ns: float = 0.0
    start_ns: float = 0.0
    end_ns: float = 0.0


#: Fields of a ``hwsim run`` / sweep run, not of the trace: written only when set.
RUN_FIELDS = (
    "config",
    "instructions_simulated",
    "wall_build_s",
    "wall_simulate_s",
    "max_abs_err",
    "numerics_ok",
    "numerics_tolerance",
    "out_dir",
    "files",
    "sbuf_spill",
    "sbuf_spill_by_tile",
    "floor_ns",
    "over_floor",
    "floor_binding",
)
#: Memories with their read/write byte counts as top-level fields (HBM's are hbm_*_bytes).
ON_CHIP = ("sbuf", "psum")


@dataclass
class RunSummary:
    """All statistics of one run (see the module docstring and ``hwsim.trace.stats``)."""

    schema: str = SUMMARY_SCHEMA
    workload: str = ""
    config_name: str = ""
    config_hash: str = ""
    cores: int = 1
    base_mhz: int = 0
    total_ticks: int = 0
    total_ns: float = 0.0
    engines: dict[str, EngineStats] = field(default_factory=dict)
    instructions: int = 0
    mfu_pct: float = 0.0
    hfu_pct: float = 0.0
    mbu_pct: float = 0.0
    dma_active_pct: float = 0.0
    idle_pct: float = 0.0
    hbm_bytes: int = 0
    hbm_read_bytes: int = 0
    hbm_write_bytes: int = 0
    bottleneck: str = "n/a"
    bottleneck_resource: str = ""
    bottleneck_evidence: dict[str, float] = field(default_factory=dict)
    sbuf_read_bytes: int = 0
    sbuf_write_bytes: int = 0
    psum_read_bytes: int = 0
    psum_write_bytes: int = 0
    flops: FlopStats = field(default_factory=FlopStats)
    dma: DmaStats = field(default_factory=DmaStats)
    memory: dict[str, MemoryStats] = field(default_factory=dict)  # "sbuf", "psum"
    critical_path: CriticalPathStats = field(default_factory=CriticalPathStats)
    peaks: Peaks = field(default_factory=Peaks)
    tags: list[TagStats] = field(default_factory=list)
    # ---- set by ``hwsim run``, sweeps and kernel runs (RUN_FIELDS), None otherwise
    config: str | None = None
    instructions_simulated: int | None = None
    wall_build_s: float | None = None
    wall_simulate_s: float | None = None
    max_abs_err: float | None = None
    numerics_ok: bool | None = None
    #: The allowed absolute error the verdict was judged at (``NumericsVerdict.tolerance``).
    numerics_tolerance: float | None = None
    out_dir: str | None = None
    files: list[str] | None = None
    #: What a kernel-language kernel's memory planner spilled (``hwsim.lang.planner.SpillStats``:
    #: stores, reloads, bytes each way, tiles freed after last use); None when nothing was planned.
    sbuf_spill: dict[str, int] | None = None
    #: The same per tile (``name (kernel line)``): bytes stored, reloaded and re-read, refills,
    #: deferred loads (the counts that are not zero).
    sbuf_spill_by_tile: dict[str, dict[str, int]] | None = None
    #: A bridge graph's roofline floor on the config (``hwsim.bridge.passes.floor``), the
    #: simulated time over it, and the term that binds; None for other runs.
    floor_ns: float | None = None
    over_floor: float | None = None
    floor_binding: str | None = None
    #: Top-level keys of a summary read back that this version does not know (written back).
    extras: dict[str, Any] = field(default_factory=dict)

    def record_numerics(self, verdict: Any) -> None:
        """Keep a ``hwsim.workloads.registry.NumericsVerdict`` (the run's outputs against its
        reference) in the run fields."""
        self.max_abs_err = float(verdict.max_abs_err)
        self.numerics_ok = bool(verdict.ok)
        self.numerics_tolerance = float(verdict.tolerance)

    def numerics_text(self) -> str:
        """``OK (max abs error 0.0123, tolerance 0.05)``; ``not checked`` without a verdict."""
        if self.numerics_ok is None:
            return "not checked"
        verdict = "OK" if self.numerics_ok else "MISMATCH"
        text = f"{verdict} (max abs error {self.max_abs_err:.3g}"
        if self.numerics_tolerance is not None:
            text += f", tolerance {self.numerics_tolerance:.3g}"
        return text + ")"

    @property
    def total_s(self) -> float:
        return self.total_ticks / self.base_mhz / 1e6 if self.base_mhz else 0.0

    def memory_stats(self, name: str) -> MemoryStats:
        """SBUF's or PSUM's occupancy (empty stats when the summary has none)."""
        return self.memory.get(name) or MemoryStats()

    def values_of(self, keys: Iterable[str]) -> dict[str, Any]:
        """{key: value} of ``to_dict()`` for each of ``keys`` (None for a key it lacks)."""
        data = self.to_dict()
        return {key: data.get(key) for key in keys}

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict (the ``--json`` keys, in their order; see the module docstring)."""
        out: dict[str, Any] = {}
        for name in _HEAD:
            out[name] = _plain(getattr(self, name))
        out |= {
            "total_time": self.total_s,
            "hardware_flops": self.flops.hardware_flops,
            "model_flops": self.flops.model_flops,
            "mfu_estimated_percent": self.mfu_pct,
            "hfu_estimated_percent": self.hfu_pct,
            "mbu_estimated_percent": self.mbu_pct,
            "dma_active_time_percent": self.dma_active_pct,
        }
        for name in engine_order(self.engines):
            engine = self.engines.get(name)
            if engine is not None:
                out[f"{name}_engine_active_time_percent"] = engine.busy_pct
                out[f"{name}_instruction_count"] = engine.instructions
        for memory in ON_CHIP:
            out[f"{memory}_read_bytes"] = getattr(self, f"{memory}_read_bytes")
            out[f"{memory}_write_bytes"] = getattr(self, f"{memory}_write_bytes")
        for memory in ON_CHIP:
            out[f"{memory}_peak_bytes"] = self.memory_stats(memory).peak_bytes
        for name in _DETAILS:
            out[name] = _plain(getattr(self, name))
        for name in RUN_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = _plain(value)
        out |= self.extras
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSummary:
        """A summary from its ``to_dict()`` form, also as read back from JSON (integer keys
        as strings) or written by an older version (see the module docstring)."""
        known = {f.name for f in dataclasses.fields(cls)} - {"extras"}
        summary = _build(cls, data)
        summary.extras = {
            k: v for k, v in data.items() if k not in known and k not in _derived_keys()
        }
        return summary


_HEAD = [
    "schema",
    "workload",
    "config_name",
    "config_hash",
    "cores",
    "base_mhz",
    "total_ticks",
    "total_ns",
    "engines",
    "instructions",
    "mfu_pct",
    "hfu_pct",
    "mbu_pct",
    "dma_active_pct",
    "idle_pct",
    "hbm_bytes",
    "hbm_read_bytes",
    "hbm_write_bytes",
    "bottleneck",
    "bottleneck_resource",
    "bottleneck_evidence",
]
_DETAILS = ("flops", "dma", "memory", "critical_path", "peaks", "tags")


@functools.cache
def _derived_keys() -> frozenset[str]:
    """Top-level keys ``to_dict`` derives from fields (not fields themselves)."""
    names = set(RunSummary().to_dict()) - {f.name for f in dataclasses.fields(RunSummary)}
    for engine in engine_names():
        names |= {f"{engine}_engine_active_time_percent", f"{engine}_instruction_count"}
    return frozenset(names | {f"{m}_peak_bytes" for m in ON_CHIP})


def _plain(value: Any) -> Any:
    """Dataclasses (also inside dicts and lists) as dicts, everything else as it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _build(cls: type, data: Any) -> Any:
    """An instance of dataclass ``cls`` from ``data``: missing fields keep their defaults,
    unknown keys are ignored."""
    if not isinstance(data, dict):
        return cls()
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in data and f.name != "extras":
            values[f.name] = _convert(hints[f.name], data[f.name])
    return cls(**values)


def _convert(hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):  # X | None
        if value is None:
            return None
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
        origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value)  # type: ignore[arg-type]
    if origin is dict and isinstance(value, dict):
        key_type, value_type = typing.get_args(hint)
        return {
            (int(k) if key_type is int else k): _convert(value_type, v) for k, v in value.items()
        }
    if origin is list and isinstance(value, list):
        (item_type,) = typing.get_args(hint)
        return [_convert(item_type, v) for v in value]
    if hint is float:  # a non-finite float is written as a string (hwsim.strict_json)
        return as_float(value)
    return value
