"""Each pass's effect on a graph: lower and time it with the pass and without it.

For a selection S of passes, the graph is lowered with S, with S minus each pass in turn, and
with none, and each program is simulated once without numerics (timing only). A row per pass
gives simulated time, HBM traffic (bytes the DMAs moved to or from HBM), instructions and the
SBUF peak (bytes per partition) with and without it; ``all on`` / ``all off`` rows bound them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import fx

from hwsim.bridge.passes import PASS_NAMES, PassSelection

#: What a row measures (summary key or LoweredGraph attribute), in table order.
METRICS = ("total_ns", "hbm_bytes", "instructions", "sbuf_peak_bytes")


def _measure(
    graph: fx.GraphModule, examples: Sequence[Any], selection: PassSelection, **lower: Any
) -> dict[str, float]:
    from hwsim.bridge.graph_lowering import lower_graph
    from hwsim.machine.simulator import run

    lowered = lower_graph(graph, examples, passes=selection, **lower)
    result = run(lowered.program, lowered.config, numerics=False)  # no values: no inputs bound
    summary = result.summary
    return {
        "total_ns": float(summary.total_ns),
        "hbm_bytes": float(summary.hbm_bytes),
        "instructions": float(summary.instructions),
        "sbuf_peak_bytes": float(lowered.sbuf_peak_bytes),
    }


def pass_effects(
    graph: fx.GraphModule,
    examples: Sequence[Any],
    selection: PassSelection | None = None,
    **lower: Any,
) -> list[dict[str, Any]]:
    """Rows ``{"pass", "with": metrics, "without": metrics}`` (module docstring); ``lower``:
    the other ``lower_graph`` arguments (config, precision, options, memory_plan)."""
    selection = selection or PassSelection.all()
    everything = _measure(graph, examples, selection, **lower)
    rows: list[dict[str, Any]] = []
    for name in PASS_NAMES:
        if name in selection:
            without = _measure(graph, examples, selection.without(name), **lower)
            rows.append({"pass": name, "with": everything, "without": without})
    nothing = _measure(graph, examples, PassSelection.none(), **lower)
    rows.append({"pass": f"all ({selection.label()})", "with": everything, "without": nothing})
    return rows
