"""Lowered graphs cached by graph hash, in the process and on disk, so a graph is lowered once.

torch.compile hands the backend a new GraphModule whenever it compiles again: a new
``torch.compile`` of the same model, after ``torch._dynamo.reset()``, in each bench or notebook
run of a cell. The program depends only on the graph's code, its inputs' layouts, its constant
tensors' values, the options that shape the lowering and the config, so a graph whose hash of
those is one already lowered reuses that ``LoweredGraph``. The model's parameters are not part
of the program (they are bound to it on every call, prepared ones too: ``InputBinding``), so a
model with other weights reuses it as well, and so does a graph dynamo names otherwise (the
program keeps the name it was first lowered under: its trace's tags name the same nodes). Runs
bind their inputs first, so sharing one program between partitions is safe in one thread.

A lowering missing here is looked for on disk (``bridge.lowering_store``: other processes'
lowerings, keyed by the same hash plus hwsim's source hash) before the graph is lowered, and a
new lowering is written there.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import fx

from hwsim.bridge.graph_lowering import LoweredGraph
from hwsim.bridge.lowering_store import LoweringStore
from hwsim.config import HardwareConfig, config_hash

#: Lowered graphs kept (least recently used dropped first): BERT-large's is about 100 MB.
CAPACITY = 8


def _constant_digest(gm: fx.GraphModule) -> list[str]:
    """Digests of the graph's tensor constants (``get_attr``): their values are in the program.
    Read with fake tensors off: aot_autograd may call the compiler inside its fake mode, where
    reading a real constant (a generation cache's empty tensor) raises."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return _constant_digest_of(gm)


def _constant_digest_of(gm: fx.GraphModule) -> list[str]:
    digests = []
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        value: Any = gm
        for part in str(node.target).split("."):
            value = getattr(value, part, None)
        if isinstance(value, torch.Tensor):
            data = value.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy()
            digests.append(
                f"{node.target}:{value.dtype}:{hashlib.sha256(data.tobytes()).hexdigest()}"
            )
    return digests


def graph_digest(
    gm: fx.GraphModule,
    layout: tuple[Any, ...],
    *,
    config: HardwareConfig,
    precision: Any,
    tiling: Any,
    passes: Any,
    memory_plan: bool,
    constants: Iterable[str],
    ranks: tuple[Any, ...] = (),
) -> str:
    """The full SHA-256 a lowering is cached by (module docstring). ``ranks``: where a graph
    with collectives runs (``lowerings.collectives.collective_placement``): one rank's
    program is not another's."""
    text = repr(
        (
            *((ranks,) if ranks else ()),
            gm.code,
            layout,
            _constant_digest(gm),
            config_hash(config),
            precision.to_dict(),
            dataclasses.asdict(tiling) if tiling is not None else None,
            passes.label() if hasattr(passes, "label") else repr(passes),
            memory_plan,
            sorted(constants),
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()


@dataclasses.dataclass
class LoweringCache:
    """Least-recently-used ``LoweredGraph``s by graph hash, with hit and miss counts (of this
    process's cache; ``store`` counts the disk's)."""

    capacity: int = CAPACITY
    hits: int = 0
    misses: int = 0
    store: LoweringStore = dataclasses.field(default_factory=LoweringStore)
    _graphs: OrderedDict[str, LoweredGraph] = dataclasses.field(default_factory=OrderedDict)

    def get_or_lower(
        self,
        key: str,
        lower: Callable[[], LoweredGraph],
        *,
        stored: tuple[str, HardwareConfig] | None = None,
    ) -> LoweredGraph:
        """The lowering cached under ``key``, else the one on disk under ``stored`` (the graph's
        digest and config), else ``lower()`` (then written to disk too)."""
        found = self._graphs.get(key)
        if found is not None:
            self.hits += 1
            self._graphs.move_to_end(key)
            return found
        self.misses += 1
        lowered = self.store.load(*stored) if stored is not None else None
        if lowered is None:
            lowered = lower()
            if stored is not None:
                self.store.save(stored[0], lowered)
        self._graphs[key] = lowered
        while len(self._graphs) > self.capacity:
            self._graphs.popitem(last=False)
        return lowered

    def clear(self) -> None:
        self._graphs.clear()
        self.hits = self.misses = 0
        self.store = LoweringStore()


#: The process's cache (``bridge.compiled`` lowers through it).
LOWERED = LoweringCache()
