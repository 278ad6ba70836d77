"""The end-to-end check of ``torch.compile``: a compiled graph against eager PyTorch, forward
outputs and gradients.

The partition check (``SimPartition._check``) compares the simulator with *the same decomposed
graph* run on the CPU, so it cannot see an error both share: a decomposition that returns the
wrong value (``bridge.decompositions`` has the one that made every gradient wrong while every
output check passed), a wrong saved activation, a backward graph that goes astray. This check
compares with the model's own code instead: dynamo's graph, before AOTAutograd and the
decompositions, run eagerly.

- **Forward:** each call also runs dynamo's graph eagerly on the same inputs (inputs the graph
  may mutate, such as batch-norm statistics, are cloned first) from the same random state (so
  dropout draws the same masks); every output is compared.
- **Backward:** when the outputs require grad, the inputs that require grad reach the compiled
  graph through an identity ``_Tap`` and the outputs get a hook. The hooks see the gradients
  arriving at this call's outputs; the tap sees the gradients this call's backward produced for
  its inputs (only this call's share, even when a parameter is used by several graphs or
  calls). The tap then runs ``torch.autograd.grad`` through the eager graph with the same output
  gradients and compares, input by input (parameters by name).

Both go into the report (``Report.eager_outputs``, ``Report.gradients``) and into
``numerics_ok``, judged with the tolerance of the run's compute dtype. It costs one eager
forward (and backward) per call; ``check=False`` turns it off with the partition check.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils import _pytree as pytree

from hwsim.bridge.auto_cast import reference_casts
from hwsim.bridge.device_tensor import host_reference
from hwsim.bridge.distributed.clock import reference_runs
from hwsim.bridge.dtypes import Int64RangeError, int64_representable
from hwsim.bridge.precision import (
    compare,
    float64_copy,
    judged_as_cancellation,
    judged_with_exact,
    lazy_leaves,
)
from hwsim.bridge.report import OutputRecord
from hwsim.bridge.report_records import OutputCheck

_MODULE_PART = re.compile(r"\._(?:modules|parameters|buffers)\['([^']+)'\]")


def input_names(gm: fx.GraphModule) -> list[str]:
    """A readable name per placeholder: the parameter path for lifted module state
    (``transformer.h.0.attn.c_attn.weight``), else the local's name (``input_ids``)."""
    names = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        grapharg = node.meta.get("grapharg")
        source = getattr(getattr(grapharg, "source", None), "name", None)
        text = source() if callable(source) else source
        names.append(_pretty_source(text) if isinstance(text, str) else node.name)
    return names


def _pretty_source(source: str) -> str:
    """Module state by its path from the module dynamo traced, whatever local held it
    (``L['self']._modules['h']._modules['0']._parameters['weight']`` -> ``h.0.weight``; a
    wrapper's ``L['args'][0]._modules[...]`` alike); other inputs by their source."""
    parts = _MODULE_PART.findall(source)
    if parts:
        return ".".join(parts)
    return source.removeprefix("L['").replace("']", "", 1) if source.startswith("L['") else source


class EagerChecked:
    """``compiled`` (dynamo's graph through AOTAutograd and the simulator) checked against
    ``gm`` run eagerly, call by call (see the module docstring)."""

    def __init__(
        self,
        gm: fx.GraphModule,
        compiled: Callable[..., Any],
        name: str,
        options: Any,
    ) -> None:
        self.gm = gm
        self.compiled = compiled
        self.name = name
        self.options = options
        self.names = input_names(gm)
        self.calls = 0
        self.mutates = _updates_state(gm)
        self.path_dtypes = _output_path_dtypes(gm)

    def __call__(self, *args: Any) -> Any:
        if any(isinstance(a, FakeTensor) for a in args):
            # a shape-propagating call (DDP's DDPOptimizer runs each compiled bucket on fake
            # tensors to give the next its inputs): metadata only, no values to compare
            return self.compiled(*args)
        self.calls += 1
        if self.mutates:
            return self._call_mutating(args)
        grad = torch.is_grad_enabled()
        needs = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]
        needs = needs if grad else []
        with host_reference():  # hwsim device tensors: the reference runs on their hosts
            reference_args = [_reference_input(a) for a in args]
        call_args = list(args)
        probe = _Probe(self, needs) if needs else None
        if probe is not None:
            tapped = _Tap.apply(probe, *[args[i] for i in needs])
            for i, tensor in zip(needs, tapped, strict=True):
                call_args[i] = tensor
        before = torch.get_rng_state()  # the eager run replays the compiled run's random draws
        outputs = self.compiled(*call_args)
        after = torch.get_rng_state()
        torch.set_rng_state(before)
        casts = reference_casts(self.options.precision)  # auto-cast's rounding on the CPU
        try:
            grads = torch.enable_grad() if grad else torch.no_grad()
            with host_reference(), reference_runs(), grads, casts:
                expected = self.gm(*reference_args)
        finally:
            torch.set_rng_state(after)
        got_leaves = pytree.tree_leaves(outputs)
        want_leaves = pytree.tree_leaves(expected)

        def uncast() -> list[Any]:  # the arbiter of a result off the cast reference
            rng = torch.get_rng_state()
            torch.set_rng_state(before)
            try:
                with host_reference(), reference_runs(), torch.no_grad():
                    args = [_reference_input(a) for a in reference_args]
                    return pytree.tree_leaves(self.gm(*args))
            finally:
                torch.set_rng_state(rng)

        with host_reference():
            self._compare_outputs(got_leaves, want_leaves, casts, lazy_leaves(uncast))
        if probe is not None:
            probe.watch(got_leaves, want_leaves, reference_args, self.names, needs)
        return outputs

    def _call_mutating(self, args: tuple[Any, ...]) -> Any:
        """A graph that updates tensors in place (a compiled ``optimizer.step()`` updates the
        parameters and their state, held as graph attributes): run it, keep what it wrote,
        put the tensors back as they were, run the eager graph from that state, compare the
        outputs and every tensor either run changed, then restore the compiled results (the
        model keeps the simulator's values). No gradient check: such graphs run without grad."""
        with host_reference():
            state = _reachable_tensors(self.gm, args)
            before = [t.detach().clone() for _, t in state]
        rng = torch.get_rng_state()
        outputs = self.compiled(*args)
        after_rng = torch.get_rng_state()
        with host_reference(), torch.no_grad():
            written = [t.detach().clone() for _, t in state]
            for (_, tensor), value in zip(state, before, strict=True):
                tensor.copy_(value)
            torch.set_rng_state(rng)
            casts = reference_casts(self.options.precision)
            try:
                with casts, reference_runs():
                    expected = self.gm(*args)
            finally:
                torch.set_rng_state(after_rng)
            self._compare_outputs(pytree.tree_leaves(outputs), pytree.tree_leaves(expected), casts)
            report = self.options.report
            for (name, tensor), old, new in zip(state, before, written, strict=True):
                if not (torch.equal(old, new) and torch.equal(old, tensor)):
                    label = f"{self.name}.updated[{name}]"
                    record = _record(label, new, tensor.detach(), self.options)
                    report.add(OutputCheck(record, "eager"))
                tensor.copy_(new)
        return outputs

    def _compare_outputs(
        self,
        got: Sequence[Any],
        want: Sequence[Any],
        casts: reference_casts,
        uncast: Callable[[int], torch.Tensor | None] | None = None,
    ) -> None:
        """``uncast(i)``: output i without the casts (``judged_with_exact``'s arbiter)."""
        report = self.options.report
        if len(got) != len(want):
            record = _record(f"{self.name}.outputs", None, None, self.options)
            record.reference_error = f"{len(got)} outputs, eager gives {len(want)}"
            report.add(OutputCheck(record, "eager", worst=False))
            return
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if isinstance(w, torch.Tensor) and isinstance(g, torch.Tensor):
                cast = casts.cast_through(w)
                exact = functools.partial(uncast, i) if uncast is not None and cast else None
                path = self.path_dtypes[i] if i < len(self.path_dtypes) else None
                record = _record(
                    f"{self.name}.out{i}", g, w, self.options, cast=cast, exact=exact, path=path
                )
                report.add(OutputCheck(record, "eager"))
                _refuse_int32_overflow(record, g, w)


def _refuse_int32_overflow(record: OutputRecord, got: torch.Tensor, want: torch.Tensor) -> None:
    """The device holds int64 as int32 (``bridge.dtypes``): an int64 output eager PyTorch
    computes outside what that holds (2^30 * 4) comes out wrapped, a wrong result the check
    knows for certain (not a rounding difference), so it raises instead of only marking the
    report."""
    if got.dtype != torch.int64 or want.dtype != torch.int64 or record.stats.ok:
        return
    outside = ~int64_representable(want)
    if not bool(outside.any()):
        return
    example = int(want[outside].flatten()[0])
    raise Int64RangeError(
        f"{record.name}: eager PyTorch's int64 result holds {example}, outside the int32 range "
        f"the simulator computes int64 in ({int(outside.sum())} such values), so the simulator's "
        "result differs; compute in float or keep the op on the CPU (the report keeps the "
        "comparison)"
    )


def _updates_state(gm: fx.GraphModule) -> bool:
    """Whether an in-place call of dynamo's graph writes a tensor the graph holds as an
    attribute or an input that requires grad (``param.add_``, ``torch._foreach_mul_(exp_avgs,
    ...)``): the eager run would write those through their storage. Inputs that do not
    require grad (batch norm's ``num_batches_tracked``) are cloned for the eager run anyway."""

    def held_state(node: fx.Node) -> bool:
        value = node.meta.get("example_value")
        return node.op == "get_attr" or bool(getattr(value, "requires_grad", False))

    held = {n for n in gm.graph.nodes if n.op in ("placeholder", "get_attr") and held_state(n)}
    for node in gm.graph.nodes:
        if _mutating(node) and node.args:
            first = node.args[0]
            written = first if isinstance(first, (list, tuple)) else [first]
            if any(isinstance(w, fx.Node) and w in held for w in written):
                return True
    return False


def _mutating(node: fx.Node) -> bool:
    """An in-place call in dynamo's graph (``p.add_(...)``, ``torch._foreach_mul_``, an ATen
    overload whose schema writes an argument)."""
    if node.op == "call_method":
        name = str(node.target)
        return name.endswith("_") and not name.startswith("_")
    if node.op != "call_function":
        return False
    schema = getattr(node.target, "_schema", None)
    if schema is not None:
        return bool(schema.is_mutable)
    name = getattr(node.target, "__name__", "")
    return name.endswith("_") and not name.endswith("__") and name.strip("_") != ""


def _reachable_tensors(gm: fx.GraphModule, args: Sequence[Any]) -> list[tuple[str, Any]]:
    """(name, tensor) of every tensor input and every tensor the graph holds as an attribute
    (dynamo installs an optimizer's parameters and state there), each storage once."""
    found: list[tuple[str, Any]] = []
    seen: set[int] = set()
    names = input_names(gm)
    candidates = [(names[i] if i < len(names) else f"in{i}", a) for i, a in enumerate(args)]
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value: Any = gm
            for part in str(node.target).split("."):
                value = getattr(value, part, None)
            candidates.append((str(node.target), value))
    for name, value in candidates:
        if isinstance(value, torch.Tensor) and id(value) not in seen:
            seen.add(id(value))
            found.append((_pretty_source(name), value))
    return found


def _reference_input(value: Any) -> Any:
    """The eager run's copy of an input: a new leaf over the same storage for tensors that
    require grad (autograd forbids mutating those in place), a clone for the others (a graph
    may update them in place: batch-norm statistics), the value itself otherwise."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.requires_grad:
        return value.detach().requires_grad_(True)
    return value.detach().clone()


def _record(
    name: str,
    got: torch.Tensor | None,
    want: torch.Tensor | None,
    options: Any,
    *,
    cast: bool = True,
    exact: Callable[[], torch.Tensor | None] | None = None,
    cancellation: Callable[[], torch.Tensor | None] | None = None,
    path: torch.dtype | None = None,
) -> OutputRecord:
    """``cast``: whether an auto-cast op is among the ops ``want`` came from (its dtype's
    tolerance applies only then); ``exact``: ``want`` without the casts, the arbiter of an
    element off it (``precision.judged_with_exact``); ``cancellation``: the result in float64,
    the arbiter of an fp32 result that is rounding noise (``precision.judged_as_cancellation``);
    ``path``: the least precise float dtype among the ops the result came from (a
    ``torch.autocast`` region's bf16 matmul under an fp32 output), whose tolerance it earns."""
    precision = options.precision
    if got is None or want is None:
        empty = torch.zeros(0)
        stats = compare(empty, empty, precision.tolerance(torch.float32))
        return OutputRecord(name, (), "", "", stats, reference="eager")
    judged_as = _less_precise(got.dtype, path)
    tolerance = precision.tolerance(judged_as, cast=cast)
    want_cast = want.detach().to(got.dtype) if want.dtype != got.dtype else want.detach()
    if exact is not None:
        stats = judged_with_exact(got.detach(), want_cast, tolerance, exact, cast=True)
    elif cancellation is not None:
        stats = judged_as_cancellation(got.detach(), want_cast, tolerance, cancellation)
    else:
        stats = compare(got.detach(), want_cast, tolerance)
    return OutputRecord(
        name,
        tuple(want.shape),
        str(got.dtype),
        precision.result_dtype_name(judged_as, cast=cast),
        stats,
        reference="eager",
    )


class _Probe:
    """What one call's backward check needs: the eager graph's outputs and inputs, and the
    gradients arriving at the compiled outputs (filled by hooks)."""

    def __init__(self, check: EagerChecked, needs: list[int]) -> None:
        self.check = check
        self.needs = needs
        self.got: list[torch.Tensor] = []
        self.want: list[torch.Tensor] = []
        self.reference_inputs: list[torch.Tensor] = []
        self.reference_args: list[Any] = []
        self.leaf_of: list[int] = []  # position -> index of that output among the graph's leaves
        self.names: list[str] = []
        self.tangents: dict[int, torch.Tensor] = {}

    def watch(
        self,
        got: Sequence[Any],
        want: Sequence[Any],
        reference_args: list[Any],
        names: list[str],
        needs: list[int],
    ) -> None:
        self.reference_args = reference_args
        self.reference_inputs = [reference_args[i] for i in needs]
        self.names = [names[i] if i < len(names) else f"in{i}" for i in needs]
        for leaf, (g, w) in enumerate(zip(got, want, strict=False)):
            if (
                isinstance(g, torch.Tensor)
                and g.requires_grad
                and isinstance(w, torch.Tensor)
                and w.requires_grad
            ):
                position = len(self.got)
                self.got.append(g)
                self.want.append(w)
                self.leaf_of.append(leaf)
                g.register_hook(self._tangent_hook(position))

    def _tangent_hook(self, position: int) -> Callable[[torch.Tensor], None]:
        def hook(tangent: torch.Tensor | None) -> None:
            if tangent is not None:
                self.tangents[position] = tangent.detach()

        return hook

    def compare(self, grads: Sequence[torch.Tensor | None]) -> None:
        """Called by the tap's backward with this call's gradients of its inputs."""
        with host_reference():
            self._compare(grads)

    def _compare(self, grads: Sequence[torch.Tensor | None]) -> None:
        report = self.check.options.report
        used = sorted(self.tangents)
        if not used:
            return
        with torch.enable_grad(), reference_casts(self.check.options.precision):
            expected = torch.autograd.grad(
                [self.want[i] for i in used],
                self.reference_inputs,
                grad_outputs=[self.tangents[i].to(self.want[i].dtype) for i in used],
                allow_unused=True,
            )
        exact = lazy_leaves(functools.partial(self._exact_gradients, used))
        for k, (name, got, want, source) in enumerate(
            zip(self.names, grads, expected, self.reference_inputs, strict=True)
        ):
            zero = torch.zeros_like(source)
            record = _record(
                f"{self.check.name}.grad[{name}]",
                zero if got is None else got,
                zero if want is None else want,
                self.check.options,
                cancellation=functools.partial(exact, k),
            )
            report.add(OutputCheck(record, "gradient"))
        self.got, self.want, self.reference_inputs, self.tangents = [], [], [], {}
        self.reference_args, self.leaf_of = [], []

    def _exact_gradients(self, used: list[int]) -> list[torch.Tensor | None] | None:
        """The same gradients from dynamo's graph run in float64 (the arbiter of a gradient
        that is rounding noise, ``precision.judged_as_cancellation``); None when the graph
        refuses float64 or auto-cast rounds it (its reference is then not fp32 arithmetic)."""
        if self.check.options.precision.casts:
            return None
        try:
            gm = float64_copy(self.check.gm)
            args = [_wide(a) for a in self.reference_args]
            inputs = [args[i] for i in self.needs]
            with torch.enable_grad():
                leaves = pytree.tree_leaves(gm(*args))
                return list(
                    torch.autograd.grad(
                        [leaves[self.leaf_of[i]] for i in used],
                        inputs,
                        grad_outputs=[self.tangents[i].to(torch.float64) for i in used],
                        allow_unused=True,
                    )
                )
        except (RuntimeError, TypeError, ValueError):
            return None


#: Float dtypes from most to least precise (what a result that went through them is judged at).
_PRECISION_ORDER = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def _less_precise(a: torch.dtype, b: torch.dtype | None) -> torch.dtype:
    if b is None or b not in _PRECISION_ORDER or a not in _PRECISION_ORDER:
        return a
    return max(a, b, key=_PRECISION_ORDER.index)


def _output_path_dtypes(gm: fx.GraphModule) -> list[torch.dtype | None]:
    """Per output leaf of ``gm``, the least precise float dtype of any node it depends on (its
    own included): one pass over the graph in order."""
    lowest: dict[fx.Node, torch.dtype | None] = {}
    leaves: list[Any] = []
    for node in gm.graph.nodes:
        found: torch.dtype | None = None
        meta = node.meta.get("example_value", node.meta.get("val"))
        for value in pytree.tree_leaves(meta):
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                found = value.dtype if found is None else _less_precise(found, value.dtype)
        for source in node.all_input_nodes:
            upstream = lowest.get(source)
            if upstream is not None:
                found = upstream if found is None else _less_precise(found, upstream)
        lowest[node] = found
        if node.op == "output":
            leaves = pytree.tree_leaves(node.args[0] if node.args else ())
    return [lowest.get(leaf) if isinstance(leaf, fx.Node) else None for leaf in leaves]


def _wide(value: Any) -> Any:
    """A float64 copy of a floating-point tensor (requiring grad as the original does)."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().to(torch.float64).requires_grad_(value.requires_grad)
    return value


class _Tap(torch.autograd.Function):
    """Identity on the inputs that require grad; its backward hands their gradients (this
    call's share) to the probe before passing them on unchanged."""

    @staticmethod
    def forward(ctx: Any, probe: _Probe, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.probe = probe
        return tuple(x.view_as(x) for x in inputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:
        ctx.probe.compare(grads)
        return (None, *grads)
