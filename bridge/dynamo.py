"""``torch.compile(model, backend="hwsim", options={...})``: the compile front door.

Registered through the ``torch_dynamo_backends`` entry point (pyproject.toml), so ``import torch``
loads none of this; dynamo imports it when the backend is first looked up. The backend is built on
AOTAutograd with PyTorch's core-ATen decompositions, so the lowerings see Core ATen graphs
(nn.Linear arrives as ``permute`` + ``addmm``, SiLU as ``sigmoid`` * x). For each forward graph:

1. every node gets a support verdict (``bridge.partition.analyze``), recorded in the report;
2. unsupported nodes meet the fallback policy: 'error' raises ``FallbackError`` (dynamo reports it
   as BackendCompilerFailed with ours as the cause), 'warn' warns, 'cpu' just records;
3. a fully supported graph is lowered whole into one program; otherwise maximal supported
   subgraphs each become one program and the rest runs on the CPU between them;
4. a graph with symbolic sizes (dynamic shapes) is specialized to each concrete shape at run
   time and then goes through 1-3 once per shape (``_PerShape``).

Backward graphs (training: AOTAutograd's joint graph, partitioned) go through the same steps,
under the same fallback policy, so a CPU op in backward is counted and refused like any other.
Each graph has a kind, ``forward``, ``backward`` or ``optimizer`` (a graph dynamo traced from
``torch.optim`` code: a compiled ``optimizer.step()``), and its op records carry it as their
``phase`` (the report's per-phase sections and times). Options are in ``bridge.options``;
``last_report()`` returns the report of the latest compile.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx

from hwsim.bridge.report_records import CompileSeen, GraphRow

_GRAPH_IDS = itertools.count()
#: Names of the graphs dynamo hands the backend (each becomes AOTAutograd graphs ``graph<n>``).
_MODEL_IDS = itertools.count()
#: Every report made so far, oldest first; and the report of each options dict in use, so the
#: graphs of one torch.compile call (graph breaks give several) share one report.
_REPORTS: list[Any] = []
_BY_OPTIONS: dict[int, tuple[dict[str, Any], Any]] = {}


def last_report() -> Any:
    """The ``Report`` the latest ``torch.compile(..., backend='hwsim')`` fills as it runs.

    All graphs of one compiled model share a report when options were given (dynamo hands every
    graph the same options dict); without options each graph gets its own (see ``reports()``).
    Warns (``UserWarning``) when no graph has reached the backend (None is returned), and when
    dynamo compiled graphs for another backend after the latest one reached hwsim (the report
    returned is then not theirs).
    """
    import warnings

    if not _REPORTS:
        warnings.warn(
            "hwsim: no graph has reached the hwsim backend in this process, so there is no "
            "report: torch.compile compiles at the compiled model's first call, and dynamo "
            "hands a backend no graph for code without tensor ops or code it skips "
            "(torch._dynamo.explain(fn)(*args) says why)",
            stacklevel=2,
        )
        return None
    others = _graphs_elsewhere()
    if others > 0:
        warnings.warn(
            f"hwsim: dynamo compiled {others} graph(s) for another backend after the latest "
            "graph reached hwsim: this report is from that earlier hwsim compile, not theirs",
            stacklevel=2,
        )
    return _REPORTS[-1]


#: dynamo's count of compiled graphs (any backend) when the latest graph reached hwsim.
_GRAPHS_BEFORE = [0]


def _graphs_elsewhere() -> int:
    """Graphs dynamo compiled since the latest hwsim graph (which it counts once the backend
    returned), i.e. for other backends."""
    from torch._dynamo.utils import counters

    now = int(counters["stats"]["unique_graphs"])
    before = _GRAPHS_BEFORE[0]
    return now - (before + 1) if now >= before else now


def reports() -> list[Any]:
    """Every report made by the backend in this process, oldest first."""
    return list(_REPORTS)


def hwsim_backend(
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    options: dict[str, Any] | None = None,
    mode: str | None = None,
) -> Callable[..., Any]:
    """The dynamo backend (see module docstring). ``mode`` is not used by hwsim."""
    from hwsim.bridge.device_compile import keep_on_device, on_device

    outputs_on_device = on_device(gm, example_inputs)
    if outputs_on_device is not None:  # inputs on the hwsim device: bridge.device_compile
        compiled = hwsim_backend(gm, example_inputs, options=options, mode=mode)
        return keep_on_device(compiled, outputs_on_device)

    from hwsim.bridge.options import BridgeOptions

    known = _BY_OPTIONS.get(id(options))
    if options is not None and known is not None and known[0] is options:
        parsed = BridgeOptions.parse({**options, "report": known[1]})
    else:
        parsed = BridgeOptions.parse(options)
        if options is not None:
            _BY_OPTIONS[id(options)] = (options, parsed.report)
    _REPORTS[:] = [r for r in _REPORTS if r is not parsed.report]  # (by identity)
    _REPORTS.append(parsed.report)  # the latest is the one being filled
    from hwsim.bridge.graph_break_guard import guarded, refuse_silent_graph_breaks

    with refuse_silent_graph_breaks(gm, parsed, "compiling"):
        compiled = _compile(gm, example_inputs, parsed)
    return guarded(compiled, gm, parsed)


def _compile(gm: fx.GraphModule, example_inputs: Sequence[Any], parsed: Any) -> Callable[..., Any]:
    """``hwsim_backend`` past its options: the graph through AOTAutograd to the simulator."""
    from torch._dynamo.backends.common import aot_autograd

    from hwsim.bridge.decompositions import decomposition_table

    for reason in _note_compile(parsed.report):
        _operator_left_on_cpu(reason, parsed)
    # An inference graph (no input needs a gradient) treats the model's parameters and buffers
    # as constants, as the Neuron compiler does a traced model's: they may be prepared at
    # compile time. A training graph's weights change every step.
    training = torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs
    )
    compiler = _Compiler(parsed, _graph_kind(gm), inference=not training)
    backend = aot_autograd(
        fw_compiler=compiler.forward,
        bw_compiler=compiler.backward,
        decompositions=decomposition_table(),
    )
    with _backward_compiled_now():
        compiled = backend(gm, example_inputs)
    if not parsed.check:
        return compiled
    from hwsim.bridge.eager_check import EagerChecked

    return EagerChecked(gm, compiled, f"model{next(_MODEL_IDS)}", parsed)


def _backward_compiled_now() -> Any:
    """On a rank of a "hwsim" process group, AOTAutograd compiles the backward graph with the
    forward instead of at the first backward call. Ranks on threads of one process share
    compiled code (dynamo's cache is per process), and AOTAutograd's lazy backward compile is
    not thread-safe: under DDP two ranks' first backward both compiled it and both stepped
    DDPOptimizer's per-bucket context back, which failed the step ("expected same # of fw and
    bw compiles, but found bucket -1") on some runs. Compiling it here runs under dynamo's
    compile lock."""
    import contextlib

    from hwsim.bridge.distributed.clock import current_clock

    if current_clock() is None:
        return contextlib.nullcontext()
    return torch._functorch.config.patch(force_non_lazy_backward_lowering=True)


#: dynamo's graph-break counter (reason -> count, process-wide) at the previous backend call:
#: the breaks met since then belong to the graph being compiled now.
_BREAKS_SEEN: dict[str, int] = {}


def _note_compile(report: Any) -> list[str]:
    """Record dynamo's compile id of this graph and the graph breaks met while tracing it (dynamo
    counts a break before it compiles the graph that ends there); returns their reasons."""
    from torch._dynamo.utils import counters
    from torch._guards import CompileContext

    _GRAPHS_BEFORE[0] = int(counters["stats"]["unique_graphs"])
    compile_id = CompileContext.current_compile_id()
    seen = None
    if compile_id is not None and compile_id.frame_id is not None:
        seen = (compile_id.frame_id, compile_id.frame_compile_id or 0)
    met = []
    breaks: dict[str, int] = {}
    for reason, count in counters["graph_break"].items():
        new = count - _BREAKS_SEEN.get(reason, 0)
        if new > 0:
            key = _short_reason(reason)
            breaks[key] = breaks.get(key, 0) + new
            met.append(reason)
        _BREAKS_SEEN[reason] = count
    report.add(CompileSeen(seen, breaks))
    return met


#: How dynamo names the ATen operator a graph break leaves to eager PyTorch (an op whose output
#: shape depends on the data, such as ``nonzero`` or ``unique``, unless dynamic output shapes are
#: captured): that op then runs on the CPU between two compiled graphs.
_BREAK_OPERATOR = re.compile(r"[Oo]perator `(aten\.[\w.]+)`")


#: A call dynamo could not put into the graph although tensors go into it (its debug context
#: lists the call's arguments): a quantized linear, whose packed weights are a ScriptObject, or
#: any other op dynamo cannot trace. It runs eagerly, on the CPU, between compiled graphs.
_BREAK_TENSOR_CALL = re.compile(r"call_function args:.*TensorVariable")


def _operator_left_on_cpu(reason: str, options: Any) -> None:
    """The fallback policy for an op a graph break runs on the CPU: it never reaches the backend
    as a node, so without this ``fallback='error'`` would let it through, and the report would
    not list it among the CPU ops under 'cpu' or 'warn'."""
    from hwsim.bridge.errors import Reason, Unsupported

    found = _BREAK_OPERATOR.search(reason)
    if found is not None:
        detail = (
            f"a graph break runs it on the CPU between compiled graphs ({_short_reason(reason)})"
            "; torch._dynamo.config.capture_dynamic_output_shape_ops = True traces it into the "
            "graph"
        )
        _left_on_cpu(options, Unsupported(found.group(1), Reason.DATA_DEPENDENCE, detail))
    elif _BREAK_TENSOR_CALL.search(reason):
        detail = (
            f"dynamo could not put this call into the graph ({_short_reason(reason)}; "
            f"{_debug_context(reason)}), so it runs on the CPU between compiled graphs. A "
            "quantized module (torch.ao quantize_dynamic) is such a call: its packed weights "
            "are a ScriptObject"
        )
        _left_on_cpu(
            options, Unsupported("a call with tensor arguments", Reason.NO_LOWERING, detail)
        )
    # else: a break around Python dynamo cannot trace (a print, ...): no tensor op in it


def _debug_context(reason: str) -> str:
    """Dynamo's "Developer debug context" line of a graph-break reason (the call's arguments)."""
    for line in reason.splitlines():
        if "debug context:" in line:
            return line.split("debug context:", 1)[1].strip()
    return "no debug context"


def _left_on_cpu(options: Any, refusal: Any) -> None:
    """Raise under 'error' (warn under 'warn'); else list the op among the report's CPU ops."""
    from hwsim.bridge.options import apply_fallback
    from hwsim.bridge.report import OpRecord

    apply_fallback(options, refusal)
    name = f"graph_break{len(options.report.ops)}"
    options.report.add(OpRecord(name, refusal.op, "cpu", refusal.reason.value, refusal.detail))


def _symbolic(value: Any) -> bool:
    """A SymInt, or a tensor with a symbolic size or stride (dynamo's dynamic shapes)."""
    if isinstance(value, torch.SymInt):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(n, torch.SymInt) for n in (*value.shape, *value.stride()))
    return False


class _PerShape:
    """A graph dynamo compiled with dynamic shapes (symbolic sizes): the simulator runs one
    program per concrete shape, so each new shape met at run time specializes the graph (a
    re-trace with the real sizes: every symbol becomes its value) and compiles it like a static
    graph, once. Its integer inputs (the symbols' values) are part of the key, except the ints
    it uses as values, not sizes (``bridge.host_ints``: a sliding-window KV cache's write
    count): those reach the program as 0-d tensors, and its int outputs are computed on the
    host, so one program serves every value. ``gm`` is rewritten for that, in place."""

    def __init__(
        self, compiler: _Compiler, gm: fx.GraphModule, name: str, kind: str = "forward"
    ) -> None:
        from hwsim.bridge.host_ints import value_ints

        self.compiler = compiler
        self.values = value_ints(gm)
        self.gm = self.values.rewrite(gm) if self.values else gm
        self.name = name
        self.kind = kind
        self.runners: dict[tuple[Any, ...], Callable[..., Any]] = {}

    def __call__(self, *args: Any) -> Any:
        from hwsim.bridge.compiled import layout_key

        values = self.values.inputs
        key = layout_key([None if i in values else a for i, a in enumerate(args)])
        operands, int_outputs = self.values.call(args) if self.values else ([], {})
        full = [*args, *operands]
        runner = self.runners.get(key)
        tensors = [a for a in full if isinstance(a, torch.Tensor)]
        if runner is None:
            static = _specialize(self.gm, full)
            sizes = ",".join(
                str(a) for i, a in enumerate(args) if isinstance(a, int) and i not in values
            )
            name = f"{self.name}.s{len(self.runners)}"
            kind = f"{self.kind} (dynamic, specialized to {sizes or 'these shapes'})"
            runner = self.runners[key] = self.compiler.static(static, tensors, name, kind)
        outputs = runner(*tensors)
        if not int_outputs:
            return outputs
        patched = list(outputs)
        for position, value in int_outputs.items():
            patched[position] = value
        return type(outputs)(patched) if isinstance(outputs, tuple) else patched


def _specialize(gm: fx.GraphModule, args: Sequence[Any]) -> fx.GraphModule:
    """``gm`` re-traced with static shapes for ``args``: tensors stay inputs, everything else
    (the symbols' integer values) becomes a constant."""
    from torch.fx.experimental.proxy_tensor import make_fx

    tensor_at = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

    def static(*tensors: torch.Tensor) -> Any:
        full = list(args)
        for i, t in zip(tensor_at, tensors, strict=True):
            full[i] = t
        return gm(*full)

    with torch.no_grad():
        return make_fx(static, tracing_mode="fake")(*[args[i] for i in tensor_at])


def _constants(gm: fx.GraphModule) -> frozenset[str]:
    """Placeholders of AOTAutograd's graph that hold module parameters and buffers: the inputs
    dynamo marks static (``fw_metadata.static_input_indices``)."""
    from torch._guards import TracingContext

    context = TracingContext.try_get()
    metadata = getattr(context, "fw_metadata", None)
    static = getattr(metadata, "static_input_indices", None) or ()
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return frozenset(placeholders[i] for i in static if i < len(placeholders))


def _short_reason(reason: str) -> str:
    """Dynamo's reason without its hints: the first line and the explanation."""
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    explanation = next((line for line in lines if line.startswith("Explanation:")), "")
    return f"{lines[0]}: {explanation.removeprefix('Explanation:').strip()}".rstrip(": ")


def _graph_kind(gm: fx.GraphModule) -> str:
    """'optimizer' for a graph dynamo traced from torch.optim code (its nodes' stack traces
    point there), else 'forward'."""
    for node in gm.graph.nodes:
        trace = node.meta.get("stack_trace") or ""
        if node.op in ("call_function", "call_method") and "torch/optim/" in trace.replace(
            "\\", "/"
        ):
            return "optimizer"
    return "forward"


class _Compiler:
    def __init__(self, options: Any, kind: str = "forward", *, inference: bool = False) -> None:
        self.options = options
        self.kind = kind  # of the forward graphs: 'forward' or 'optimizer' (_graph_kind)
        self.inference = inference

    def forward(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        return self._compile(gm, example_inputs, self.kind)

    def backward(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        return self._compile(gm, example_inputs, "backward")

    def _compile(
        self, gm: fx.GraphModule, example_inputs: Sequence[Any], kind: str
    ) -> Callable[..., Any]:
        from functorch.compile import make_boxed_func

        name = f"graph{next(_GRAPH_IDS)}"
        if any(_symbolic(x) for x in example_inputs):
            return make_boxed_func(_PerShape(self, gm, name, kind))
        constants = _constants(gm) if self.inference and kind == "forward" else frozenset()
        return make_boxed_func(self.static(gm, list(example_inputs), name, kind, constants))

    def static(
        self,
        gm: fx.GraphModule,
        example_inputs: list[Any],
        name: str,
        kind: str = "forward",
        constants: frozenset[str] = frozenset(),
    ) -> Callable[..., Any]:
        """The runner of a graph with static shapes: one program, or simulator partitions with
        CPU ops between them (a ``MixedGraph``). A graph taking process groups as inputs is
        run without them (its collectives name them: ``lowerings.collectives``)."""
        from hwsim.bridge.lowerings.collectives import groups_as_names

        kept = groups_as_names(gm, example_inputs)
        if kept is not None:
            inner = self.static(gm, [example_inputs[i] for i in kept], name, kind, constants)
            return lambda *args: inner(*[args[i] for i in kept])
        from hwsim.bridge.compiled import SimPartition
        from hwsim.bridge.host_timeline import MixedGraph
        from hwsim.bridge.options import apply_fallback
        from hwsim.bridge.partition import analyze, op_record, partition
        from hwsim.bridge.report import OpRecord

        report = self.options.report
        verdicts = analyze(gm.graph)
        records: dict[str, OpRecord] = {}
        phase = kind.split(" ", 1)[0]  # 'forward (dynamic, ...)' -> 'forward'
        for node, verdict in verdicts.items():
            if verdict.op != "getitem":
                records[verdict.node] = op_record(node, verdict, phase)
        report.add(*records.values())
        unsupported = [v for v in verdicts.values() if not v.supported and v.op != "getitem"]
        for verdict in unsupported:
            assert verdict.unsupported is not None
            apply_fallback(self.options, verdict.unsupported, verdict.node)
        runner: Callable[..., Any]
        if not unsupported:
            runner = SimPartition(gm, name, self.options, example_inputs, records, constants)
            parts = 1
        else:
            split = partition(gm, verdicts)
            parts = 0
            for child, module in list(split.named_children()):
                if child.startswith("fused_") and isinstance(module, fx.GraphModule):
                    examples = [
                        n.meta.get("val") for n in module.graph.nodes if n.op == "placeholder"
                    ]
                    held = constants & {
                        n.name for n in module.graph.nodes if n.op == "placeholder"
                    }  # a part's placeholders are named after the values it receives
                    sim = SimPartition(
                        module, f"{name}.{child}", self.options, examples, records, held
                    )
                    setattr(split, child, sim)
                    parts += 1
            runner = MixedGraph(split, name, self.options, records)
        simulator = sum(r.status == "simulator" for r in records.values())
        report.add(GraphRow(name, kind, len(records), simulator, len(unsupported), parts))
        return runner
