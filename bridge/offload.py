"""Eager offload: ``with HwsimMode(config="trn2") as mode: model(x)`` runs each supported ATen op
on the simulator, with real CPU tensors in and out.

``HwsimMode`` is a ``TorchDispatchMode``: every ATen call inside the ``with`` block reaches
``__torch_dispatch__`` after autograd, as the CPU kernel would. For each call it

- runs the op on the CPU (always: it gives the outputs' metadata, and the reference for
  ``check``; the mode is off inside the handler);
- metadata-only views (view, permute, expand, slice, …) stay on the CPU as real views, so
  aliasing behaves as PyTorch defines it; they are recorded as 'view' (no device work);
- otherwise builds a one-node FX graph of the call, lowers it (cached per op, argument layouts and
  scalar arguments), simulates it, compares each output with the CPU's (``check``) and returns the
  simulator's outputs;
- ops that cannot run (no lowering, dtype, shape, mutation, data dependence) follow the fallback
  policy: the CPU result is returned and the reason recorded ('cpu'), plus a warning ('warn'), or
  ``FallbackError`` is raised ('error').

Each op is its own program, so nothing overlaps across ops (``torch.compile`` lowers whole graphs
for that); ``sim_ns`` per op is its program's total simulated time. ``mode.report`` holds the
record of every call.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from hwsim.bridge.auto_cast import TENSORE_OPERANDS, reference_casts
from hwsim.bridge.errors import Reason, Unsupported, as_unsupported, op_name
from hwsim.bridge.graph_lowering import LoweredGraph, lower_graph
from hwsim.bridge.options import BridgeOptions, apply_fallback
from hwsim.bridge.precision import cast_floats, judged_with_exact, lazy_leaves
from hwsim.bridge.registry import OpCall, check_support
from hwsim.bridge.report import SUMMARY_KEYS, OpRecord, Report
from hwsim.bridge.report_records import RunRow
from hwsim.bridge.tie_order import UNINITIALIZED, canonical
from hwsim.errors import HwsimError

aten = torch.ops.aten

#: Ops that only make a view: in eager mode they stay CPU views (aliasing must hold).
VIEW_OPS = frozenset(
    {
        aten.view.default,
        aten._unsafe_view.default,
        aten.reshape.default,
        aten.permute.default,
        aten.transpose.int,
        aten.t.default,
        aten.expand.default,
        aten.unsqueeze.default,
        aten.squeeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.slice.Tensor,
        aten.select.int,
        aten.alias.default,
        aten.lift_fresh.default,  # a tensor created in Python code (x[0] = ...): the same tensor
        aten.detach.default,
        aten.as_strided.default,
    }
)


class HwsimMode(TorchDispatchMode):
    """Run supported ATen ops on the simulator (see module docstring).

    Keyword options are those of ``bridge.options`` (config, fallback, precision, check, trace,
    tiling, report).
    """

    def __init__(self, config: Any = "trn2", **options: Any) -> None:
        super().__init__()
        self.options = BridgeOptions.parse({"config": config, **options}, mode="eager")
        self._lowered: dict[tuple[Any, ...], LoweredGraph | Unsupported] = {}
        self._calls = itertools.count()

    def __exit__(self, *exc: Any) -> Any:
        result = super().__exit__(*exc)
        if self.options.trace is not None:  # eager mode writes the report, not per-op traces
            self.report.save(self.options.trace)
        return result

    @property
    def report(self) -> Report:
        assert self.options.report is not None
        return self.options.report

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if _composite(func):  # reached only from inside a decomposition below: expand it too
            with self:
                result = func.decompose(*args, **kwargs)
            if result is not NotImplemented:
                return result
        decompose = _eager_decompositions().get(func)
        if decompose is not None and _unsupported(func, args, kwargs):
            with self:  # the decomposition's ops come back here, one by one
                result = decompose(*args, **kwargs)
            if result is not NotImplemented:
                return result
        return self.run_call(func, tuple(args), kwargs)

    def run_call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One ATen call on CPU tensors, as the module docstring says; the ``hwsim`` device
        (``bridge.device_session``) calls it with its tensors' host copies."""
        expected = func(*args, **kwargs)
        call = OpCall(func, tuple(args), dict(kwargs), expected)
        node = f"{func.__name__.split('.')[0]}#{next(self._calls)}"
        shapes = " x ".join(str(list(t.shape)) for t in call.input_tensors())
        if self.is_view(func, expected):
            self.report.add(OpRecord(node, op_name(func), "view", shapes=shapes))
            return expected
        lowered = self._lower(call)
        if isinstance(lowered, Unsupported):
            apply_fallback(self.options, lowered, node)
            self.report.add(
                OpRecord(node, op_name(func), "cpu", lowered.reason.value, lowered.detail, shapes)
            )
            # Where torch leaves the order of ties open (sort, topk), a fallback gives the one
            # order the simulator's lowerings give, so a result does not depend on which of its
            # ops ran where (``tie_order``).
            return canonical(func, args, kwargs, expected)
        inputs = call.input_tensors()
        run = lowered.run(inputs, initcheck=self.options.initcheck)
        summary = run.result.summary
        self.report.add(RunRow(node, summary.values_of(SUMMARY_KEYS)))
        record = OpRecord(
            node,
            op_name(func),
            "simulator",
            shapes=shapes,
            sim_ns=float(summary.total_ns),
            span_ns=float(summary.total_ns),
            instructions=int(summary.instructions),
            compute_dtype=next(iter(lowered.compute_dtypes.values()), ""),
        )
        if self.options.check:
            matched = canonical(func, args, kwargs, self._matched(func, args, kwargs, expected))
            record.error = (
                {"ok": True, "max_abs": 0.0}  # undefined values: nothing to compare
                if func in UNINITIALIZED
                else self._compare(
                    run.outputs,
                    matched,
                    exact=lambda: _in_fp64(func, args, kwargs),
                    cast=self._cast(func),
                )
            )
            if self._cast(func) or _low_precision(expected):
                record.error["vs_fp32_max_abs"] = self._vs_fp32(func, args, kwargs, run.outputs)
        self.report.add(record)
        return list(run.outputs) if isinstance(expected, list) else run.outputs

    def is_view(self, func: Any, result: Any = None) -> bool:
        """Whether ``func`` stays a CPU view (recorded as 'view', no device work): a view op, or
        an allocation of no elements (an LSTM layer's unused workspace)."""
        if func in (aten.empty.memory_format, aten.new_empty.default):
            return isinstance(result, torch.Tensor) and result.numel() == 0
        return func in VIEW_OPS

    def _lower(self, call: OpCall) -> LoweredGraph | Unsupported:
        key = _call_key(call)
        if key not in self._lowered:
            try:
                check_support(call)
                graph, inputs = single_op_graph(call)
                self._lowered[key] = lower_graph(
                    graph,
                    inputs,
                    config=self.options.config,
                    precision=self.options.precision,
                    options=self.options.tiling,
                    name=op_name(call.op),
                )
            except HwsimError as error:  # Unsupported, or the kernel build failing (OOM, …)
                self._lowered[key] = as_unsupported(error, op_name(call.op))
        return self._lowered[key]

    def _cast(self, func: Any) -> bool:
        """Whether auto-cast casts ``func``'s operands (``bridge.precision``)."""
        mode = self.options.precision.auto_cast
        return mode == "all" or (mode == "matmult" and func in TENSORE_OPERANDS)

    def _matched(self, func: Any, args: Any, kwargs: Any, expected: Any) -> Any:
        """The CPU result with the run's auto-cast: the op with its operands rounded as the
        simulator casts them (``auto_cast.reference_casts``; its own result if none are)."""
        if not self._cast(func):
            return expected
        with reference_casts(self.options.precision):
            return func(*args, **kwargs)

    def _vs_fp32(self, func: Any, args: Any, kwargs: Any, actual: Any) -> float | None:
        """How far the simulated result is from the op in fp32 (None if the op refuses fp32
        inputs there, e.g. SDPA with a bf16 mask)."""
        try:
            wide = func(*cast_floats(args, torch.float32), **kwargs)
        except RuntimeError:
            return None
        return float(self._compare(actual, wide, in_fp32=True)["max_abs"])

    def _compare(
        self,
        actual: Any,
        expected: Any,
        *,
        in_fp32: bool = False,
        exact: Callable[[], Any] | None = None,
        cast: bool = True,
    ) -> dict[str, Any]:
        """The worst output's ErrorStats (as a dict) against the CPU, compared in the output's
        dtype (or in fp32: the distance to an fp32 reference, not rounded away). ``exact``: the
        op's outputs in float64 (None if refused), the arbiter of a bf16/fp16 output off the
        CPU (``judged_with_exact``); called at most once."""
        worst: dict[str, Any] | None = None
        exact_leaf = lazy_leaves(exact)
        leaves = zip(pytree.tree_leaves(actual), pytree.tree_leaves(expected), strict=True)
        for i, (got, want) in enumerate(leaves):
            if not isinstance(want, torch.Tensor):
                continue
            tolerance = self.options.precision.tolerance(got.dtype, cast=cast)
            if in_fp32 and got.is_floating_point():
                got, want = got.float(), want.float()
            stats = judged_with_exact(
                got, want.to(got.dtype), tolerance, functools.partial(exact_leaf, i)
            ).to_dict()
            if worst is None or (not stats["ok"], stats["max_abs"]) > (
                not worst["ok"],
                worst["max_abs"],
            ):
                worst = stats
        return worst or {"ok": True, "max_abs": 0.0}


def _in_fp64(func: Any, args: Any, kwargs: Any) -> Any:
    """The op's outputs on its float inputs in float64 (None if it refuses them)."""
    try:
        return func(*cast_floats(args, torch.float64), **cast_floats(kwargs, torch.float64))
    except (RuntimeError, TypeError, NotImplementedError):
        return None


def _eager_decompositions() -> dict[Any, Any]:
    """The bridge's own decompositions for ops real models meet (``model_decompositions``),
    applied in eager mode too when the op itself cannot be lowered (group norm, LSTM layers,
    3-D convolution): their ops then run on the simulator instead of the whole op on the CPU."""
    from hwsim.bridge.model_decompositions import model_decompositions

    return model_decompositions()


def _composite(func: Any) -> bool:
    """A CompositeImplicitAutograd op (``aten.to.dtype``): torch expands it before a dispatch
    mode sees it, except for calls a decomposition makes from inside the mode's handler."""
    return isinstance(
        func, torch._ops.OpOverload
    ) and torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")


def _unsupported(func: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    try:
        check_support(OpCall(func, tuple(args), dict(kwargs)))
    except Unsupported:
        return True
    return False


def _low_precision(result: Any) -> bool:
    return any(
        isinstance(t, torch.Tensor) and t.dtype in (torch.bfloat16, torch.float16)
        for t in pytree.tree_leaves(result)
    )


def _call_key(call: OpCall) -> tuple[Any, ...]:
    leaves = pytree.tree_leaves((call.args, call.kwargs))
    return (
        call.op,
        tuple(
            (tuple(x.shape), tuple(x.stride()), x.dtype) if isinstance(x, torch.Tensor) else repr(x)
            for x in leaves
        ),
    )


def single_op_graph(call: OpCall) -> tuple[fx.Graph, list[torch.Tensor]]:
    """A graph with one placeholder per tensor argument, the call, and its outputs (getitem
    nodes for a tuple result); every node's ``meta['val']`` is the CPU value."""
    graph = fx.Graph()
    leaves, spec = pytree.tree_flatten((call.args, call.kwargs))
    inputs: list[torch.Tensor] = []
    mapped = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            placeholder = graph.placeholder(f"in{len(inputs)}")
            placeholder.meta["val"] = leaf
            inputs.append(leaf)
            mapped.append(placeholder)
        else:
            mapped.append(leaf)
    args, kwargs = pytree.tree_unflatten(mapped, spec)
    node = graph.call_function(call.op, tuple(args), dict(kwargs))
    node.meta["val"] = call.out
    if isinstance(call.out, (tuple, list)):
        items = []
        for i, value in enumerate(call.out):
            item = graph.call_function(operator.getitem, (node, i))
            item.meta["val"] = value
            items.append(item)
        graph.output(tuple(items))
    elif isinstance(call.out, torch.Tensor):
        graph.output(node)
    else:
        raise Unsupported(call.op, Reason.SHAPE, f"returns {type(call.out).__name__}")
    return graph, inputs
