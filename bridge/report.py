"""What a bridge run reports: ops lowered or run on the CPU (and why), per-output error against
the CPU, the top ops by simulated time, and the simulator's summary — as JSON and rich tables.

Per-op simulated time comes from the trace (``bridge.op_times``): every instruction's tag carries
the FX node that emitted it (``LoweringContext.node``), and every DMA transfer belongs to the
instruction that triggered it. An op's ``sim_ns`` is its bound time — the busiest of its
resources (each engine's busy time, and the DMA engines' busy time divided by their number) —
which is what it would take alone with perfect overlap; ``span_ns`` is first start to last end
in the whole-graph schedule, where ops overlap each other.
"""

from __future__ import annotations

import io
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from hwsim import strict_json
from hwsim.bridge.precision import ErrorStats
from hwsim.bridge.report_records import (
    CompileSeen,
    ComputeDtypes,
    GenerationRow,
    GraphOnCpu,
    GraphRow,
    HostTimes,
    OutputCheck,
    PassEffectsRow,
    PipelineRow,
    Row,
    RunOpTimes,
    RunRow,
    TimelineRow,
)
from hwsim.outputs_guard import OutputFolder, claim_folder, output_file
from hwsim.report.console import PIPED_WIDTH, report_console

#: Columns of the report's text (``Report.text``): the width report tables get when piped.
WIDE = PIPED_WIDTH

#: Summary keys of a run kept in the report (the full summary is in the run's trace).
SUMMARY_KEYS = (
    "total_ns",
    "instructions",
    "mfu_pct",
    "hbm_bytes",
    "dma_active_pct",
    "bottleneck",
    "sbuf_peak_bytes",
    "psum_peak_bytes",
    "floor_ns",  # the graph's roofline floor (bridge.passes.floor), sim time over it, its term
    "over_floor",
    "floor_binding",
)


@dataclass
class OpRecord:
    """One op: run on the simulator ('simulator'), on the CPU ('cpu', with the reason), or a
    metadata-only view ('view', eager mode: no device work)."""

    node: str
    op: str
    status: str
    reason: str = ""
    detail: str = ""
    shapes: str = ""
    sim_ns: float = 0.0
    span_ns: float = 0.0
    instructions: int = 0
    error: dict[str, Any] | None = None  # eager mode: ErrorStats of this op against the CPU
    host_ns: float = 0.0  # a CPU op: its host wall time at the last call (bridge.host_timeline)
    #: torch.compile: the ATen op this node came from when a decomposition made it (aten.silu
    #: -> sigmoid + mul), and the torch function or module that called it.
    decomposed_from: str = ""
    source: str = ""
    #: torch.compile: the kind of the node's graph ('forward', 'backward', 'optimizer'), and the
    #: module that ran it, as a path from the compiled model ('transformer.h.0.attn').
    phase: str = ""
    module: str = ""
    #: The dtype the op computed in under auto-cast ('bf16' for a matmul under matmult/bf16;
    #: ``bridge.auto_cast.compute_dtype``), empty until it was lowered.
    compute_dtype: str = ""


@dataclass
class OutputRecord:
    """One output compared with the CPU, twice.

    ``stats``: against the graph run on the CPU at matched precision (floating inputs in the
    simulated compute dtype, or in their own dtypes under 'auto'), judged with that dtype's
    tolerance: whether the simulator computes what the hardware would. ``vs_fp32``: against
    the graph run in fp32, with the same tolerance: what running in lower precision costs
    (None if that reference could not run; ``reference_error`` says why).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    computed_in: str  # the dtype whose tolerance applies
    stats: ErrorStats
    vs_fp32: ErrorStats | None = None
    reference_error: str = ""
    #: What it was compared with: 'graph' (the decomposed graph on the CPU, the partition
    #: check) or 'eager' (the model's own code, ``bridge.eager_check``).
    reference: str = "graph"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "reference": self.reference,
            "shape": self.shape,
            "dtype": self.dtype,
            "computed_in": self.computed_in,
            "stats": self.stats.to_dict(),
            "vs_fp32": None if self.vs_fp32 is None else self.vs_fp32.to_dict(),
            "reference_error": self.reference_error,
        }


def _time_ops(run: RunOpTimes) -> None:
    """Each op record's time in the run: its node's, or its share of its fused group's, divided
    among the members by their own costs (evenly when none has a cost)."""
    for node, time in run.times.items():
        sources = time.members or (node,)  # a fused group's time is all its nodes'
        weights = [run.own_costs.get(source, 0.0) for source in sources]
        total = sum(weights)
        for source, weight in zip(sources, weights, strict=True):
            record = run.records.get(source)
            if record is not None:
                part = weight / total if total else 1 / len(sources)
                record.sim_ns, record.span_ns = time.share_ns * part, time.span_ns
                record.instructions = time.instructions


#: What ``Report.add`` takes to change op records it already holds.
OpUpdate = RunOpTimes | ComputeDtypes | GraphOnCpu | HostTimes


def _update_ops(update: OpUpdate) -> None:
    if isinstance(update, RunOpTimes):
        _time_ops(update)
    elif isinstance(update, ComputeDtypes):
        for node, dtype in update.dtypes.items():
            record = update.records.get(node)
            if record is not None:
                record.compute_dtype = dtype
    elif isinstance(update, GraphOnCpu):
        for record in update.records:
            record.status, record.reason, record.detail = "cpu", update.reason, update.detail
    else:
        for node, wall_ns in update.wall_ns.items():
            record = update.records.get(node)
            if record is not None:
                record.host_ns = wall_ns


def _keep_worst(records: list[OutputRecord], record: OutputRecord) -> None:
    """Add ``record``, or replace the one of the same name if it is at least as bad."""
    for i, known in enumerate(records):
        if known.name == record.name:
            if record.stats.max_abs >= known.stats.max_abs or record.reference_error:
                records[i] = record
            return
    records.append(record)


@dataclass
class Report:
    """Everything a bridge run records. Append-only while the run goes on, through ``add``."""

    mode: str  # 'compile' or 'eager'
    config: str
    precision: dict[str, str]
    fallback: str
    ops: list[OpRecord] = field(default_factory=list)
    outputs: list[OutputRecord] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    graphs: list[dict[str, Any]] = field(default_factory=list)
    #: torch.compile only: dynamo's compile id of every graph handed to the backend
    #: ("frame/recompile": a new frame after a graph break, a recompile of the same frame),
    #: and the graph breaks dynamo met while tracing them (reason -> count).
    compile_ids: list[tuple[int, int]] = field(default_factory=list)
    #: Graphs run partly on the CPU: per call, simulated and CPU (host wall) time end to end.
    timelines: list[dict[str, Any]] = field(default_factory=list)
    graph_breaks: dict[str, int] = field(default_factory=dict)
    #: torch.compile: each compiled graph's outputs and input gradients against eager PyTorch
    #: (``bridge.eager_check``), which sees what the partition check cannot.
    eager_outputs: list[OutputRecord] = field(default_factory=list)
    gradients: list[OutputRecord] = field(default_factory=list)
    #: Per lowered graph: what the pass pipeline did (``bridge.passes``), and each pass's
    #: measured effect when ``measure_passes`` is on (``bridge.passes.effects``).
    pipelines: list[dict[str, Any]] = field(default_factory=list)
    pass_effects: list[dict[str, Any]] = field(default_factory=list)
    #: Text generation timed per token (``bridge.generation``): prefill and decode steps'
    #: simulated ns, and the programs lowered during decoding (recompiles).
    generations: list[dict[str, Any]] = field(default_factory=list)

    # ---- the one way in ------------------------------------------------------------------------
    def add(self, *records: OpRecord | OpUpdate | OutputCheck | CompileSeen | Row) -> None:
        """Record what a part of the run saw (``bridge.report_records``): an op, what became
        of ops already recorded (a run's time per op, the dtypes a lowering computes them in,
        their graph falling back to the CPU, their host times), an output check (a later check
        of the same output keeps the worse one unless ``worst`` is off), a compile's id and
        graph breaks, or a row of runs, graphs, pipelines, pass effects, timelines or
        generations. Nothing else writes the report's lists or its op records."""
        for record in records:
            if isinstance(record, OpRecord):
                self.ops.append(record)
            elif isinstance(record, RunOpTimes | ComputeDtypes | GraphOnCpu | HostTimes):
                _update_ops(record)
            elif isinstance(record, OutputCheck):
                checks = {"graph": self.outputs, "eager": self.eager_outputs}
                into = checks.get(record.against, self.gradients)
                if record.worst:
                    _keep_worst(into, record.record)
                else:
                    into.append(record.record)
            elif isinstance(record, CompileSeen):
                if record.compile_id is not None:
                    self.compile_ids.append(record.compile_id)
                for reason, count in record.graph_breaks.items():
                    self.graph_breaks[reason] = self.graph_breaks.get(reason, 0) + count
            else:
                self._rows_of(record).append(record.row())

    def _rows_of(self, record: Row) -> list[dict[str, Any]]:
        rows: dict[type, list[dict[str, Any]]] = {
            RunRow: self.runs,
            GraphRow: self.graphs,
            PipelineRow: self.pipelines,
            PassEffectsRow: self.pass_effects,
            TimelineRow: self.timelines,
            GenerationRow: self.generations,
        }
        found = rows.get(type(record))
        if found is None:
            raise TypeError(f"a Report records no {type(record).__name__}")
        return found

    # ---- queries ------------------------------------------------------------------------------
    def fallbacks(self) -> list[OpRecord]:
        return [r for r in self.ops if r.status == "cpu"]

    def lowered(self) -> list[OpRecord]:
        return [r for r in self.ops if r.status == "simulator"]

    def decompositions(self) -> dict[str, dict[str, int]]:
        """ATen op -> the ops its decomposition became (with how many nodes of each)."""
        found: dict[str, dict[str, int]] = {}
        for r in self.ops:
            if r.decomposed_from:
                into = found.setdefault(r.decomposed_from, {})
                into[r.op] = into.get(r.op, 0) + 1
        return found

    def top_ops(self, count: int = 10) -> list[OpRecord]:
        return sorted(self.lowered(), key=lambda r: -r.sim_ns)[:count]

    @property
    def recompiles(self) -> int:
        """Graphs compiled again for a frame already compiled (guards failed: new shapes...)."""
        return sum(1 for _, again in self.compile_ids if again > 0)

    @property
    def shape_recompiles(self) -> int:
        """Programs lowered again for a new shape of a graph already lowered: each
        specialization of a graph with symbolic sizes after its first (``graph2.s1``, ...) and
        each new input layout of a partition, from the lowering log (``pipelines``). A
        generation loop with a growing KV cache makes one per token."""
        bases = [re.sub(r"\.s\d+(?=\.|$)", "", str(p.get("graph", ""))) for p in self.pipelines]
        return len(bases) - len(set(bases))

    def dynamo_summary(self) -> dict[str, Any]:
        return {
            "graphs_compiled": len(self.compile_ids),
            "frames": len({frame for frame, _ in self.compile_ids}),
            "graph_breaks": sum(self.graph_breaks.values()),
            "break_reasons": self.graph_breaks,
            "recompiles": self.recompiles,
            "shape_recompiles": self.shape_recompiles,
        }

    def phase_of(self, graph: str) -> str:
        """The phase of a graph or of one of its parts (``graph3.fused_0``, ``graph3.s0``): its
        torch.compile kind's first word ('forward', 'backward', 'optimizer'), '' if unknown."""
        kinds = {str(g.get("graph")): str(g.get("kind", "")) for g in self.graphs}
        name = graph
        while name:
            if name in kinds:
                return kinds[name].split(" ", 1)[0]
            name = name.rpartition(".")[0]
        return ""

    def phase_times(self) -> dict[str, float]:
        """Simulated ns per phase, summed over its graphs' runs (a training step's forward,
        backward and optimizer times)."""
        times: dict[str, float] = {}
        for run in self.runs:
            phase = run.get("phase") or self.phase_of(str(run.get("graph", "")))
            times[phase] = times.get(phase, 0.0) + float(run.get("total_ns") or 0.0)
        return times

    @property
    def total_sim_ns(self) -> float:
        return sum(run.get("total_ns", 0.0) for run in self.runs)

    @property
    def numerics_ok(self) -> bool:
        per_op = [r.error["ok"] for r in self.ops if r.error is not None]
        eager = (*self.eager_outputs, *self.gradients)
        return (
            all(o.stats.ok for o in self.outputs)
            and all(o.stats.ok and not o.reference_error for o in eager)
            and all(per_op)
        )

    # ---- output -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "config": self.config,
            "precision": self.precision,
            "fallback": self.fallback,
            "total_sim_ns": self.total_sim_ns,
            "phases": self.phase_times(),
            "numerics_ok": self.numerics_ok,
            "counts": {
                "simulator": len(self.lowered()),
                "cpu": len(self.fallbacks()),
                "view": sum(r.status == "view" for r in self.ops),
            },
            "ops": [asdict(r) for r in self.ops],
            "decomposed": self.decompositions(),
            "fallbacks": [
                {"node": r.node, "op": r.op, "reason": r.reason, "detail": r.detail}
                for r in self.fallbacks()
            ],
            "outputs": [o.to_dict() for o in self.outputs],
            "eager_outputs": [o.to_dict() for o in self.eager_outputs],
            "gradients": [o.to_dict() for o in self.gradients],
            "top_ops": [{"node": r.node, "op": r.op, "sim_ns": r.sim_ns} for r in self.top_ops()],
            "runs": self.runs,
            "graphs": self.graphs,
            "dynamo": self.dynamo_summary() if self.mode == "compile" else None,
            "timelines": self.timelines,
            "pipelines": self.pipelines,
            "pass_effects": self.pass_effects,
            "generations": self.generations,
        }

    def to_json(self, path: str | Path | None = None) -> str:
        text = strict_json.dumps(self.to_dict(), indent=2, default=str)
        if path is not None:
            with output_file(path) as file:
                file.write(text + "\n")
        return text

    def save(self, folder: str | Path | OutputFolder, *, force: bool = False) -> Path:
        """Write ``report.json`` and the readable ``report.txt`` (one row per node) into
        ``folder``: a folder claimed through ``hwsim.outputs_guard``, or a path claimed here
        (new, empty, or a folder of ours unless ``force``)."""
        if not isinstance(folder, OutputFolder):
            with claim_folder(folder, force=force, flag="force=True") as claimed:
                return self.save(claimed)
        folder.write_text("report.json", self.to_json() + "\n")
        folder.write_text("report.txt", self.text(per_node=True))
        return folder.path

    def tables(self, per_node: bool | None = None) -> list[Table]:
        """Rich tables: ops (one row per node, or per op for big graphs), decompositions, CPU
        fallbacks, outputs, top ops, torch.compile's graphs, runs."""
        from hwsim.bridge.generation import generation_table
        from hwsim.bridge.passes.tables import floor_table, pass_effect_table
        from hwsim.bridge.report_tables import report_tables

        extra = [
            pass_effect_table(self.pass_effects),
            floor_table(self.runs),
            generation_table(self.generations),
        ]
        return report_tables(self, per_node) + [t for t in extra if t is not None]

    def print(self, console: Console | None = None, per_node: bool | None = None) -> None:
        console = console or report_console()
        for table in self.tables(per_node):
            console.print(table)

    def text(self, per_node: bool | None = None) -> str:
        console = Console(record=True, width=WIDE, file=io.StringIO())
        self.print(console, per_node)
        return console.export_text()

    def __str__(self) -> str:
        return self.text()
