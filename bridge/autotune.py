"""``options={"autotune": True}``: tile plans and pass choices tuned per graph, by simulation.

Before a graph is lowered for the run, ``hwsim.tune`` searches its knobs: the shared tiling
(``TilingOptions``: free elements per tile, buffers in flight, the matmuls' SBUF share, how
operands are transposed) and which graph passes run (all, none, or all but one). Each candidate
is lowered and simulated timing-only; the first is the options as given, so the winner is never
slower than them on the simulator. Results are cached by graph hash (the graph's code, its
inputs' shapes, strides and dtypes, the precision and the memory plan), point and config hash:
in memory for the process, and in SQLite when ``autotune={"db": PATH}`` names a file. The
choice is recorded with the graph's pipeline in the report (``pipelines[...]["autotune"]``).

``autotune`` takes True, or a dict: ``trials`` (candidates, default 12), ``seed`` (0), ``db``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from torch import fx

from hwsim.bridge.context import TilingOptions
from hwsim.bridge.passes import PASS_NAMES, PassSelection
from hwsim.tune.cache import TuneCache
from hwsim.tune.space import SearchSpace

AUTOTUNE_KEYS = ("trials", "seed", "db")
DEFAULT_TRIALS = 12
#: The tiling knobs and the values tried (the defaults of ``TilingOptions`` among them).
TILING_SPACE = {
    "free_elements": (512, 1024, 2048, 4096),
    "buffers": (2, 3, 4),
    "matmul_sbuf_share": (0.25, 0.5, 0.75),
    "transpose": ("auto", "tensor", "dma"),
}
_MEMORY_CACHES: dict[str, TuneCache] = {}


def parse_autotune(value: Any) -> dict[str, Any] | None:
    """The option's value as {"trials", "seed", "db"}, or None when off."""
    if value in (None, False):
        return None
    if value is True:
        return {"trials": DEFAULT_TRIALS, "seed": 0, "db": None}
    if not isinstance(value, dict) or set(value) - set(AUTOTUNE_KEYS):
        raise ValueError(
            f"hwsim option autotune={value!r}; valid: True, False, or a dict of "
            f"{', '.join(AUTOTUNE_KEYS)}"
        )
    trials = value.get("trials", DEFAULT_TRIALS)
    if type(trials) is not int or not 1 <= trials <= 1000:
        raise ValueError(f"hwsim option autotune trials={trials!r}: a whole number 1..1000")
    return {"trials": trials, "seed": int(value.get("seed", 0)), "db": value.get("db")}


def pass_choices(selection: PassSelection) -> tuple[str, ...]:
    """The pass knob's values: the selection given, all, none, and all but one of each."""
    return ("given", "all", "none", *(f"no-{name}" for name in PASS_NAMES))


class GraphTarget:
    """One graph with its example inputs as a tuning target (``hwsim.tune.search.tune``)."""

    def __init__(self, gm: fx.GraphModule, args: list[Any], options: Any, name: str) -> None:
        self.gm, self.args, self.options, self.name = gm, args, options, name
        self.ref = f"graph {name}"
        self.space = SearchSpace({**TILING_SPACE, "passes": pass_choices(options.passes)})

    def defaults(self) -> dict[str, Any]:
        given = dataclasses.asdict(self.options.tiling)
        start = {k: given[k] for k in TILING_SPACE if given[k] in TILING_SPACE[k]}
        return {**start, "passes": "given"}

    @property
    def identity(self) -> str:
        from hwsim.bridge.compiled import layout_key

        text = repr(
            (
                self.gm.code,
                layout_key(self.args),
                self.options.precision.to_dict(),
                self.options.memory_plan,
                dataclasses.asdict(self.options.tiling),
                self.options.passes.label(),
            )
        )
        return "graph@" + hashlib.sha256(text.encode()).hexdigest()[:20]

    def choice(self, point: dict[str, Any]) -> tuple[PassSelection, TilingOptions]:
        passes = point["passes"]
        if passes == "given":
            selection = self.options.passes
        elif passes == "all":
            selection = PassSelection.all()
        elif passes == "none":
            selection = PassSelection.none()
        else:
            selection = PassSelection.all().without(passes.removeprefix("no-"))
        tiling = dataclasses.replace(self.options.tiling, **{k: point[k] for k in TILING_SPACE})
        return selection, tiling

    def build(self, point: dict[str, Any], config: Any) -> Any:
        from hwsim.bridge.graph_lowering import lower_graph

        selection, tiling = self.choice(point)
        return lower_graph(
            self.gm,
            self.args,
            config=config,
            precision=self.options.precision,
            options=tiling,
            name=self.name,
            memory_plan=self.options.memory_plan,
            passes=selection,
        ).program


def choose(
    gm: fx.GraphModule, args: list[Any], options: Any, name: str
) -> tuple[PassSelection, TilingOptions, dict[str, Any]]:
    """(passes, tiling, what was found) for this graph: the fastest candidate simulated."""
    from hwsim.tune.search import tune

    settings = options.autotune
    target = GraphTarget(gm, args, options, name)
    db = settings.get("db")
    cache = TuneCache(db) if db else _MEMORY_CACHES.setdefault("", TuneCache(None))
    try:
        result = tune(
            target, options.config, trials=settings["trials"], seed=settings["seed"], cache=cache
        )
    finally:
        if db:
            cache.close()
    best = result.best
    if best is None:  # every candidate refused: lower as given (its error surfaces there)
        return options.passes, options.tiling, {"graph_hash": target.identity, "best": None}
    selection, tiling = target.choice(best.point)
    found = {
        "graph_hash": target.identity,
        "candidates": len(result.trials),
        "simulated": result.simulated,
        "start_ns": result.start.outcome.total_ns,
        "best_ns": best.outcome.total_ns,
        "best": best.point,
    }
    return selection, tiling, found
