"""The fallback policy for a graph dynamo would take from the simulator without telling us.

Dynamo catches a few exception types from a backend (``torch._dynamo.exc.
exceptions_allowed_to_be_fallback``: FakeTensor's data-dependent output, dynamic output shape,
unsupported operator ...) and, instead of failing the compile, breaks the graph there and runs
it eagerly on the CPU, with only a log warning. Everything else a backend raises fails the
compile (``BackendCompilerFailed``). The bridge's own refusals are ``FallbackError``s, so a
plain ``torch.compile`` is loud; but DDP's ``DDPOptimizer`` calls the backend *and* the
callable it returned (on fake tensors, to propagate shapes to the next bucket's subgraph)
inside one compiler call, so a FakeTensor exception raised anywhere in the bridge's code on
that path became a silent graph break: under ``fallback='error'`` a DDP model ran on the CPU,
its report empty of graphs.

So every entry point dynamo calls (the backend and what it returns) runs under
``refuse_silent_graph_breaks``: such an exception meets the fallback policy like any op the
simulator cannot run. Under 'error' it is a ``FallbackError`` (dynamo reports it as
``BackendCompilerFailed``); under 'warn' it also warns; under 'cpu' the graph's ops are recorded
as CPU ops in the report, and the exception goes on to dynamo, which runs them eagerly. Catching
the types where they leave the bridge, not where they arise, covers every caller (DDPOptimizer,
plain dynamo, whatever wraps a backend next) and every part of the bridge alike.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from torch import fx


def _silent_types() -> tuple[type[BaseException], ...]:
    from torch._dynamo.exc import exceptions_allowed_to_be_fallback

    return tuple(exceptions_allowed_to_be_fallback)


@contextlib.contextmanager
def refuse_silent_graph_breaks(gm: fx.GraphModule, options: Any, where: str) -> Iterator[None]:
    """Apply the fallback policy to an exception dynamo would turn into a silent graph break
    (module docstring); ``where`` names the step ('compiling', 'propagating shapes')."""
    try:
        yield
    except _silent_types() as error:
        from hwsim.bridge.errors import Reason, Unsupported
        from hwsim.bridge.options import apply_fallback

        ops = sum(n.op == "call_function" for n in gm.graph.nodes)
        detail = (
            f"{type(error).__name__}: {error} while {where} a graph of {ops} ops; "
            "dynamo would break the graph there and run it eagerly on the CPU"
        )
        refusal = Unsupported(_op_of(error), Reason.DATA_DEPENDENCE, detail)
        apply_fallback(options, refusal)  # raises under 'error'
        _record_on_cpu(gm, options, refusal)
        raise


def guarded(compiled: Callable[..., Any], gm: fx.GraphModule, options: Any) -> Callable[..., Any]:
    """``compiled`` whose calls run under ``refuse_silent_graph_breaks``."""

    @functools.wraps(compiled)
    def call(*args: Any) -> Any:
        with refuse_silent_graph_breaks(gm, options, "running"):
            return compiled(*args)

    return call


def _op_of(error: BaseException) -> str:
    """The ATen op a FakeTensor exception names (its ``func``), else its type's name."""
    func = getattr(error, "func", None)
    return str(func) if func is not None else type(error).__name__


def _record_on_cpu(gm: fx.GraphModule, options: Any, refusal: Any) -> None:
    from hwsim.bridge.errors import op_name
    from hwsim.bridge.report import OpRecord

    for node in gm.graph.nodes:
        if node.op == "call_function":
            op = op_name(node.target)
            options.report.add(OpRecord(node.name, op, "cpu", refusal.reason.value, refusal.detail))
