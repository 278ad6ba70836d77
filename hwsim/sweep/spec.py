"""Sweep specs (YAML): the strict schema, and loading one into a plan where every config is built.

    name: pe_array_sbuf             # names the default database (traces/sweeps/NAME.sqlite)
    base: trn2                      # preset or YAML path (relative to this file)
    set: {tensor_engine.timing_model: closed_form}      # fixed overrides, dotted paths
    parameters:                     # blocks combine by product (see hwsim.sweep.expand)
      grid: {tensor_engine.rows: [32, 64, 128]}
      zip: {tensor_engine.cols: [64, 128], tensor_engine.stationary_free_max: [64, 128]}
      random: {samples: 20, seed: 0, parameters: {dma.engines: {choices: [8, 16]}}}
      points: [{sbuf.bytes_per_partition: 98304}]
    workloads: [attention, mlp, gemm:1024x1024x1024:bf16, my_kernels.py:NAME, model.hwprog]
    metrics: [total_ns, mfu_pct, engines.tensor.busy_pct]   # default: hwsim.sweep.metrics
    numerics: false                 # timing-only unless asked
    traces: false                   # write each run's trace folder (large) beside the database

Errors come as configs' do: the spec file, the dotted path, what is wrong and the closest valid
key. Before anything runs every parameter path is checked against the hardware schema and every
point's config is built and validated, so a bad value is reported with the point that has it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hwsim.config import HardwareConfig
from hwsim.config.loader import (
    apply_overrides,
    read_config_dict,
    resolve_config_path,
)
from hwsim.config.validation_errors import describe_validation_error
from hwsim.config.yaml_safe import load_yaml, read_text_file
from hwsim.errors import ConfigError, WorkloadError
from hwsim.sweep import expand
from hwsim.sweep.configs import PointConfigs
from hwsim.sweep.errors import SpecError
from hwsim.sweep.metrics import DEFAULT_METRICS, check_metric
from hwsim.sweep.paths import check_path, is_integer_field
from hwsim.sweep.workloads import SweepWorkload, check_workloads_fit, parse_workload

#: Distinct config errors shown before "... and N more".
MAX_ERRORS_SHOWN = 8
#: Configs a sweep may expand to (as many as ``parameters.random.samples`` may draw): a grid
#: whose product is larger is refused from its list lengths, before anything is expanded. Every
#: point's config is built and validated before anything runs (``hwsim.sweep.configs``), about
#: 0.1 ms a point: the largest sweep's dry run takes seconds. Larger studies are split (one
#: database may hold many sweeps) or sampled (``random``).
MAX_POINTS = 100_000
#: Columns every results row has; parameters and metrics may not reuse these names.
RESERVED_COLUMNS = frozenset(
    {
        "config_hash",
        "workload",
        "status",
        "error",
        "traceback",
        "attempts",
        "numerics",
        "point",
        "sweep",
        "wall_s",
        "build_s",
        "simulate_s",
        "lowering_cached",
        "worker",
        "finished_at",
        "trace_dir",
    }
)


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


Values = Annotated[list[Any], Field(min_length=1)]
#: Steps a random range may have (``(high - low) / step``): past 2^53 a float no longer counts
#: them exactly, and a step that small was not meant.
MAX_STEPS = float(2**53)


class RandomRange(_Strict):
    """One randomly drawn parameter: ``choices``, or ``low``..``high`` (``log``, ``step``)."""

    choices: Annotated[list[Any], Field(min_length=1)] | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: Annotated[float, Field(gt=0)] | None = None
    integer: bool | None = Field(
        default=None, description="round to ints (default: when the config field is an int)"
    )

    @model_validator(mode="after")
    def _one_form(self) -> RandomRange:
        if self.choices is not None:
            if any(v is not None for v in (self.low, self.high, self.step)) or self.log:
                raise ValueError("give either choices or low/high, not both")
            return self
        if self.low is None or self.high is None:
            raise ValueError("give choices: [...] or both low and high")
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError(f"low and high must be finite numbers, got {self.low}, {self.high}")
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) is above high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError(f"log sampling needs low > 0, got {self.low}")
        span = self.high - self.low  # what is drawn from: it must be a finite float too
        if not math.isfinite(span):
            raise ValueError(
                f"high - low is too large to draw from ({self.low} .. {self.high}); use log: true"
            )
        if self.step is not None and span / self.step > MAX_STEPS:
            raise ValueError(
                f"step {self.step} makes more than {MAX_STEPS:.0e} steps from low to high; "
                "use a larger step"
            )
        return self


class RandomBlock(_Strict):
    samples: Annotated[int, Field(ge=1, le=MAX_POINTS)]
    seed: int = 0
    parameters: Annotated[dict[str, RandomRange], Field(min_length=1)]


class ParameterBlocks(_Strict):
    grid: Annotated[dict[str, Values], Field(min_length=1)] | None = None
    zip: Annotated[dict[str, Values], Field(min_length=1)] | None = None
    random: RandomBlock | None = None
    points: Annotated[list[dict[str, Any]], Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _zip_lengths(self) -> ParameterBlocks:
        lengths = {len(values) for values in (self.zip or {}).values()}
        if len(lengths) > 1:
            sizes = ", ".join(f"{path}: {len(v)}" for path, v in (self.zip or {}).items())
            raise ValueError(f"zip lists must have equal lengths ({sizes})")
        return self


class SweepSpec(_Strict):
    """A sweep: base config, parameters to vary, workloads, and what to record."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$", max_length=100)]
    description: str = ""
    base: str = "trn2"
    set: dict[str, Any] = Field(default_factory=dict)
    parameters: ParameterBlocks = Field(default_factory=ParameterBlocks)
    workloads: Annotated[list[str], Field(min_length=1)]
    metrics: Annotated[list[str], Field(min_length=1)] = Field(
        default_factory=lambda: list(DEFAULT_METRICS)
    )
    numerics: bool = False
    traces: bool = False


@dataclass(frozen=True)
class SweepPoint:
    """One config of the sweep: its swept values, the validated config and its hash."""

    index: int
    params: dict[str, Any]
    config: HardwareConfig
    config_hash: str


@dataclass(frozen=True)
class SweepPlan:
    """A validated spec with every config built: what ``run_sweep`` executes."""

    spec: SweepSpec
    source: str
    spec_text: str
    points: list[SweepPoint]
    workloads: list[SweepWorkload]
    parameters: list[str]
    duplicates: int = 0
    base_dir: Path = field(default=Path("."))

    @property
    def metrics(self) -> list[str]:
        return list(dict.fromkeys(self.spec.metrics))

    @property
    def runs(self) -> int:
        return len(self.points) * len(self.workloads)


# ---- loading ------------------------------------------------------------------------------------


def load_spec(path: str | Path) -> tuple[SweepSpec, str]:
    """Parse and schema-check a spec file; returns (spec, its text)."""
    text = read_text_file(Path(path), SpecError, "sweep spec")
    return parse_spec(text, str(path)), text


def parse_spec(text: str, source: str = "<spec>") -> SweepSpec:
    """A spec from YAML text, read by the bounded loader and schema-checked (``source`` names it
    in errors)."""
    data = load_yaml(text, source, SpecError)
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: a sweep spec must be a YAML mapping (name, base, parameters, ...)"
        )
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        lines = [describe_validation_error(err, SweepSpec) for err in exc.errors()]
        raise SpecError(f"{source}: " + "; ".join(dict.fromkeys(lines))) from None


def load_sweep(path: str | Path) -> SweepPlan:
    """Load a spec and check everything before anything runs: parameter paths against the
    hardware schema, metrics, workloads, and every point's config (built and validated)."""
    spec, text = load_spec(path)
    return plan_sweep(spec, str(path), text, Path(path).resolve().parent)


def plan_sweep(spec: SweepSpec, source: str, text: str, base_dir: Path) -> SweepPlan:
    """Check a parsed spec against the hardware schema and build every config (paths in the
    spec are relative to ``base_dir``); all problems are reported together."""
    errors = _check_paths(spec) + _check_metrics(spec)
    workloads = _check_workloads(spec, base_dir, errors)
    try:
        base = _base_dict(spec, base_dir)
    except ConfigError as exc:
        errors.append(f"base: {exc}")
    if errors:
        raise SpecError(f"{source}: " + "; ".join(errors))
    count = point_count(spec)
    if count > MAX_POINTS:
        raise SpecError(
            f"{source}: parameters: {count} configs, more than the {MAX_POINTS} a sweep may have "
            "(MAX_POINTS); refused before any is built: split the sweep or sample it (random)"
        )
    try:
        points = _expand(spec)
    except ValueError as exc:
        raise SpecError(f"{source}: parameters: {exc}") from None
    built, duplicates = _build_configs(spec, base, points, source)
    too_large = check_workloads_fit(workloads, [(p.params, p.config) for p in built])
    if too_large:
        raise SpecError(f"{source}: " + "; ".join(too_large))
    parameters = list(dict.fromkeys(path for point in points for path in point))
    return SweepPlan(spec, source, text, built, workloads, parameters, duplicates, base_dir)


# ---- semantic checks ----------------------------------------------------------------------------


def _parameter_paths(spec: SweepSpec) -> list[tuple[str, str, str]]:
    """(block, where in the spec, dotted config path) of every config path the spec names."""
    blocks = spec.parameters
    found = [("set", f"set.{p}", p) for p in spec.set]
    for name in ("grid", "zip"):
        block = getattr(blocks, name) or {}
        found += [(f"parameters.{name}", f"parameters.{name}.{p}", p) for p in block]
    if blocks.random is not None:
        where = "parameters.random.parameters"
        found += [("parameters.random", f"{where}.{p}", p) for p in blocks.random.parameters]
    for i, point in enumerate(blocks.points or []):
        found += [("parameters.points", f"parameters.points[{i}].{p}", p) for p in point]
    return found


def _check_paths(spec: SweepSpec) -> list[str]:
    errors = []
    owner: dict[str, str] = {}
    for block, where, path in _parameter_paths(spec):
        problem = check_path(path)
        if problem:
            errors.append(f"{where}: {problem}")
            continue
        if path in RESERVED_COLUMNS or path in spec.metrics:
            errors.append(f"{where}: '{path}' is also a results column name")
        first = owner.setdefault(path, block)
        if first != block:
            errors.append(f"{where}: '{path}' is already set by {first}")
    return errors


def _check_metrics(spec: SweepSpec) -> list[str]:
    errors = []
    for i, name in enumerate(spec.metrics):
        problem = check_metric(name, spec.numerics)
        if problem:
            errors.append(f"metrics[{i}]: {problem}")
        elif name in RESERVED_COLUMNS:
            errors.append(f"metrics[{i}]: '{name}' is a results column the sweep always records")
    return errors


def _check_workloads(spec: SweepSpec, base_dir: Path, errors: list[str]) -> list[SweepWorkload]:
    workloads: dict[str, SweepWorkload] = {}
    for i, text in enumerate(spec.workloads):
        try:
            workload = parse_workload(text, base_dir)
        except WorkloadError as exc:
            errors.append(f"workloads[{i}]: {exc}")
            continue
        if workload.key in workloads:
            errors.append(f"workloads[{i}]: '{text}' repeats '{workloads[workload.key].text}'")
        workloads[workload.key] = workload
    return list(workloads.values())


def _base_dict(spec: SweepSpec, base_dir: Path) -> dict[str, Any]:
    base = spec.base
    candidate = base_dir / base
    path = resolve_config_path(candidate if candidate.is_file() else base)
    return apply_overrides(read_config_dict(path), spec.set)


def point_count(spec: SweepSpec) -> int:
    """How many configs ``_expand`` would make, from the list lengths alone (nothing built)."""
    blocks = spec.parameters
    count = math.prod(len(values) for values in (blocks.grid or {}).values())
    if blocks.zip:
        count *= len(next(iter(blocks.zip.values())))
    if blocks.random:
        count *= blocks.random.samples
    if blocks.points:
        count *= len(blocks.points)
    return count


def _expand(spec: SweepSpec) -> list[expand.Point]:
    blocks = spec.parameters
    factors = []
    if blocks.grid:
        factors.append(expand.grid_points(blocks.grid))
    if blocks.zip:
        factors.append(expand.zip_points(blocks.zip))
    if blocks.random:
        block = blocks.random
        factors.append(
            expand.random_points(block.samples, block.seed, block.parameters, is_integer_field)
        )
    if blocks.points:
        factors.append([dict(p) for p in blocks.points])
    return expand.product(factors)


def _build_configs(
    spec: SweepSpec, base: dict[str, Any], points: list[expand.Point], source: str
) -> tuple[list[SweepPoint], int]:
    """Every point's config, validated; all problems reported together (grouped by message)."""
    built: list[SweepPoint] = []
    seen: set[str] = set()
    failures: dict[str, list[str]] = {}
    configs = PointConfigs(base)
    for point in points:
        try:
            config, digest = configs.build(point, source="")
        except ConfigError as exc:
            message = str(exc).removeprefix(": ")
            failures.setdefault(message, []).append(_point_label(point))
            continue
        if digest in seen:
            continue
        seen.add(digest)
        built.append(SweepPoint(len(built), point, config, digest))
    if failures:
        raise SpecError(f"{source}: " + _failure_report(failures, len(points)))
    return built, len(points) - len(built)


def _failure_report(failures: dict[str, list[str]], total: int) -> str:
    bad = sum(len(labels) for labels in failures.values())
    lines = []
    for message, labels in list(failures.items())[:MAX_ERRORS_SHOWN]:
        others = len(labels) - 1
        more = f" (and {others} more point{'s' if others > 1 else ''})" if others else ""
        lines.append(f"point {labels[0]}{more}: {message}")
    if len(failures) > MAX_ERRORS_SHOWN:
        lines.append(f"... and {len(failures) - MAX_ERRORS_SHOWN} more distinct errors")
    return f"{bad} of {total} configs are invalid: " + " | ".join(lines)


def _point_label(point: expand.Point) -> str:
    return "{" + ", ".join(f"{path}: {value!r}" for path, value in point.items()) + "}"
