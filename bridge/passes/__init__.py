"""The graph compiler's pass pipeline over the decomposed FX graph, before lowering.

Each pass is a named object (``GraphPass``) that rewrites a copy of the graph the front door
gave (torch.compile's partitions, ``hwsim export``, ``hwsim run FILE.py``: every caller of
``lower_graph``), and says what it changed. Passes run in ``PIPELINE`` order:

    dce            dead-code elimination (pure nodes nothing uses)
    cse            common-subexpression elimination (same pure op on the same arguments)
    views          view/permute/transpose cancellation (a chain of views that is the identity,
                   or collapses to one view; a clone to its source's layout is its source)
    constant_fold  nodes that depend on no graph input (``arange``/``le``/``where`` mask chains)
                   are computed once at compile time and become tensor constants
    patch_conv     a convolution whose stride is its kernel (no padding, dilation or groups:
                   a patch embedding) becomes patches @ Wᵀ + b, contracting over C*KH*KW rows
                   (``passes.patch_conv``)
    prepare_constants
                   the model's weights feeding matmuls are cast to the matmul's dtype and laid
                   out as TensorE reads them, once, at compile time; the program only streams
                   them (``passes.prepare_constants``)
    attention      q kᵀ, scale, mask, softmax and · v become one fused node, lowered as one
                   flash-attention kernel: the scores never reach HBM
                   (``passes.attention_fusion``, ``lowerings.flash_attention``)
    reduction_fusion
                   a reduction and its elementwise work (decomposed softmax, RMS norm) become
                   one row pass over SBUF (``passes.reduction_fusion``)
    conv_bn        an eval batch norm (and a ReLU) after a convolution is applied on the conv's
                   PSUM evacuation as a per-channel scale and shift (``passes.conv_bn``)
    fusion         elementwise chains (and the elementwise ops after a matmul) become one fused
                   node: one pass over SBUF per tile, no HBM round trip in between
                   (``passes.fusion``, ``passes.fused_lowering``)
    mlp            an up-projection with its activation and the down-projection that alone
                   reads it become one kernel: the hidden activation stays in SBUF
                   (``passes.mlp_fusion``, ``tiling.mlp``)
    norm_prologue  a layer or RMS norm whose rows feed matmuls of prepared weights transposes
                   them into one xᵀ in SBUF that those matmuls read in place; rows nothing
                   else reads are never stored (``passes.norm_prologue``, ``tiling.prologue``)
    residency      (while lowering) a value an op stores and a later op loads back stays in
                   SBUF: the load reads the tile in place, and a store nothing else reads is
                   never emitted (``bridge.residency``)
    row_broadcast  (while lowering) a wide row every partition reads (a bias, a norm's gamma)
                   is loaded once and replicated by TensorE, not by a DMA that moves it once
                   per partition (``residency.broadcast``)

Selection (``options={"passes": ...}`` of both front doors, ``lower_graph(passes=)``): ``None``
or ``"all"`` all on (the default), ``"none"`` all off, a dict ``{"fusion": False}`` switches the
named ones (the rest stay on), a list/tuple of names turns exactly those on. An unknown name is
an error naming the valid ones.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

#: A pass rewrites the GraphModule in place and returns what it did (counts by kind).
PassFn = Callable[[fx.GraphModule], dict[str, int]]


@dataclass(frozen=True)
class GraphPass:
    """A named graph pass: ``run(gm)`` edits ``gm`` in place and returns its change counts."""

    name: str
    run: PassFn
    description: str


@dataclass(frozen=True)
class PassSelection:
    """Which passes of ``PIPELINE`` run (by name)."""

    enabled: frozenset[str]

    @classmethod
    def all(cls) -> PassSelection:
        return cls(frozenset(PASS_NAMES))

    @classmethod
    def none(cls) -> PassSelection:
        return cls(frozenset())

    @classmethod
    def only(cls, *names: str) -> PassSelection:
        _check_names(names)
        return cls(frozenset(names))

    @classmethod
    def parse(cls, value: Any) -> PassSelection:
        if isinstance(value, PassSelection):
            return value
        if value is None or value == "all":
            return cls.all()
        if value == "none":
            return cls.none()
        if isinstance(value, dict):
            _check_names(value)
            for name, on in value.items():
                if not isinstance(on, bool):
                    raise ValueError(f"hwsim option passes[{name!r}]={on!r}; valid: True, False")
            return cls(frozenset(n for n in PASS_NAMES if value.get(n, True)))
        if isinstance(value, (list, tuple, set, frozenset)):
            return cls.only(*value)
        raise ValueError(
            f"hwsim option passes={value!r}; valid: 'all', 'none', a dict of pass name -> bool "
            f"or a list of pass names ({', '.join(PASS_NAMES)})"
        )

    def without(self, name: str) -> PassSelection:
        return PassSelection(self.enabled - {name})

    def __contains__(self, name: object) -> bool:
        return name in self.enabled

    def label(self) -> str:
        if self.enabled == frozenset(PASS_NAMES):
            return "all"
        return "+".join(n for n in PASS_NAMES if n in self.enabled) or "none"


def _check_names(names: Iterable[str]) -> None:
    for name in names:
        if name not in PASS_NAMES:
            close = difflib.get_close_matches(str(name), PASS_NAMES, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ValueError(
                f"unknown hwsim pass '{name}'{hint}; valid passes: {', '.join(PASS_NAMES)}"
            )


@dataclass
class PipelineLog:
    """What the pipeline did to one graph: per pass that ran, its change counts, and the
    call_function nodes before and after it."""

    selection: str
    steps: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"selection": self.selection, "steps": self.steps}


def copy_graph_module(graph: fx.GraphModule | fx.Graph) -> fx.GraphModule:
    """A GraphModule over a copy of ``graph`` (node metadata copied), sharing its attributes,
    so passes never edit the caller's graph (the CPU check runs the original)."""
    root = graph if isinstance(graph, fx.GraphModule) else torch.nn.Module()
    source = graph.graph if isinstance(graph, fx.GraphModule) else graph
    copied = fx.Graph()
    value_map: dict[fx.Node, fx.Node] = {}
    out = copied.graph_copy(source, value_map)
    copied.output(out)
    return fx.GraphModule(root, copied)


def _calls(gm: fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function")


def run_pipeline(
    graph: fx.GraphModule | fx.Graph,
    selection: PassSelection | None = None,
    *,
    constants: Iterable[str] = (),
) -> tuple[fx.GraphModule, PipelineLog]:
    """Run the selected passes on a copy of ``graph``; the copy and what each pass did.
    ``constants``: names of placeholders that hold the model's frozen parameters and buffers
    (``prepare_constants`` prepares their matmul uses)."""
    selection = selection or PassSelection.all()
    gm = copy_graph_module(graph)
    gm.meta[CONSTANTS_KEY] = frozenset(constants)
    log = PipelineLog(selection.label())
    for graph_pass in PIPELINE:
        if graph_pass.name not in selection:
            continue
        before = _calls(gm)
        changes = graph_pass.run(gm)
        gm.graph.lint()
        log.steps.append(
            {"pass": graph_pass.name, "nodes_before": before, "nodes_after": _calls(gm)} | changes
        )
    for name in LOWERING_PASSES:  # their effect is filled in by ``lower_graph``
        if name in selection:
            log.steps.append({"pass": name, "at": "lowering"})
    gm.recompile()
    return gm, log


from hwsim.bridge.passes.attention_fusion import fuse_attention  # noqa: E402  (no cycle)
from hwsim.bridge.passes.conv_bn import fuse_conv_bn  # noqa: E402  (after GraphPass: no cycle)
from hwsim.bridge.passes.fusion import fuse  # noqa: E402
from hwsim.bridge.passes.mlp_fusion import fuse_mlps  # noqa: E402
from hwsim.bridge.passes.norm_prologue import fuse_norm_prologues  # noqa: E402
from hwsim.bridge.passes.patch_conv import patch_convs_to_matmul  # noqa: E402
from hwsim.bridge.passes.prepare_constants import (  # noqa: E402
    CONSTANTS_KEY,
    prepare_constants,
)
from hwsim.bridge.passes.reduction_fusion import fuse_reductions  # noqa: E402
from hwsim.bridge.passes.rewrites import (  # noqa: E402
    cancel_views,
    common_subexpressions,
    dead_code,
    fold_constants,
)

PIPELINE: tuple[GraphPass, ...] = (
    GraphPass("dce", dead_code, "dead-code elimination"),
    GraphPass("cse", common_subexpressions, "common-subexpression elimination"),
    GraphPass("views", cancel_views, "view/permute/transpose cancellation"),
    GraphPass("constant_fold", fold_constants, "mask-building subgraphs folded to constants"),
    GraphPass(
        "patch_conv", patch_convs_to_matmul, "patch convolutions (stride = kernel) as matmuls"
    ),
    GraphPass(
        "prepare_constants",
        prepare_constants,
        "weights cast and laid out for their matmuls at compile time",
    ),
    GraphPass("attention", fuse_attention, "attention as one flash-attention kernel"),
    GraphPass(
        "reduction_fusion",
        fuse_reductions,
        "softmax and RMS norm chains as one row pass over SBUF",
    ),
    GraphPass("conv_bn", fuse_conv_bn, "eval batch norm and ReLU on the conv's PSUM evacuation"),
    GraphPass("fusion", fuse, "elementwise chains and matmul epilogues in one pass over SBUF"),
    GraphPass("mlp", fuse_mlps, "up-projection, activation and down-projection as one kernel"),
    GraphPass(
        "norm_prologue",
        fuse_norm_prologues,
        "a norm's rows transposed on chip for the matmuls that read them",
    ),
)
#: Passes that act while the graph lowers rather than on the graph (``lower_graph`` reads the
#: selection): ``residency`` keeps values in SBUF between ops (``bridge.residency``);
#: ``row_broadcast`` loads a row every partition reads once and replicates it on chip
#: (``residency.broadcast``).
LOWERING_PASSES: tuple[str, ...] = ("residency", "row_broadcast")
PASS_NAMES: tuple[str, ...] = (*(p.name for p in PIPELINE), *LOWERING_PASSES)
