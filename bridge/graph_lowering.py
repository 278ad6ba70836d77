"""Lower an FX graph of Core ATen ops into ONE kernel-language program, and run it.

The whole graph becomes one program, so the builder's dependency tracking lets engines and DMA
queues of different ops overlap (op 2 starts on the tiles op 1 has stored). Contract:

- placeholders are tensors of a movable dtype (``bridge.dtypes``); each becomes an HBM input
  holding the tensor's storage span as is, viewed with the tensor's own strides, so a
  non-contiguous input (a transposed weight) is read through its layout, like on a device;
- every ``call_function`` node must pass ``check_support`` (else ``Unsupported`` propagates, or
  wraps whatever the lowering raised as ``Reason.LOWERING_FAILED``); ``operator.getitem`` picks
  from a multi-output node;
- each node's metadata (``node.meta['val']``: FakeTensors from AOTAutograd/dynamo, or real
  tensors) gives torch's shapes and dtypes; lowerings must produce exactly those shapes;
- outputs are contiguous HBM tensors (a view, an input or a repeated value is copied out; a
  permuted view of a whole tensor leaves as its storage, viewed on the host); the
  run gives them back as torch tensors with torch's strides.

``lower_graph`` builds once (no data); ``LoweredGraph.run`` fills the inputs and simulates, as
often as wanted, on the config it was built for. ``get_attr`` nodes (tensor constants captured
in the graph) become inputs filled from the constant on every run.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import fx
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils import _pytree as pytree

from hwsim import lang
from hwsim.bridge import lowerings as _lowerings  # noqa: F401  (fills the registry)
from hwsim.bridge.context import IndexCheck, TilingOptions
from hwsim.bridge.dtypes import check_int64_range, numpy_to_tensor
from hwsim.bridge.errors import BridgeError
from hwsim.bridge.graph_bindings import (
    InputBinding,
    OutputBinding,
    bind_constant,
    bind_placeholder,
    call_input_bytes,
    is_dense,
    mark_unread,
    prepared_bindings,
)
from hwsim.bridge.graph_builder import GraphBuilder
from hwsim.bridge.lnc import CoreLowering, LncPlan, SplitEscape, resolve_lnc
from hwsim.bridge.lowerings import flash_attention as _flash_attention  # noqa: F401  (its kind)
from hwsim.bridge.memory_plan import HbmArena, MemoryStats, memory_stats
from hwsim.bridge.op_times import OpTime, op_times
from hwsim.bridge.passes import PassSelection, run_pipeline
from hwsim.bridge.passes.floor import Floor, graph_floor
from hwsim.bridge.precision import Precision
from hwsim.bridge.runtime import RuntimeOverhead, runtime_overhead
from hwsim.config import HardwareConfig, load_config
from hwsim.machine.simulator import RunResult, run
from hwsim.program import Program


@dataclass
class GraphRun:
    """One simulation of a lowered graph: outputs (torch, in the graph's output structure; None
    for a timing-only run), the simulator's result (trace, summary) and each node's time."""

    outputs: Any
    result: RunResult
    op_times: dict[str, OpTime]


@dataclass
class LoweredGraph:
    """A graph lowered to a program for one config; ``run`` simulates it on given inputs."""

    program: Program
    config: HardwareConfig
    inputs: list[InputBinding]
    outputs: list[OutputBinding]
    out_spec: pytree.TreeSpec
    nodes: dict[str, str] = field(default_factory=dict)  # lowered node name -> op name
    sbuf_peak_bytes: int = 0
    psum_peak_bytes: int = 0
    index_checks: list[IndexCheck] = field(default_factory=list)
    memory: MemoryStats | None = None
    #: What the pass pipeline did (``bridge.passes``) and the graph's roofline floor.
    pipeline: dict[str, Any] = field(default_factory=dict)
    floor: Floor | None = None
    #: Lowered node name -> the dtype it computed in under auto-cast (``auto_cast``).
    compute_dtypes: dict[str, str] = field(default_factory=dict)
    #: Bytes of each per-call input (graph inputs other than the model's constants, which
    #: stay in HBM between calls): what the runtime copies in before a call (``runtime``).
    call_input_bytes: list[int] = field(default_factory=list)
    #: One run at a time: ``bind`` fills the program's inputs, and ranks of a torch.distributed
    #: group on threads share a lowered graph (the lowering cache) but not its inputs.
    run_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    #: The torch.distributed process group of each collective instruction, in the order the
    #: collective engine runs them (``bridge.lowerings.collectives``); empty for most graphs.
    collective_groups: list[Any] = field(default_factory=list, repr=False, compare=False)

    def runtime_overhead(self) -> RuntimeOverhead:
        """One call's cost outside the program: launch, inputs in, outputs out."""
        outputs = [
            math.prod(o.shape) * o.dtype.itemsize
            for o in self.outputs
            if o.name is not None and o.dtype is not None
        ]
        return runtime_overhead(self.config, self.call_input_bytes, outputs)

    def run(
        self,
        args: Sequence[torch.Tensor],
        *,
        numerics: bool = True,
        race_check: bool = False,
        initcheck: bool | None = None,
        fabric: Any = None,
        core_id: int | None = None,
        hbm_held: Sequence[tuple[int, int]] = (),
    ) -> GraphRun:
        """Simulate on ``args``; ``initcheck`` as in ``hwsim.machine.simulator.run`` (None:
        the ``HWSIM_INITCHECK`` environment variable decides). A graph with collectives runs
        as physical core ``core_id`` and meets the other ranks through ``fabric``.
        ``hbm_held``: (tick, bytes) the rank's collectives running beside the graph take of
        its HBM stack (``RankClock.hbm_held``)."""
        placement: dict[str, Any] = {}
        if fabric is not None:  # the rank's logical core: its physical cores from core_id
            if core_id is None:
                raise BridgeError("a run with a collective fabric needs its rank's core_id")
            cores = len(self.program.cores)
            placement = {"fabric": fabric, "core_ids": [core_id + k for k in range(cores)]}
        with self.run_lock:
            self.bind(args)
            _warm_up()
            result = run(
                self.program,
                self.config,
                numerics=numerics,
                race_check=race_check,
                initcheck=initcheck,
                inputs_read_in_place=self._input_names,
                hbm_held=[(0, tick, nbytes) for tick, nbytes in hbm_held],
                **placement,
            )
            for binding in self.inputs:  # views of the callers' tensors (``storage_view``)
                if binding.prepared is None and binding.constant is None:
                    self.program.hbm[binding.name].values = None
        if self.floor is not None:  # the trace summary shows the floor and how far above it
            summary = result.summary
            floor_ns = self.floor.floor_ns
            summary.floor_ns = floor_ns
            summary.floor_binding = self.floor.binding
            summary.over_floor = summary.total_ns / floor_ns if floor_ns else None
        outputs = None
        if numerics:  # timing-only runs compute no values
            leaves = [self._output(o, result) for o in self.outputs]
            outputs = pytree.tree_unflatten(leaves, self.out_spec)
        return GraphRun(outputs, result, op_times(result.trace))

    @property
    def _input_names(self) -> frozenset[str]:
        """The program's HBM inputs. The run reads their values where ``bind`` put them (views
        of the callers' tensors, prepared weights) instead of copying them into fresh memory,
        which took a BERT-base first call a second of page faults: a lowered graph is
        functional (AOTAutograd removed its mutations), so its program never writes an input,
        and the simulator makes them read-only so that a write would raise."""
        return frozenset(b.name for b in self.inputs)

    def bind(self, args: Sequence[torch.Tensor], *, copy: bool = False) -> None:
        """Fill the program's HBM inputs with ``args`` (each input's storage span, viewed with
        the lowered strides) and check index inputs, without simulating. ``copy``: the program
        keeps copies (a saved program must not alias the model's parameters)."""
        for binding in self.inputs:
            tensor = args[binding.index] if binding.constant is None else binding.constant
            if tuple(tensor.shape) != binding.shape or tuple(tensor.stride()) != binding.strides:
                raise BridgeError(
                    f"input {binding.name}: shape {tuple(tensor.shape)} strides "
                    f"{tuple(tensor.stride())} differ from the lowered {binding.shape} "
                    f"{binding.strides}; lower the graph again for these inputs"
                )
            if not binding.read or tensor.numel() == 0:  # values unread: zeros stand in
                zeros = np.zeros(binding.span, binding.hw_dtype.numpy)
                self.program.hbm[binding.name].values = zeros
                continue
            if tensor.dtype == torch.int64:  # only the viewed elements must fit int32
                check_int64_range(tensor, binding.name)
            values = binding.values(tensor)
            fresh = binding.prepared is not None
            self.program.hbm[binding.name].values = values.copy() if copy and not fresh else values
        self._check_indices(args)

    def _check_indices(self, args: Sequence[torch.Tensor]) -> None:
        """Inputs used as indices must be in range, as torch checks (``IndexCheck``)."""
        by_name = {b.name: b for b in self.inputs}
        for check in self.index_checks:
            binding = by_name[check.input]
            source = args[binding.index] if binding.constant is None else binding.constant
            tensor = source.detach()
            view = torch.as_strided(
                tensor, check.shape, check.strides, tensor.storage_offset() + check.offset
            )
            bad = (view < check.low) | (view >= check.high)
            if bool(bad.any()):
                value = int(view[bad][0])
                raise IndexError(
                    f"{check.what}: index {value} in input {check.input} is out of range "
                    f"[{check.low}, {check.high})"
                )

    @staticmethod
    def _output(binding: OutputBinding, result: RunResult) -> Any:
        if binding.name is None:
            return binding.constant
        assert binding.dtype is not None
        values = result.outputs[binding.name][: math.prod(binding.shape)]
        if binding.storage_order:
            flat = numpy_to_tensor(values, binding.dtype).reshape(-1)
            return flat.as_strided(binding.shape, binding.strides)
        tensor = numpy_to_tensor(values, binding.dtype).reshape(binding.shape)
        if not is_dense(binding.shape, binding.strides):  # e.g. an expanded view: keep it dense
            return tensor
        strided = torch.empty_strided(binding.shape, binding.strides, dtype=binding.dtype)
        return strided.copy_(tensor)


_WARM = False


def _warm_up() -> None:
    """JIT-compile (or load) the numerics kernels once per process, as hwsim.lang does."""
    global _WARM
    if not _WARM:
        from hwsim.kernels import warm_up

        warm_up()
        _WARM = True


#: Programs lowered in this process so far (``programs_lowered``).
_PROGRAMS_LOWERED = [0]


def programs_lowered() -> int:
    """How many programs ``lower_graph`` has built in this process: a new shape that makes a
    front door lower again counts (``bridge.generation`` reports its decode steps' recompiles
    from it)."""
    return _PROGRAMS_LOWERED[0]


def lower_graph(
    graph: fx.GraphModule | fx.Graph,
    example_inputs: Sequence[Any],
    *,
    config: str | HardwareConfig = "trn2",
    precision: Precision | None = None,
    options: TilingOptions | None = None,
    name: str = "graph",
    memory_plan: bool = True,
    passes: Any = None,
    constants: Iterable[str] = (),
) -> LoweredGraph:
    """Lower ``graph`` (placeholders in ``example_inputs`` order; tensors, real or fake).

    ``memory_plan``: place intermediate values in one HBM arena by lifetime
    (``bridge.memory_plan``); off, every value keeps its own bytes (to measure the plan).
    ``passes``: which graph passes run first (``bridge.passes.PassSelection.parse``: None is
    all of them); they rewrite a copy, ``graph`` itself is left as it is. ``constants``:
    names of the placeholders that hold the model's frozen parameters and buffers, which the
    compiler may prepare (``passes.prepare_constants``)."""
    hw = load_config(config) if isinstance(config, str) else config
    precision = precision or Precision()
    source_graph = graph.graph if isinstance(graph, fx.GraphModule) else graph
    constants = tuple(constants)  # read three times: floor, pipeline, the call's inputs
    floor = graph_floor(source_graph, hw, precision, frozenset(constants))
    selection = PassSelection.parse(passes)
    graph, log = run_pipeline(graph, selection, constants=constants)
    fx_graph = graph.graph
    placeholders = [n for n in fx_graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise BridgeError(
            f"{name}: {len(placeholders)} placeholders but {len(example_inputs)} example inputs"
        )
    pairs = zip(placeholders, example_inputs, strict=True)
    bindings = [bind_placeholder(i, n, x) for i, (n, x) in enumerate(pairs)]
    with unset_fake_temporarily():  # constants are real tensors, even under dynamo's tracing
        for node in fx_graph.nodes:
            if node.op == "get_attr":
                bindings.append(bind_constant(graph, node))
    bindings += prepared_bindings(fx_graph, bindings, precision, hw, options or TilingOptions())
    tiling = options or TilingOptions()
    plan = LncPlan(_graph_lnc(fx_graph, tiling, hw), tiling.lnc_min_split_bytes)
    residency = "residency" in selection  # lowering-time passes (``bridge.residency``)
    broadcast_rows = "row_broadcast" in selection
    specs = [lang.TensorSpec((b.span,), b.hw_dtype) for b in bindings]

    def lower_for(plan: LncPlan) -> tuple[LncPlan, GraphBuilder, HbmArena | None, Any]:
        """The graph lowered for ``plan``'s cores (again with a node on core 0 after each
        ``SplitEscape``): (the plan as it ended, core 0's builder and arena, the build whose
        program is every core's)."""
        while True:
            builds: list[tuple[GraphBuilder, HbmArena | None, Any]] = []
            try:
                for core in range(plan.cores):  # one build per physical core (``bridge.lnc``)
                    arena = HbmArena() if memory_plan else None
                    builder = GraphBuilder(
                        fx_graph,
                        bindings,
                        precision,
                        options,
                        arena,
                        residency=residency,
                        broadcast_rows=broadcast_rows,
                        lnc=CoreLowering(core, plan) if plan.cores > 1 else None,
                    )
                    kernel = builder.kernel(name)
                    # hwsim's own lowering of a graph, not a user's loop: no watchdog on its length
                    unbounded = lang.TraceLimits.unbounded()
                    built = kernel.build(*specs, config=hw, trace_limits=unbounded)
                    builds.append((builder, arena, built))
            except SplitEscape as escaped:  # that node runs on core 0: lower again
                plan.restart(escaped)
                continue
            if plan.cores > 1 and not plan.split_nodes:  # every candidate escaped: one core's
                plan = LncPlan(1, plan.min_split_bytes, plan.unsplit, plan.unsplit_kinds)
                continue
            lowering, arena, built = builds[0]
            if plan.cores > 1:
                built = _merged(built, [b for _, _, b in builds])
            return plan, lowering, arena, built

    plan, lowering, arena, built = lower_for(plan)
    if plan.cores > 1 and tiling.lnc is None:  # the cores were not asked for: keep the faster
        plan, lowering, arena, built = _faster_of(
            (plan, lowering, arena, built), lower_for(LncPlan(1, plan.min_split_bytes)), hw
        )
    bindings = mark_unread(bindings, built.program)
    memory = memory_stats(built.program, built.sbuf_peak_bytes, built.psum_peak_bytes, arena)
    built.program.meta["memory"] = memory.to_dict()
    built.program.meta["floor"] = floor.to_dict()
    for step in log.steps:
        if step["pass"] == "residency":
            step.update(lowering.residency)
    for step in log.steps:
        if step["pass"] == "row_broadcast":
            step["rows_broadcast"] = lowering.rows_broadcast
    pipeline = log.to_dict() | {"fusion": lowering.fusion_notes, "residency": lowering.residency}
    pipeline["lnc"] = plan.to_dict()
    _PROGRAMS_LOWERED[0] += 1
    return LoweredGraph(
        built.program,
        hw,
        bindings,
        lowering.output_bindings,
        lowering.out_spec,
        lowering.lowered,
        built.sbuf_peak_bytes,
        built.psum_peak_bytes,
        lowering.index_checks,
        memory,
        pipeline,
        floor,
        lowering.compute_dtypes,
        call_input_bytes(bindings, constants),
        collective_groups=lowering.collective_groups,
    )


def _graph_lnc(graph: fx.Graph, tiling: TilingOptions, config: HardwareConfig) -> int:
    """Physical cores the graph is lowered for: the option (``resolve_lnc``; left at its
    default, at most the cores of the torch.distributed rank lowering it), but one for a graph
    with collectives (a rank's graph meets the others on one core) and for one no node of which
    splits (the other cores would idle: the program is one core's)."""
    from hwsim.bridge.distributed.clock import current_clock

    lnc = resolve_lnc(tiling.lnc, config)
    clock = current_clock()
    if clock is not None and tiling.lnc is None:
        lnc = min(lnc, clock.cores_per_rank)
    plan = LncPlan(lnc, tiling.lnc_min_split_bytes)
    calls = [n for n in graph.nodes if n.op == "call_function"]
    if any("_c10d_functional" in str(n.target) for n in calls):
        return 1
    return lnc if any(plan.splits(n) for n in calls) else 1  # nothing to split: one core


def _faster_of(
    split: tuple[LncPlan, Any, Any, Any], one: tuple[LncPlan, Any, Any, Any], config: HardwareConfig
) -> tuple[LncPlan, Any, Any, Any]:
    """Of a graph lowered for the logical core's cores and for one, the lowering whose program
    runs faster (timing-only, on ``config``); one core's on a tie. The compiler decides how a
    graph uses the cores of an LNC; a small graph that would lose more at the barriers and to
    the split's shared operands than the second core gains keeps to one, as a compiler given
    both cores would not produce a program slower than one core's (an assumption: how
    neuronx-cc decides is not published). Both times go to the pipeline log
    (``LncPlan.timed``)."""
    from hwsim.machine.simulator import run

    def timed(lowered: tuple[LncPlan, Any, Any, Any]) -> tuple[int, float]:
        """(end tick, its ns) of the lowering's program."""
        result = run(lowered[3].program, config, numerics=False, initcheck=False, summarize=False)
        return int(result.trace.end_tick), float(result.trace.ticks_to_ns(result.trace.end_tick))

    (split_ticks, split_ns), (one_ticks, one_ns) = timed(split), timed(one)
    kept = split if split_ticks < one_ticks else one
    kept[0].timed = {f"lnc{split[0].cores}_ns": split_ns, "lnc1_ns": one_ns}
    return kept


def _merged(first: Any, builds: list[Any]) -> Any:
    """Core 0's build with the program of every core's, all HBM tensors shared (each core's
    build declares the same ones), and SBUF/PSUM peaks the largest of any core's."""
    from hwsim.chip import merge_programs

    shared = set(first.program.hbm)
    program = merge_programs([b.program for b in builds], shared)
    return dataclasses.replace(
        first,
        program=program,
        sbuf_peak_bytes=max(b.sbuf_peak_bytes for b in builds),
        psum_peak_bytes=max(b.psum_peak_bytes for b in builds),
    )
