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

import ctypes
import dataclasses
import inspect
import math
import operator
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
from hwsim.bridge.auto_cast import compute_dtype, exact_origin
from hwsim.bridge.context import IndexCheck, LoweringContext, TensorMeta, TilingOptions
from hwsim.bridge.dtypes import (
    MOVABLE_DTYPES,
    check_int64_range,
    numpy_to_tensor,
    tensor_to_numpy,
    to_hw,
)
from hwsim.bridge.errors import BridgeError, Reason, Unsupported
from hwsim.bridge.lnc import CoreLowering, LncPlan, SplitEscape, resolve_lnc
from hwsim.bridge.lowerings import flash_attention as _flash_attention  # noqa: F401  (its kind)
from hwsim.bridge.memory_plan import HbmArena, Lifetimes, MemoryStats, memory_stats
from hwsim.bridge.op_times import OpTime, op_times
from hwsim.bridge.passes import PassSelection, run_pipeline
from hwsim.bridge.passes.floor import Floor, graph_floor
from hwsim.bridge.passes.fused_kinds import fused_lowering
from hwsim.bridge.passes.fusion import FusedKernel
from hwsim.bridge.passes.prepare_constants import PreparedLayout, PreparedWeight
from hwsim.bridge.precision import Precision
from hwsim.bridge.registry import OpCall, check_support
from hwsim.bridge.residency.broadcast import input_rows
from hwsim.bridge.runtime import RuntimeOverhead, runtime_overhead
from hwsim.bridge.tiling import copy_tiles
from hwsim.bridge.tiling.weights import block_columns, weight_block_bytes
from hwsim.bridge.values import HbmValue, PreparedMatrix
from hwsim.config import HardwareConfig, load_config
from hwsim.dtypes import DType
from hwsim.dtypes import cast as hw_cast
from hwsim.dtypes import dtype as hw_dtype
from hwsim.errors import HwsimError
from hwsim.isa.ap import MemorySpace
from hwsim.library.common import limits
from hwsim.machine.simulator import RunResult, run
from hwsim.program import Program


@dataclass(frozen=True)
class InputBinding:
    """Placeholder ``index`` is HBM input ``name``: its storage span, viewed with ``strides``.
    A tensor constant of the graph (a ``get_attr`` node) is an input filled from ``constant``
    on every run (index -1)."""

    name: str
    index: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: torch.dtype
    constant: torch.Tensor | None = None
    #: Whether the program reads the input's values. An input only its metadata is used of
    #: (``full_like(x, 1)``, ``zeros_like``) is neither range-checked nor copied in: its bytes
    #: may be anything (``torch.empty``), and no check may read memory nothing wrote.
    read: bool = True
    #: A constant prepared at compile time (``passes.prepare_constants``): the HBM input holds
    #: ``prepared.arrange`` of placeholder ``index`` (``shape``/``strides`` are the
    #: placeholder's), cast to ``prepared.dtype``.
    prepared: PreparedLayout | None = None

    @property
    def span(self) -> int:
        """Elements of the HBM input."""
        if self.prepared is not None:
            return self.prepared.elements
        if math.prod(self.shape) == 0:
            return 1
        return 1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides, strict=True))

    @property
    def hw_dtype(self) -> DType:
        """The dtype of the HBM input."""
        return hw_dtype(self.prepared.dtype) if self.prepared is not None else to_hw(self.dtype)

    def values(self, tensor: torch.Tensor) -> np.ndarray:
        """The HBM input's elements for ``tensor`` (the placeholder's value), a new array when
        prepared, else a view of its storage span."""
        if self.prepared is not None:
            arranged = self.prepared.arrange(tensor).to(torch.float32).numpy()
            return hw_cast(arranged.reshape(-1), self.hw_dtype)
        offset = tensor.storage_offset()
        span = torch.as_strided(tensor.detach(), (self.span,), (1,), offset)
        return storage_view(span)


def storage_view(span: torch.Tensor) -> np.ndarray:
    """A contiguous CPU tensor's elements as numpy in their device representation, sharing
    its memory where the dtype is native, without ``Tensor.numpy()``: that marks the tensor's
    storage as never resizable again, and FSDP2 frees (resizes to 0) the storage of the
    unsharded parameters a compiled block reads. The view does not keep the memory alive:
    ``LoweredGraph.run`` drops it after the run."""
    if span.dtype in (torch.bool, torch.int64) or span.numel() == 0:  # converted: a copy
        return tensor_to_numpy(span.clone(), check=False)
    like = tensor_to_numpy(torch.empty(0, dtype=span.dtype), check=False).dtype
    buffer = (ctypes.c_char * (span.numel() * span.element_size())).from_address(span.data_ptr())
    return np.frombuffer(memoryview(buffer).cast("B"), dtype=like)


@dataclass(frozen=True)
class OutputBinding:
    """A graph output: HBM tensor ``name`` (None for a non-tensor ``constant``)."""

    name: str | None
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    dtype: torch.dtype | None = None
    constant: Any = None
    #: The tensor holds the output's storage as it lies (a permuted view of a whole tensor, such
    #: as a weight's transpose saved for backward): read back flat and viewed with ``strides``.
    storage_order: bool = False


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
    ) -> GraphRun:
        """Simulate on ``args``; ``initcheck`` as in ``hwsim.machine.simulator.run`` (None:
        the ``HWSIM_INITCHECK`` environment variable decides). A graph with collectives runs
        as physical core ``core_id`` and meets the other ranks through ``fabric``."""
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
        if not _dense(binding.shape, binding.strides):  # e.g. an expanded view: keep it dense
            return tensor
        strided = torch.empty_strided(binding.shape, binding.strides, dtype=binding.dtype)
        return strided.copy_(tensor)


def _dense(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether strides lay ``shape`` out densely with no overlap (a permuted contiguous)."""
    expected = 1
    for n, s in sorted(zip(shape, strides, strict=True), key=lambda d: d[1]):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


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
    bindings = [_bind(i, n, x) for i, (n, x) in enumerate(pairs)]
    with unset_fake_temporarily():  # constants are real tensors, even under dynamo's tracing
        for node in fx_graph.nodes:
            if node.op == "get_attr":
                bindings.append(_bind_constant(graph, node))
    bindings += _prepared_bindings(fx_graph, bindings, precision, hw, options or TilingOptions())
    tiling = options or TilingOptions()
    plan = LncPlan(_graph_lnc(fx_graph, tiling, hw), tiling.lnc_min_split_bytes)
    residency = "residency" in selection  # lowering-time passes (``bridge.residency``)
    broadcast_rows = "row_broadcast" in selection
    specs = [lang.TensorSpec((b.span,), b.hw_dtype) for b in bindings]
    while True:
        builds: list[tuple[_GraphBuilder, HbmArena | None, Any]] = []
        try:
            for core in range(plan.cores):  # one build per physical core (``bridge.lnc``)
                arena = HbmArena() if memory_plan else None
                builder = _GraphBuilder(
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
        break
    lowering, arena, built = builds[0]
    if plan.cores > 1:
        built = _merged(built, [b for _, _, b in builds])
    bindings = _mark_unread(bindings, built.program)
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
        _call_input_bytes(bindings, constants),
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


def _call_input_bytes(bindings: list[InputBinding], constants: Iterable[str]) -> list[int]:
    """Bytes of the graph inputs a call copies in: placeholders that are not constants."""
    frozen = set(constants)
    return [
        math.prod(b.shape) * b.dtype.itemsize
        for b in bindings
        if b.index >= 0 and b.constant is None and b.prepared is None and b.name not in frozen
    ]


def _mark_unread(bindings: list[InputBinding], program: Program) -> list[InputBinding]:
    """The bindings, each knowing whether an instruction of ``program`` reads its input."""
    read: set[str] = set()
    for core in program.cores:
        for _engine, _pc, instruction in core.instructions():
            read.update(ap.tensor for ap in instruction.reads() if ap.memory is MemorySpace.HBM)
    return [b if b.name in read else dataclasses.replace(b, read=False) for b in bindings]


def _prepared_bindings(
    graph: fx.Graph,
    bindings: list[InputBinding],
    precision: Precision,
    config: HardwareConfig,
    options: TilingOptions,
) -> list[InputBinding]:
    """An HBM input per distinct (constant, layout) the graph's ``PreparedWeight`` nodes read,
    in the dtype auto-cast gives the matmul; each node learns its input's name
    (``meta['prepared']``)."""
    by_name = {b.name: b for b in bindings}
    lim = limits(config)
    block_bytes = weight_block_bytes(lim, options)
    made: dict[tuple[str, bool], InputBinding] = {}
    for node in graph.nodes:
        if not isinstance(node.target, PreparedWeight):
            continue
        source = by_name[node.args[0].name]
        k, n = node.meta["val"].shape
        transposed = node.target.transposed
        key = (source.name, transposed)
        if key not in made:
            dtype = precision.matmul_dtype(to_hw(source.dtype))
            block = block_columns(int(k), int(n), dtype.itemsize, lim, block_bytes)
            layout = PreparedLayout(int(k), int(n), lim.tile_k, block, transposed, dtype.name)
            name = f"{source.name}__prepared{'_t' if transposed else ''}"
            made[key] = dataclasses.replace(source, name=name, prepared=layout)
        node.meta["prepared"] = made[key].name
    return list(made.values())


def _bind(index: int, node: fx.Node, example: Any) -> InputBinding:
    if not isinstance(example, torch.Tensor):
        raise Unsupported(
            "placeholder", Reason.SHAPE, f"input {node.name} is {type(example).__name__}"
        )
    if example.dtype not in MOVABLE_DTYPES:
        raise Unsupported("placeholder", Reason.DTYPE, f"input {node.name} is {example.dtype}")
    if any(not isinstance(n, int) for n in (*example.shape, *example.stride())):
        raise Unsupported("placeholder", Reason.SHAPE, f"input {node.name} has symbolic sizes")
    return InputBinding(
        node.name, index, tuple(example.shape), tuple(example.stride()), example.dtype
    )


def _bind_constant(graph: fx.GraphModule | fx.Graph, node: fx.Node) -> InputBinding:
    """A tensor constant held by the GraphModule (``torch.tensor(...)`` in a traced function)."""
    owner = graph if isinstance(graph, fx.GraphModule) else None
    value: Any = owner
    for part in str(node.target).split("."):
        value = getattr(value, part, None)
    if not isinstance(value, torch.Tensor):
        raise Unsupported(
            "get_attr", Reason.SHAPE, f"constant {node.target} is not a tensor of a GraphModule"
        )
    binding = _bind(-1, node, value)
    return InputBinding(
        binding.name, -1, binding.shape, binding.strides, binding.dtype, value.detach().clone()
    )


def _meta(value: Any) -> Any:
    """TensorMeta of a tensor (or a tuple of them) from node metadata."""
    if isinstance(value, torch.Tensor):
        return TensorMeta(
            tuple(value.shape), to_hw(value.dtype), tuple(value.stride()), value.dtype
        )
    if isinstance(value, (tuple, list)):
        return tuple(_meta(v) for v in value)
    return value


class _GraphBuilder:
    """Holds what the kernel body needs and what it leaves behind (outputs, lowered nodes)."""

    def __init__(
        self,
        graph: fx.Graph,
        bindings: list[InputBinding],
        precision: Precision,
        options: TilingOptions | None,
        arena: HbmArena | None = None,
        *,
        residency: bool = False,
        broadcast_rows: bool = False,
        lnc: CoreLowering | None = None,
    ) -> None:
        self.graph = graph
        self.lnc = lnc
        self.arena = arena
        self.use_residency = residency
        self.broadcast_rows = broadcast_rows
        self.rows_broadcast = 0  # partition broadcasts done on chip (``residency.broadcast``)
        self.residency: dict[str, Any] = {}  # what residency did (``ResidencyStats``)
        self.bindings = bindings
        self.precision = precision
        self.options = options or TilingOptions()
        self.output_bindings: list[OutputBinding] = []
        self.out_spec: pytree.TreeSpec = pytree.tree_flatten(None)[1]
        self.lowered: dict[str, str] = {}
        self.index_checks: list[IndexCheck] = []
        self.collective_groups: list[Any] = []
        self.fusion_notes: list[dict[str, Any]] = []
        self.compute_dtypes: dict[str, str] = {}

    def kernel(self, name: str) -> lang.Kernel:
        """The kernel-language kernel whose parameters are the graph's inputs, by name."""

        def body(**tiles: Any) -> list[Any]:
            return self._body(tiles)

        parameters = [
            inspect.Parameter(b.name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            for b in self.bindings
        ]
        body.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        body.__name__ = name
        return lang.kernel(body)

    def _body(self, tiles: dict[str, Any]) -> list[Any]:
        ctx = LoweringContext(
            self.precision,
            self.options,
            self.arena,
            residency=self.use_residency,
            broadcast_rows=self.broadcast_rows,
            weight_dtypes=[hw_dtype(b.prepared.dtype) for b in self.bindings if b.prepared],
            input_row_widths=input_rows(b.shape for b in self.bindings if not b.prepared),
        )
        self.index_checks = ctx.index_checks
        self.collective_groups = ctx.collective_groups
        lnc = self.lnc or CoreLowering(0, LncPlan(1, 0))
        ctx.split = lnc.split
        lnc.queues = ctx.queues
        self.fusion_notes = ctx.fusion_notes
        env: dict[fx.Node, Any] = {}
        inputs = ctx.input_names
        by_name = {b.name: b for b in self.bindings}
        lifetimes = Lifetimes(self.graph)
        for node in self.graph.nodes:
            if node.op in ("placeholder", "get_attr"):
                b = by_name[node.name]
                env[node] = HbmValue(tiles[node.name], b.shape, b.strides, 0)
                inputs.add(tiles[node.name].name)
            elif isinstance(node.target, PreparedWeight):  # a weight prepared at compile time
                env[node] = self._prepared(tiles, node)
                inputs.add(env[node].tile.name)
            elif node.op == "call_function":
                if isinstance(node.target, FusedKernel):
                    ctx.needed_after = lifetimes.needed_after(node, env)
                args = [env[a] for a in node.all_input_nodes]
                with lnc.node(node, args, inputs):
                    env[node] = self._lower(ctx, node, env, lifetimes.escapes(node))
                ctx.needed_after = None
                ctx.release_all_but(lifetimes.live_tensors(node, env))
            elif node.op == "output":
                args = [env[a] for a in node.all_input_nodes]
                with lnc.node(node, args, inputs):  # the outputs' copies: on core 0
                    outputs = self._outputs(ctx, node, env, inputs)
                ctx.queues.finish()  # stores still deferred are emitted now
                if self.use_residency:
                    self.residency = ctx.queues.stats.to_dict()
                self.rows_broadcast = ctx.queues.rows_broadcast
                return outputs
            else:
                raise Unsupported(node.op, Reason.NO_LOWERING, f"{node.op} node {node.name}")
        raise BridgeError("graph has no output node")

    def _prepared(self, tiles: dict[str, Any], node: fx.Node) -> PreparedMatrix:
        binding = next(b for b in self.bindings if b.name == node.meta["prepared"])
        assert binding.prepared is not None
        return PreparedMatrix.over(tiles[binding.name], binding.prepared)

    def _lower(
        self, ctx: LoweringContext, node: fx.Node, env: dict[fx.Node, Any], escapes: bool
    ) -> Any:
        if node.target is operator.getitem:
            source, index = node.args
            return env[source][index]  # type: ignore[index]
        if isinstance(node.target, FusedKernel):  # a group of a fusion pass, lowered by its kind
            lower_group = fused_lowering(node.target)
            outside = [env[a] if isinstance(a, fx.Node) else a for a in node.args]
            ctx.casts_tensore = not any(exact_origin(m.origin) for m in node.target.members)
            try:
                fused = lower_group(ctx, node.target, outside, escapes)
            finally:
                ctx.casts_tensore = True
            _check_result(node, fused, node.meta.get("val"))
            for member in node.target.members:
                self.lowered[member.name] = str(member.target)
                self._note_dtype(member.name, member.target, member.val, member.origin)
            return fused
        meta = node.meta.get("val")
        args_meta, kwargs_meta = pytree.tree_map_only(
            fx.Node, lambda n: n.meta.get("val"), (node.args, node.kwargs)
        )
        call = OpCall(node.target, tuple(args_meta), dict(kwargs_meta), meta)
        lowering = check_support(call)
        args, kwargs = pytree.tree_map_only(fx.Node, lambda n: env[n], (node.args, node.kwargs))
        origin = node.meta.get("original_aten")
        ctx.casts_tensore = not exact_origin(origin)  # a one-hot/mask matmul keeps its dtype
        try:
            with ctx.node(node.name, _meta(meta), call, escapes=escapes):
                result = lowering.fn(ctx, *args, **kwargs)
        except Unsupported:
            raise
        except (HwsimError, ValueError, IndexError, TypeError, KeyError) as error:
            raise Unsupported(
                node.target, Reason.LOWERING_FAILED, f"node {node.name}: {error}"
            ) from error
        finally:
            ctx.casts_tensore = True
        _check_result(node, result, meta)
        self.lowered[node.name] = str(node.target)
        self._note_dtype(node.name, node.target, meta, origin)
        return result

    def _note_dtype(self, name: str, target: Any, value: Any, origin: Any = None) -> None:
        dtype = compute_dtype(self.precision, target, value, origin)
        if dtype:
            self.compute_dtypes[name] = dtype

    def _outputs(
        self, ctx: LoweringContext, node: fx.Node, env: dict[fx.Node, Any], inputs: set[str]
    ) -> list[Any]:
        leaves, self.out_spec = pytree.tree_flatten(node.args[0])
        tiles: list[Any] = []
        used = set(inputs)
        for i, leaf in enumerate(leaves):
            value = env[leaf] if isinstance(leaf, fx.Node) else leaf
            if not isinstance(value, HbmValue):
                self.output_bindings.append(OutputBinding(None, constant=value))
                continue
            meta = leaf.meta["val"]
            if value.numel == 0:  # nothing to compute or read back (its tensor is a placeholder)
                empty = torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype)
                self.output_bindings.append(OutputBinding(None, constant=empty))
                continue
            whole = value.is_contiguous() and value.offset == 0
            if not whole and _permuted_whole(value, tuple(meta.stride())):
                self._permuted_output(ctx, i, value, meta.dtype, used, tiles)
                continue
            if not whole or value.tile.name in used or value.numel != value.tile.shape[0]:
                with ctx.node(f"output{i}", None):
                    copy = ctx.new_value(value.shape, value.dtype)
                    copy_tiles(ctx, copy, value)
                value = copy
            used.add(value.tile.name)
            tiles.append(value.tile)
            self.output_bindings.append(
                OutputBinding(value.tile.name, value.shape, tuple(meta.stride()), meta.dtype)
            )
        return tiles

    def _permuted_output(
        self,
        ctx: LoweringContext,
        i: int,
        value: HbmValue,
        dtype: torch.dtype,
        used: set[str],
        tiles: list[Any],
    ) -> None:
        """A permuted view of a whole tensor leaves as its storage, viewed on the host with the
        view's strides: no transposing copy (4-byte descriptors, one per element). Its tensor is
        copied as it lies (whole-row descriptors) only when it is an input or already an output."""
        storage = HbmValue.contiguous(value.tile, (value.numel,))
        if value.tile.name in used:
            with ctx.node(f"output{i}", None):
                copy = ctx.new_value((value.numel,), value.dtype)
                copy_tiles(ctx, copy, storage)
            storage = copy
        used.add(storage.tile.name)
        tiles.append(storage.tile)
        self.output_bindings.append(
            OutputBinding(storage.tile.name, value.shape, value.strides, dtype, storage_order=True)
        )


def _permuted_whole(value: HbmValue, strides: tuple[int, ...]) -> bool:
    """Whether ``value`` is a permutation of a whole tensor (a transpose of a weight) that torch
    also strides that way: its bytes already lie in the output's storage order."""
    return (
        value.offset == 0
        and value.numel == value.tile.shape[0]
        and value.strides == strides
        and _dense(value.shape, value.strides)
    )


def _check_result(node: fx.Node, result: Any, meta: Any) -> None:
    """A lowering must return torch's shapes (a mismatch is a bug in the lowering)."""
    results = result if isinstance(result, (tuple, list)) else (result,)
    metas = meta if isinstance(meta, (tuple, list)) else (meta,)
    for got, want in zip(results, metas, strict=False):
        if (
            isinstance(got, HbmValue)
            and isinstance(want, torch.Tensor)
            and got.shape != tuple(want.shape)
        ):
            raise Unsupported(
                node.target,
                Reason.LOWERING_FAILED,
                f"node {node.name}: lowering returned shape {got.shape}, torch says "
                f"{tuple(want.shape)}",
            )
