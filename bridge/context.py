"""What a lowering sees while it emits: the kernel being built, precision, tiling knobs, its node.

One ``LoweringContext`` lives for one graph program. Lowerings run inside the kernel language's
build (``hwsim.lang``), so they allocate tiles and call ISA functions directly; the context adds
what the bridge shares across ops: DMA queue assignment (one rotation for the whole program, so
loads of one op and stores of the previous overlap), HBM allocation of new values, the precision,
and the output metadata of the node being lowered (torch's shapes and dtypes are the truth).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from hwsim import lang
from hwsim.bridge.core_split import CoreSplit
from hwsim.bridge.errors import BridgeError
from hwsim.bridge.identity import node_identity
from hwsim.bridge.memory_plan import HbmArena
from hwsim.bridge.precision import Precision
from hwsim.bridge.residency import ResidentQueues
from hwsim.bridge.residency.broadcast import row_pool_bytes
from hwsim.bridge.values import HbmValue
from hwsim.config import HardwareConfig
from hwsim.dtypes import DType
from hwsim.isa.origin import Origin
from hwsim.library.common import Limits, limits

if TYPE_CHECKING:
    from hwsim.bridge.tiling.weights import WeightStream


@dataclass(frozen=True)
class TilingOptions:
    """Knobs of the shared tiling (what an autotuner would search).

    free_elements: most elements per partition of one elementwise/reduction tile.
    row_elements:  most elements per partition of a row an op needs whole (softmax).
    buffers:       tiles in flight per operand (loads of tile i+1 overlap compute of tile i).
    matmul_sbuf_share: share of SBUF per partition a matmul's operand blocks may take.
    resident_sbuf_share: share of SBUF per partition resident values may hold across ops.
    transpose:     how stationary/moving operands with the contraction dim contiguous are
                   transposed on the way in: 'auto', 'tensor' (TensorE) or 'dma' (2-byte dtypes).
    """

    free_elements: int = 2048
    row_elements: int = 16384
    buffers: int = 3
    matmul_sbuf_share: float = 0.5
    transpose: str = "auto"
    #: Share of SBUF per partition that values kept resident between ops may hold
    #: (``bridge.residency``); the ops' own rings take at most half (``free_budget``).
    resident_sbuf_share: float = 0.25
    #: Prepared weights stream through a ring of ``weight_ring_share`` of each SBUF partition,
    #: allocated once for the program, in blocks of at most ``weight_block_share``
    #: (``tiling.weights``): on trn1 a 96 KiB ring (12 MiB of weights, ~45 us of DMA ahead) of
    #: blocks up to 24 KiB (a whole 768-wide K of 2,048 bf16 columns, or 3,072 rows of 512).
    weight_ring_share: float = 3 / 8
    weight_block_share: float = 1 / 8
    #: Physical cores a graph is lowered for (``bridge.lnc``): 1, or up to the config's
    #: ``chip.cores_per_logical_core``; None: the config's (trn2: 2, trn1: 1) where that
    #: lowering simulates faster than one core's, else one (each graph lowered both ways).
    lnc: int | None = None
    #: An op whose outputs hold fewer bytes stays on core 0 at lnc > 1: a named assumption,
    #: about where a barrier between the cores (a remote semaphore write each way, and the
    #: wait for the op's last stores) costs more than half the op saves.
    lnc_min_split_bytes: int = 128 * 1024


@dataclass(frozen=True)
class TensorMeta:
    """What torch says a value is: shape, dtype (hardware), torch's strides, and torch's own
    dtype (int64 and bool are represented by int32 and uint8: ``bridge.dtypes``)."""

    shape: tuple[int, ...]
    dtype: DType
    strides: tuple[int, ...]
    torch_dtype: torch.dtype | None = None


@dataclass(frozen=True)
class IndexCheck:
    """A run-time bounds check of a graph input used as indices: every element of the view
    (``shape``, ``strides``, ``offset`` in elements of the input) must lie in [low, high)."""

    input: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    low: int
    high: int
    what: str


class LoweringContext:
    """Shared state of one graph program's lowering (create it inside the kernel build)."""

    def __init__(
        self,
        precision: Precision,
        options: TilingOptions,
        arena: HbmArena | None = None,
        *,
        residency: bool = False,
        broadcast_rows: bool = False,
        weight_dtypes: Sequence[DType] = (),
        input_row_widths: Sequence[int] = (),
    ) -> None:
        self.precision = precision
        self.options = options
        self.config: HardwareConfig = lang.config()
        self.limits: Limits = limits(self.config)
        #: Values kept resident between ops hold up to this many bytes per partition.
        budget = int(self.limits.sbuf_bytes * options.resident_sbuf_share)
        #: Prepared weights stream through slots of their own (``tiling.weights``), allocated
        #: now for each dtype there are; every other tile budgets with what they leave.
        self.weights: WeightStream | None = None
        reserved = 0
        if weight_dtypes:
            from hwsim.bridge.tiling import weights as stream

            ring = stream.weight_ring_bytes(self.limits, options)
            block = stream.weight_block_bytes(self.limits, options)
            self.weights = stream.WeightStream(self.limits, ring, block, queue=0)
            for dtype in dict.fromkeys(weight_dtypes):
                self.weights.reserve(dtype)
            reserved += self.weights.sbuf_bytes * len(set(weight_dtypes))
        pool = 0
        if broadcast_rows and self.weights is not None:  # the pool the rows of the weights'
            # graph inputs stay in (residency.broadcast: used when the weights stream), as
            # large as those rows (``input_row_widths``, elements) need
            sbuf = self.config.sbuf
            pool = row_pool_bytes(input_row_widths, sbuf.partitions, sbuf.bytes_per_partition)
            reserved += pool
        if reserved * 2 > self.limits.sbuf_bytes:  # the tilers' budgets would be (near) zero
            raise BridgeError(
                f"the weight ring and row pool take {reserved} of the {self.limits.sbuf_bytes} "
                "bytes per partition of SBUF; at most half may be reserved (lower "
                "TilingOptions.weight_ring_share)"
            )
        self.limits = dataclasses.replace(self.limits, sbuf_bytes=self.limits.sbuf_bytes - reserved)
        #: DMA queue plan; with ``residency``, stores are remembered so a later load of the same
        #: bytes reads the tile still in SBUF (``bridge.residency``).
        self.queues = ResidentQueues(
            load_queues=2,
            enabled=residency,
            budget_bytes=budget,
            broadcast_rows=broadcast_rows,
            weight_stream=self.weights is not None,
            row_pool_bytes=pool,
        )
        self.node_name = ""
        self.out: Any = None  # TensorMeta or tuple of them, for the node being lowered
        self.call: Any = None  # the node's OpCall (arguments as torch metadata)
        self.input_names: set[str] = set()  # HBM tensors that are graph inputs
        self.queues.inputs = self.input_names
        self.index_checks: list[IndexCheck] = []
        #: The process group of each collective instruction, in emission order (the order the
        #: core's collective engine runs them): the run meets each group's other ranks.
        self.collective_groups: list[Any] = []
        self._names = itertools.count()
        #: The HBM memory plan (None: every value keeps its own bytes), the tiles it placed by
        #: name, and whether the node being lowered feeds the graph's outputs (never planned).
        self.arena = arena
        self._placed: dict[str, lang.Tile] = {}
        self._escapes = False
        #: Fusion (``bridge.passes.fused_lowering``): the step recorder ``registry.pointwise``
        #: feeds while a fused node lowers, the epilogue hook a matmul applies to each
        #: evacuated tile, and what happened to each fused group.
        self.capture: Any = None
        self.epilogue: Any = None
        self.fusion_notes: list[dict[str, Any]] = []
        #: Whether auto-cast applies to the TensorE op being lowered (False for the one-hot and
        #: mask matmuls of ``auto_cast.EXACT_ORIGINS``: ``matmul_dtype`` keeps their dtype).
        self.casts_tensore = True
        #: While a fused node lowers: the tensors values still needed after it view (None
        #: outside one), so a fallback that lowers its groups apart can release between them
        #: what the graph's own nodes apart would (``release_all_but``).
        self.needed_after: set[str] | None = None
        #: xᵀ of a norm's rows kept in SBUF for the matmuls that read them, by the norm's
        #: output tensor (``tiling.prologue``); dropped (its SBUF freed) when the value dies.
        self.transposed: dict[str, Any] = {}
        #: Which output units of the node being lowered this physical core emits (all of them
        #: at LNC=1; ``bridge.lnc``).
        self.split = CoreSplit()

    # ---- sizes --------------------------------------------------------------------------------
    @property
    def pmax(self) -> int:
        return self.limits.pmax

    def partitions_for(self, inputs: Sequence[Any]) -> int:
        """Partitions an elementwise op's tiles should use: ``pmax``, or, when an input sits
        in SBUF as row blocks of fewer rows (a matmul's [M, N] tiles, M < pmax), that many,
        so the op reads those tiles in place instead of reloading them in another layout. At
        LNC > 1 always ``pmax``: every core must plan the same tiles (``bridge.lnc``)."""
        if self.split.cores > 1:
            return self.pmax
        for value in inputs:
            if isinstance(value, HbmValue) and value.is_contiguous() and value.offset == 0:
                rows = self.queues.rows_of(value.tile.name, value.tile.shape[0])
                if rows is not None and rows < self.pmax and value.numel == value.tile.shape[0]:
                    return rows
        return self.pmax

    def free_budget(self, operands: int, itemsize: int = 4) -> int:
        """Elements per partition of one tile when ``operands`` tiles of ``buffers`` each must
        fit in half of SBUF (never more than ``options.free_elements``)."""
        share = self.limits.sbuf_bytes // 2
        fits = share // max(1, operands * self.options.buffers * itemsize)
        return max(1, min(self.options.free_elements, fits))

    # ---- values -------------------------------------------------------------------------------
    def new_value(self, shape: tuple[int, ...], dtype: DType) -> HbmValue:
        """A new contiguous HBM tensor for a result (named after the node being lowered)."""
        shape = tuple(int(n) for n in shape)
        n = next(self._names)
        name = f"%{self.node_name or 'value'}" + (f".{n}" if n else "")
        elements = max(1, _prod(shape))
        tile = lang.ndarray((elements,), dtype, buffer=lang.hbm, name=name)
        if not self._escapes and self.split.cores == 1:  # a value only later nodes read: its
            self.queues.deferrable.add(name)  # stores may be elided (not when cores share it)
        if self.arena is not None and not self._escapes:
            placement = self.arena.allocate(name, elements * dtype.itemsize)
            earlier = [self._placed[n] for n in placement.reuses if n in self._placed]
            lang.place_hbm(tile, placement.address, earlier)
            self._placed[name] = tile
        return HbmValue.contiguous(tile, shape)

    def release_all_but(self, live_tiles: set[str]) -> None:
        """Memory plan: free every placed value whose tensor is not in ``live_tiles`` (the
        graph lowering calls this after each node with the tensors live values still use).
        Residency forgets the dead values too (a store still pending for one is elided)."""
        self.queues.release_dead(live_tiles)
        for name in [n for n in self.transposed if n not in live_tiles]:
            del self.transposed[name]
        if self.arena is None:
            return
        for name in [n for n in self.arena.live if n not in live_tiles]:
            self.arena.free(name)

    def release_dead(self, tensor: str) -> None:
        """Free tensor ``tensor``, which no later op reads, as ``release_all_but`` would after
        its last reader (a value made and consumed inside one node: a fallback's)."""
        self.queues.forget(tensor)
        self.transposed.pop(tensor, None)
        if self.arena is not None and tensor in self.arena.live:
            self.arena.free(tensor)

    def tile_dtype(self, dtype: DType) -> DType:
        """On-chip operand dtype for an op computing in ``dtype`` (the precision's rule)."""
        return self.precision.tile_dtype(dtype)

    def matmul_dtype(self, dtype: DType) -> DType:
        """The dtype TensorE multiplies the operands of an op computing in ``dtype`` in (the
        auto-cast rule for TensorE ops: ``Precision.matmul_dtype``)."""
        return self.precision.matmul_dtype(dtype) if self.casts_tensore else dtype

    @property
    def acc_dtype(self) -> str:
        return self.precision.accumulate

    def arg_meta(self, index: int) -> Any:
        """Argument ``index`` of the node being lowered as torch metadata (a FakeTensor, a real
        tensor or a Python value), for what an ``HbmValue`` does not say (torch dtypes)."""
        return self.call.args[index] if self.call is not None else None

    def check_index_range(self, value: HbmValue, low: int, high: int, what: str) -> bool:
        """Have every run check that ``value`` lies in [low, high) if it is (a view of) a graph
        input, as torch would raise on an out-of-range index; False if it is computed on the
        device (no check is possible without a round trip)."""
        if value.tile.name not in self.input_names:
            return False
        self.index_checks.append(
            IndexCheck(value.tile.name, value.shape, value.strides, value.offset, low, high, what)
        )
        return True

    # ---- per node -----------------------------------------------------------------------------
    @contextmanager
    def node(
        self,
        name: str,
        out: Any,
        call: Any = None,
        *,
        escapes: bool = False,
        tag: Origin | None = None,
    ) -> Iterator[None]:
        """Lower one node: tag its instructions with the node's identity and expose its metadata.

        ``lang.tag_scope`` tags every instruction emitted meanwhile with the node's ``Origin``
        (``bridge.identity``: op, e.g. ``addmm``, and node name; shown as
        ``op/node:source line``), so the trace attributes each instruction (and its DMA
        transfers) to the node and op it came from.
        ``escapes``: the node's value is a graph output, so its values get bytes of their own.
        ``tag``: the identity instead (a fused group's, naming every source node: ``group_tag``).
        """
        saved = self.node_name, self.out, self.call, self._escapes
        self.node_name, self.out, self.call, self._escapes = name, out, call, escapes
        self._names = itertools.count()
        try:
            with lang.tag_scope(tag or node_identity(name, call)):  # plots colour by op,
                yield  # reports by node
        finally:
            self.node_name, self.out, self.call, self._escapes = saved


def _prod(shape: tuple[int, ...]) -> int:
    total = 1
    for n in shape:
        total *= n
    return total
