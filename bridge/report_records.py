"""The typed records a bridge run hands its ``Report`` (``Report.add``), besides ops and outputs.

The compile path, the eager and device paths, the partitioner, the pass pipeline, the host
timeline and the generation timer each make records of what they saw; ``Report.add`` is the one
place they enter the report, by type, so the report's lists are written by it alone and each
record says by its fields what it holds. ``OpRecord`` and ``OutputRecord`` live in
``bridge.report`` with it; these are the rest. A record keeps the row the report saves (its
``row()``): the saved JSON and the printed tables read those rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from hwsim.bridge.op_times import OpTime
    from hwsim.bridge.report import OpRecord, OutputRecord


@dataclass(frozen=True)
class RunRow:
    """One run of a program (or of a host transfer): its name and what the run measured (the
    simulator's summary figures, ``SUMMARY_KEYS``, and whatever the caller adds)."""

    graph: str
    values: dict[str, Any]

    def row(self) -> dict[str, Any]:
        return {"graph": self.graph} | self.values


class _FieldRow:
    """A record whose saved row is its fields, by name, in declaration order."""

    def row(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class GraphRow(_FieldRow):
    """One graph handed to the backend: its kind and how its nodes were split."""

    graph: str
    kind: str
    nodes: int
    simulator: int
    cpu: int
    partitions: int


@dataclass(frozen=True)
class PipelineRow:
    """What the pass pipeline did to one lowered graph (``bridge.passes``), and what autotune
    chose for it (None: autotune off)."""

    graph: str
    pipeline: dict[str, Any]
    autotune: dict[str, Any] | None = None

    def row(self) -> dict[str, Any]:
        extra = {"autotune": self.autotune} if self.autotune is not None else {}
        return {"graph": self.graph} | self.pipeline | extra


@dataclass(frozen=True)
class PassEffectsRow:
    """Each pass's measured effect on one graph (``bridge.passes.effects``)."""

    graph: str
    rows: list[Any]

    def row(self) -> dict[str, Any]:
        return {"graph": self.graph, "rows": self.rows}


@dataclass(frozen=True)
class TimelineRow(_FieldRow):
    """One call of a graph run partly on the CPU: simulated and host time end to end."""

    graph: str
    call: int
    simulated_ns: float
    cpu_host_ns: float


@dataclass(frozen=True)
class GenerationRow:
    """One timed text generation (``bridge.generation``), as its record's ``to_dict``."""

    values: dict[str, Any]

    def row(self) -> dict[str, Any]:
        return self.values


@dataclass(frozen=True)
class CompileSeen:
    """What dynamo reported at one compile: the compile id (frame, recompile of that frame; None
    when it has none) and the graph breaks met since the last (short reason -> count)."""

    compile_id: tuple[int, int] | None
    graph_breaks: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class OutputCheck:
    """An output compared with a reference: ``against`` 'graph' (the partition check),
    'eager' (the model's own code) or 'gradient' (an input gradient against eager). ``worst``:
    a later check of the same output replaces this one only if it is at least as bad (False:
    kept as another row)."""

    record: OutputRecord
    against: Literal["graph", "eager", "gradient"]
    worst: bool = True


@dataclass(frozen=True)
class RunOpTimes:
    """One run's simulated time per op, for the op records of the graph it ran.

    ``records``: that graph's op records by node name (those it added to the report);
    ``times``: the run's time per node or fused group (``bridge.op_times.op_times``);
    ``own_costs``: what each timed node costs on its own (``bridge.compiled.own_cost_cycles``),
    by which the report divides a fused group's time among its members. The report sets each
    record's ``sim_ns``, ``span_ns`` and ``instructions`` from it: the last run's times."""

    records: Mapping[str, OpRecord]
    times: Mapping[str, OpTime]
    own_costs: Mapping[str, float]


@dataclass(frozen=True)
class ComputeDtypes:
    """A graph lowered: the dtype each of its ops computes in under auto-cast
    (``LoweredGraph.compute_dtypes``, node -> 'bf16'), onto the graph's op records by node name."""

    records: Mapping[str, OpRecord]
    dtypes: Mapping[str, str]


@dataclass(frozen=True)
class GraphOnCpu:
    """A graph that failed to lower and runs on the CPU: its op records become CPU ops, each
    with the refusal's reason and a detail naming the graph."""

    records: Sequence[OpRecord]
    reason: str
    detail: str


@dataclass(frozen=True)
class HostTimes:
    """One call of a graph run partly on the CPU (``bridge.host_timeline``): each CPU op's host
    wall time, onto its op record (the last call's)."""

    records: Mapping[str, OpRecord]
    wall_ns: Mapping[str, float]


#: Every record ``Report.add`` takes besides OpRecord.
Row = RunRow | GraphRow | PipelineRow | PassEffectsRow | TimelineRow | GenerationRow
