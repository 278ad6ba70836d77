"""A graph lowered for a logical NeuronCore of several physical cores (LNC=2 on trn2): which op
splits its output tiles between the cores, which runs on the first core alone, and where the
cores meet at a barrier.

The graph is lowered once per physical core (``graph_lowering.lower_graph``), and the builds are
merged into one program whose HBM tensors are all shared (``hwsim.chip.merge_programs``). Each
build lowers every node:

- a node whose kind splits (``SPLIT_FAMILIES``, fused groups) and whose output holds at least
  ``TilingOptions.lnc_min_split_bytes`` splits: the tile drivers (``tiling.drivers``,
  ``tiling.matmul``, the row-statistics driver of ``lowerings.norm``) hand each core a
  contiguous block of the op's output units (``CoreSplit.mine``: row tiles, matmul row or
  column blocks, batch products); every tile is computed exactly as on one core, so values
  are bit for bit those of LNC=1;
- any other node runs on core 0; the other cores' builds lower it too (names, memory plan and
  views stay identical) but emit none of its instructions (they idle meanwhile);
- a split node that writes HBM outside the units it was handed, or reads back a tensor it
  wrote (a two-stage op: ``sum`` of everything), cannot split safely: its build raises
  ``SplitEscape`` and the graph is lowered again with that node on core 0 (``LncPlan.unsplit``).

Barriers: core 0's build decides them, the others replay its decisions. Before the first
instruction of a node, if the cores that emitted since the last barrier together with the cores
this node runs on are more than core 0 alone, every core emits ``core_barrier`` over every
shared tensor touched or placed since the last barrier (``LncPlan.barriers``): what a node
reads that another core wrote, and bytes the memory plan reuses that another core still read,
are ordered by it. Nodes that run on core 0 one after another need none.

Whether a graph uses the pair at all: with the option ``lnc`` left at None, a graph that has a
node to split is lowered both for the logical core's cores and for one, each is simulated
timing-only, and the faster program is kept (one core's on a tie;
``graph_lowering._faster_of``); the pipeline log's ``lnc`` entry gives both times (``timed``).
An ``lnc`` given explicitly lowers for that many cores.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

from hwsim.bridge.core_split import CoreSplit
from hwsim.bridge.errors import BridgeError
from hwsim.bridge.registry import LOWERINGS
from hwsim.config import HardwareConfig
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import Instruction
from hwsim.lang import isa_multicore
from hwsim.lang.kernel import KernelContext, current

#: Lowering families whose HBM writes all go through the split-aware tile drivers: elementwise
#: maps and comparisons, dtype casts, matmuls, reductions over free axes, row ops (softmax,
#: layer norm) and copies into slices (cat, stack, repeat). Fused groups (``passes.fusion``:
#: maps, epilogues, attention, the MLP kernel by row groups) split too. Every other op runs on
#: core 0.
SPLIT_FAMILIES = frozenset(
    {"pointwise", "compare", "casts", "matmul", "reduction", "norm", "concat"}
)


class SplitEscape(Exception):
    """A split node wrote HBM outside its core's units (or read back what it wrote): lower the
    graph again with ``node`` on core 0."""

    def __init__(self, node: str, why: str, kind: str = "") -> None:
        super().__init__(f"node {node} cannot split between cores: {why}")
        self.node = node
        self.why = why
        self.kind = kind


def resolve_lnc(lnc: int | None, config: HardwareConfig) -> int:
    """Physical cores a graph is lowered for: ``lnc`` (None: the config's
    ``chip.cores_per_logical_core``); at most what the config's logical core has."""
    most = config.chip.cores_per_logical_core
    if lnc is None:
        return most
    if isinstance(lnc, bool) or not isinstance(lnc, int) or not 1 <= lnc <= most:
        raise BridgeError(
            f"hwsim option lnc={lnc!r}: a logical NeuronCore of {config.chip.name} has {most} "
            f"physical core(s) (chip.cores_per_logical_core); valid: 1..{most} or None"
        )
    return lnc


@dataclass
class LncPlan:
    """What the builds of one graph share: the split rule's inputs, the nodes that cannot
    split, and the barriers core 0's build placed (node name -> tensors it orders)."""

    cores: int
    min_split_bytes: int
    unsplit: dict[str, str] = field(default_factory=dict)  # node -> why it cannot split
    #: Kinds of node (``kind_of``) one of which escaped: the others would too (one lowering
    #: path), so they stay on core 0 without a lowering each to find out.
    unsplit_kinds: set[str] = field(default_factory=set)
    barriers: dict[str, list[str]] = field(default_factory=dict)
    split_nodes: list[str] = field(default_factory=list)
    #: When the cores were the bridge's choice (option ``lnc`` left at None): each lowering's
    #: timing-only run in ns, ``lnc<N>_ns`` and ``lnc1_ns`` (``graph_lowering._faster_of``).
    timed: dict[str, float] = field(default_factory=dict)

    def splits(self, node: fx.Node) -> bool:
        """Whether ``node`` splits its output units between the cores."""
        if self.cores == 1 or node.name in self.unsplit or not splittable_kind(node):
            return False
        if kind_of(node) in self.unsplit_kinds:
            return False
        return output_bytes(node.meta.get("val")) >= self.min_split_bytes

    def restart(self, escaped: SplitEscape) -> None:
        """Forget the builds' decisions; ``escaped``'s node runs on core 0 from now on."""
        if escaped.node in self.unsplit:  # a second escape of one node would loop
            raise BridgeError(f"LNC lowering: {escaped}") from escaped
        self.unsplit[escaped.node] = escaped.why
        if escaped.kind:
            self.unsplit_kinds.add(escaped.kind)
        self.barriers.clear()
        self.split_nodes.clear()

    def to_dict(self) -> dict[str, Any]:
        """What the pipeline log shows: cores, the nodes that split, those kept on core 0 by
        an escape, and how many barriers."""
        return {
            "lnc": self.cores,
            "split": list(self.split_nodes),
            "unsplit_after_escape": dict(sorted(self.unsplit.items())),
            "unsplit_kinds": sorted(self.unsplit_kinds),
            "barriers": len(self.barriers),
        } | ({"timed": dict(self.timed)} if self.timed else {})


def splittable_kind(node: fx.Node) -> bool:
    """Whether the node's kind splits (fused groups and ``SPLIT_FAMILIES``)."""
    from hwsim.bridge.passes.fusion import FusedKernel

    if isinstance(node.target, FusedKernel):
        return True
    lowering = LOWERINGS.get(node.target)  # type: ignore[call-overload]
    return lowering is not None and lowering.family in SPLIT_FAMILIES


def kind_of(node: fx.Node) -> str:
    """What lowers ``node``: a fused group's kind (its class, save the plain elementwise
    groups, told apart by their ops), else its ATen op."""
    from hwsim.bridge.passes.fusion import FusedKernel

    target = node.target
    if type(target) is FusedKernel:
        return str(getattr(target, "__name__", "fused"))
    if isinstance(target, FusedKernel):
        return type(target).__name__
    return str(target)


def output_bytes(value: Any) -> int:
    """Bytes of a node's output tensors (its ``meta['val']``)."""
    if isinstance(value, torch.Tensor):
        return math.prod(value.shape) * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(output_bytes(v) for v in value)
    return 0


class CoreLowering:
    """One core's build of a graph lowered for ``plan.cores`` cores: its split, the barrier
    rule (decided on core 0, replayed on the others), and the hooks on the kernel context."""

    def __init__(self, core: int, plan: LncPlan) -> None:
        self.core = core
        self.plan = plan
        self.split = CoreSplit(core, plan.cores)
        self._touched_cores: set[int] = set()  # cores that emitted since the last barrier
        self._tensors: dict[str, None] = {}  # shared tensors touched since (ordered)
        self._inputs: set[str] = set()
        #: The lowering's DMA queue plan (``LoweringContext.queues``): what residency and the
        #: row broadcaster remember of a muted node's (dropped) instructions is forgotten.
        self.queues: Any = None

    @property
    def cores(self) -> tuple[int, ...]:
        return tuple(range(self.plan.cores))

    @contextmanager
    def node(self, node: fx.Node, args: Sequence[Any], inputs: set[str]) -> Iterator[None]:
        """Lower ``node`` (its arguments' values ``args``) on this core: split, on core 0
        alone, or muted; with the barrier before it that the rule asks for."""
        if self.plan.cores == 1:
            yield
            return
        self._inputs = inputs
        context = current()
        declared = set(context.builder.program.hbm)
        split = self.plan.splits(node)
        runs_on = set(self.cores) if split else {0}
        if split and self.core == 0:
            self.plan.split_nodes.append(node.name)
        self.split.active = split
        emitted = [0]
        written: set[str] = set()

        def hook(inner: Callable[..., Instruction], instruction: Instruction, operands: Any):
            if self.core == 0 and not emitted[0] and self._needs_barrier(runs_on):
                self._barrier(context, node.name, declared)
            emitted[0] += 1
            if split:
                self._guard(node, instruction, written)
            elif self.core != 0:  # muted: core 0 runs this node
                touched = (*instruction.reads(), *instruction.writes())
                written.update(a.tensor for a in touched if a.memory is HBM)
                return instruction
            return inner(instruction, operands)

        if self.core != 0 and node.name in self.plan.barriers:
            self._emit_barrier(self.plan.barriers[node.name])
        broadcaster = getattr(self.queues, "broadcaster", None)
        placed = broadcaster.mark() if broadcaster is not None else None
        try:
            with _hooked(context, hook):
                yield
        finally:
            self.split.active = False
        if not split and self.core != 0:  # what residency saw loaded or stored is not here
            forget = getattr(self.queues, "forget", None)
            if forget is not None:
                for name in written:
                    forget(name)
            if broadcaster is not None:
                broadcaster.drop_since(placed)
        if self.core == 0 and emitted[0]:
            self._touched_cores |= runs_on
            self._note_tensors(args, context, declared)

    def _needs_barrier(self, runs_on: set[int]) -> bool:
        return bool(self._touched_cores) and len(self._touched_cores | runs_on) > 1

    def _barrier(self, context: KernelContext, node: str, declared: set[str]) -> None:
        """Core 0: the barrier before ``node`` over the tensors touched since the last one and
        those placed since (a value this node already placed over bytes another core read)."""
        placed = [n for n in context.builder.program.hbm if n not in declared]
        names = [n for n in dict.fromkeys([*self._tensors, *placed]) if n not in self._inputs]
        self.plan.barriers[node] = names
        self._touched_cores.clear()
        self._tensors.clear()
        self._emit_barrier(names)

    def _emit_barrier(self, names: Sequence[str]) -> None:
        """Emit the barrier straight to the builder, past every hook on the context's emit: the
        barrier moves no byte, and residency would take its (ordering) writes for stores that
        make what SBUF holds of those tensors stale."""
        context = current()
        hbm = context.builder.program.hbm
        aps = [_whole(name, hbm[name]) for name in names if name in hbm]
        if not aps:  # nothing shared was touched: order a graph input (read-only) instead
            aps = [_whole(name, decl) for name, decl in list(hbm.items())[:1]]
        hook = context.__dict__.pop("emit", None)
        try:
            isa_multicore.core_barrier(
                aps[0], core=self.core, cores=self.cores, more=tuple(aps[1:])
            )
        finally:
            if hook is not None:
                context.emit = hook  # type: ignore[method-assign]

    def _guard(self, node: fx.Node, instruction: Instruction, written: set[str]) -> None:
        for ap in instruction.reads():
            if ap.memory is MemorySpace.HBM and ap.tensor in written:
                raise SplitEscape(
                    node.name, f"it reads back {ap.tensor}, which it wrote", kind_of(node)
                )
        for ap in instruction.writes():
            if ap.memory is MemorySpace.HBM:
                if self.split.outside:
                    raise SplitEscape(
                        node.name, f"it writes {ap.tensor} outside its tiles", kind_of(node)
                    )
                written.add(ap.tensor)

    def _note_tensors(self, args: Sequence[Any], context: KernelContext, declared: set[str]):
        from hwsim.bridge.values import HbmValue

        for value in args:
            if isinstance(value, HbmValue):
                self._tensors[value.tile.name] = None
        for name in context.builder.program.hbm:
            if name not in declared:
                self._tensors[name] = None


HBM = MemorySpace.HBM


def _whole(name: str, decl: Any) -> AccessPattern:
    """The access pattern of all of HBM tensor ``name``."""
    elements = max(1, math.prod(decl.shape))
    return AccessPattern(MemorySpace.HBM, decl.dtype, 0, 1, 0, (elements,), (1,), 0, name)


@contextmanager
def _hooked(context: KernelContext, hook: Callable[..., Instruction]) -> Iterator[None]:
    """Route the context's emits through ``hook(inner_emit, instruction, operands)``."""
    saved = context.__dict__.get("emit")
    inner = saved or context.emit

    def emit(instruction: Instruction, operands: Any = ()) -> Instruction:
        return hook(inner, instruction, operands)

    context.emit = emit  # type: ignore[method-assign]
    try:
        yield
    finally:
        if saved is None:
            context.__dict__.pop("emit", None)
        else:
            context.emit = saved  # type: ignore[method-assign]
