"""A supported subgraph as a module that runs on the simulator: lower once, run per call.

``SimPartition`` lowers its graph when created (from the example inputs' metadata, so lowering
errors surface at compile time) and again only for inputs of another layout (shape, strides,
dtype). Each call fills the program's inputs, simulates, records the run and each node's simulated
time in the report, compares the outputs with the graph run on the CPU (``check``), writes the
trace if asked, and returns the simulator's outputs. A subgraph whose lowering fails runs on the
CPU from then on (under fallback 'cpu'/'warn'), with the reason in the report.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from torch.utils import _pytree as pytree

from hwsim.bridge.auto_cast import reference_casts, run_graph
from hwsim.bridge.distributed.clock import current_clock, reference_runs
from hwsim.bridge.distributed.graph_fabric import run_on_rank
from hwsim.bridge.distributed.rank_gate import graph_run_permit
from hwsim.bridge.errors import Unsupported, as_unsupported
from hwsim.bridge.graph_lowering import GraphRun, LoweredGraph, lower_graph
from hwsim.bridge.lowering_cache import LOWERED, graph_digest
from hwsim.bridge.lowerings.collectives import collective_placement
from hwsim.bridge.options import BridgeOptions, apply_fallback
from hwsim.bridge.precision import (
    cast_floats,
    compare,
    float64_copy,
    judged_as_cancellation,
    judged_with_exact,
    lazy_leaves,
)
from hwsim.bridge.report import SUMMARY_KEYS, OpRecord, OutputRecord, Report
from hwsim.bridge.report_records import (
    ComputeDtypes,
    GraphOnCpu,
    OutputCheck,
    PassEffectsRow,
    PipelineRow,
    RunOpTimes,
    RunRow,
)
from hwsim.errors import HwsimError


def layout_key(args: tuple[Any, ...] | list[Any]) -> tuple[Any, ...]:
    return tuple(
        (tuple(a.shape), tuple(a.stride()), a.dtype) if isinstance(a, torch.Tensor) else repr(a)
        for a in args
    )


#: Ops whose cost is TensorE's: ``own_cost_cycles`` counts their MACs over the PE array.
_MATMULS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear")


def own_cost_cycles(node: fx.Node | None) -> float:
    """What one op of a fused group costs on its own, in engine cycles at the documented rates:
    a matmul its MACs over the 128 x 128 PE array, anything else its output elements over 128
    lanes once per tensor operand. Used only to divide a group's time among its members."""
    if node is None:
        return 0.0
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return 0.0
    name = str(getattr(node.target, "__name__", node.target)).split(".")[0]
    operands = [a for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]
    if name in _MATMULS and operands:
        contracted = operands[0].meta["val"].shape[-1] if operands[0].meta["val"].ndim else 1
        if name in ("addmm", "baddbmm") and len(operands) > 1:
            contracted = operands[1].meta["val"].shape[-1]
        return value.numel() * contracted / (128 * 128)
    return value.numel() / 128 * max(1, len(operands))


def _run_in_float64(gm: Any, args: tuple[Any, ...]) -> Any:
    """The graph on float64 copies of its floating-point inputs (the arbiter of a result that is
    rounding noise); None when the graph refuses float64."""
    try:
        return float64_copy(gm)(*cast_floats(list(args), torch.float64))
    except Exception:  # a graph that only runs in its own dtypes: no arbiter, judged as before
        return None


def _returns(value: Any) -> Callable[[], Any]:
    """A function returning ``value`` (bound now, not when called)."""
    return lambda: value


def _cores(lowered: LoweredGraph) -> dict[str, Any]:
    """The physical cores a graph's program runs on, and whether the bridge chose them (the
    option ``lnc`` left unset: the faster of the pair's and one core's lowering)."""
    plan = lowered.pipeline.get("lnc", {})
    return {"cores": len(lowered.program.cores), "cores_chosen": "timed" in plan}


class SimPartition(torch.nn.Module):
    """Runs ``gm`` on the simulator (see module docstring)."""

    def __init__(
        self,
        gm: fx.GraphModule,
        name: str,
        options: BridgeOptions,
        example_inputs: list[Any],
        records: dict[str, OpRecord],
        constants: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__()
        self.gm = gm
        #: Placeholders holding the model's frozen parameters and buffers (inference graphs):
        #: their matmul uses are prepared at compile time (``passes.prepare_constants``).
        self.constants = constants
        self.name = name
        self.options = options
        self.records = records  # node name -> its report record (shared with the report)
        self._lowered: dict[tuple[Any, ...], LoweredGraph] = {}
        self._cpu: Unsupported | None = None
        self._calls = 0
        #: Simulated time of the last call (None: it ran on the CPU), for bridge.host_timeline.
        self.last_total_ns: float | None = None
        self._lower(example_inputs)

    @property
    def report(self) -> Report:
        assert self.options.report is not None
        return self.options.report

    def _lower(self, args: list[Any]) -> LoweredGraph | None:
        # a graph with collectives is lowered per rank (threads of one process share dynamo's
        # compiled graphs, so the calling rank picks its own program)
        ranks = collective_placement(self.gm)
        key = (*layout_key(args), ranks) if ranks else layout_key(args)
        if key not in self._lowered:
            try:
                passes, tiling, tuned = self._choices(args)
                lowering = {
                    "config": self.options.config,
                    "precision": self.options.precision,
                    "tiling": tiling,
                    "passes": passes,
                    "memory_plan": self.options.memory_plan,
                    "constants": self.constants,
                }
                digest = graph_digest(self.gm, key, **lowering, ranks=ranks)
                self._lowered[key] = LOWERED.get_or_lower(
                    "graph@" + digest[:24],
                    lambda: lower_graph(
                        self.gm,
                        args,
                        config=self.options.config,
                        precision=self.options.precision,
                        options=tiling,
                        name=self.name,
                        memory_plan=self.options.memory_plan,
                        passes=passes,
                        constants=self.constants,
                    ),
                    # one rank's program names its live process groups: never stored
                    stored=None if ranks else (digest, self.options.config),
                )
                self._record_pipeline(self._lowered[key], args, tuned)
                self.report.add(ComputeDtypes(self.records, self._lowered[key].compute_dtypes))
            except HwsimError as error:  # Unsupported, or the kernel build failing (OOM, …)
                problem = as_unsupported(error, self.name)
                apply_fallback(self.options, problem, self.name)
                self._to_cpu(problem)
                return None
        return self._lowered[key]

    def _choices(self, args: list[Any]) -> tuple[Any, Any, dict[str, Any] | None]:
        """(passes, tiling, what autotune found): the options', or tuned (``bridge.autotune``)."""
        if not self.options.autotune:
            return self.options.passes, self.options.tiling, None
        from hwsim.bridge.autotune import choose

        return choose(self.gm, args, self.options, self.name)

    def _record_pipeline(
        self, lowered: LoweredGraph, args: list[Any], tuned: dict[str, Any] | None = None
    ) -> None:
        """The pass pipeline's log, what autotune chose, and (``measure_passes``) each pass's
        measured effect."""
        self.report.add(PipelineRow(self.name, lowered.pipeline, tuned))
        if self.options.measure_passes:
            from hwsim.bridge.passes.effects import pass_effects

            rows = pass_effects(
                self.gm,
                args,
                self.options.passes,
                config=self.options.config,
                precision=self.options.precision,
                options=self.options.tiling,
                name=self.name,
                memory_plan=self.options.memory_plan,
                constants=self.constants,
            )
            self.report.add(PassEffectsRow(self.name, rows))

    def _to_cpu(self, error: Unsupported) -> None:
        self._cpu = error
        nodes = (self.records.get(node.name) for node in self.gm.graph.nodes)
        detail = f"its subgraph {self.name} failed to lower: {error}"
        records = [record for record in nodes if record is not None]
        self.report.add(GraphOnCpu(records, error.reason.value, detail))

    def forward(self, *args: Any) -> Any:
        lowered = None if self._cpu is not None else self._lower(list(args))
        self.last_total_ns = None
        if lowered is None:
            return self.gm(*args)
        if lowered.collective_groups:  # its collectives meet the other ranks' as it runs
            return self._run(lowered, args)
        with graph_run_permit():  # rank threads: no more at once than CPUs
            return self._run(lowered, args)

    def _run(self, lowered: LoweredGraph, args: tuple[Any, ...]) -> Any:
        clock = current_clock()  # a "hwsim" torch.distributed rank: its clock takes the time
        phase = self.report.phase_of(self.name)
        if lowered.collective_groups:
            run = run_on_rank(lowered, list(args), clock, self.name, phase, self.options)
        else:
            start = clock.begin_graph(phase) if clock is not None else 0
            held = clock.hbm_held(start) if clock is not None else []
            run = lowered.run(list(args), initcheck=self.options.initcheck, hbm_held=held)
            if clock is not None:
                total = clock.ns_to_ticks(float(run.result.summary.total_ns))
                clock.end_graph(self.name, phase, start, total, hbm_held=held)
        self.last_total_ns = float(run.result.summary.total_ns)
        self._calls += 1
        self._record(run, lowered)
        if self.options.check:
            with reference_runs():  # a rank's collectives in the reference take no time
                self._check(run.outputs, args)
        if self.options.trace is not None:  # a run folder: trace.json, tables, plots
            from hwsim.trace.outputs import write_run_outputs

            with self.options.trace.child(f"{self.name}_call{self._calls}") as folder:
                write_run_outputs(run.result.trace, folder, summary=run.result.summary)
            self.report.save(self.options.trace)  # the report so far, next to the run folders
        return run.outputs

    def _record(self, run: GraphRun, lowered: LoweredGraph) -> None:
        summary = run.result.summary
        memory = lowered.memory.to_dict() if lowered.memory is not None else {}
        self.report.add(
            RunRow(
                self.name,
                {"phase": self.report.phase_of(self.name), "call": self._calls}
                | summary.values_of(SUMMARY_KEYS)
                | {k: v for k, v in memory.items() if k.startswith("hbm_")}
                | {"runtime_overhead_ns": lowered.runtime_overhead().total_ns}
                | _cores(lowered),
            )
        )
        nodes = {n.name: n for n in self.gm.graph.nodes}
        timed = {m for node, time in run.op_times.items() for m in (time.members or (node,))}
        own_costs = {name: own_cost_cycles(nodes.get(name)) for name in timed}
        self.report.add(RunOpTimes(self.records, run.op_times, own_costs))

    def _check(self, actual: Any, args: tuple[Any, ...]) -> None:
        """Compare with the graph on the CPU with the run's casts (judged) and in fp32."""
        precision = self.options.precision
        problem = ""
        with reference_casts(precision) as casts:  # auto-cast's rounding on the CPU
            matched = run_graph(self.gm, args, casts)
        fp32: Any = None
        floats = {a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()}
        if not precision.casts and floats <= {torch.float32}:
            fp32 = matched  # nothing was cast and the inputs are fp32: it is the fp32 run
        else:
            try:
                fp32 = self.gm(*cast_floats(list(args), torch.float32))
            except Exception as error:  # a graph that only runs in its own dtypes
                problem = f"fp32 reference: {type(error).__name__}: {error}"
        wanted = pytree.tree_leaves(matched)
        wide = pytree.tree_leaves(fp32) if fp32 is not None else [None] * len(wanted)
        exact = lazy_leaves(functools.partial(_run_in_float64, self.gm, args))
        pairs = zip(pytree.tree_leaves(actual), wanted, wide, strict=True)
        for i, (got, want, want_fp32) in enumerate(pairs):
            if not isinstance(want, torch.Tensor):
                continue
            cast = casts.cast_through(want)
            tolerance = precision.tolerance(got.dtype, cast=cast)
            uncast = want_fp32 if cast and isinstance(want_fp32, torch.Tensor) else None
            if cast:
                stats = judged_with_exact(
                    got, want.to(got.dtype), tolerance, _returns(uncast), cast=cast
                )
            else:  # rounding noise (a cancellation) is judged against the graph in float64
                stats = judged_as_cancellation(
                    got, want.to(got.dtype), tolerance, functools.partial(exact, i)
                )
            vs_fp32 = None
            if isinstance(want_fp32, torch.Tensor):
                vs_fp32 = compare(got.to(torch.float32), want_fp32.float(), tolerance)
            record = OutputRecord(
                f"{self.name}.out{i}",
                tuple(want.shape),
                str(got.dtype),
                precision.result_dtype_name(got.dtype, cast=cast),
                stats,
                vs_fp32,
                problem,
            )
            self.report.add(OutputCheck(record, "graph"))
