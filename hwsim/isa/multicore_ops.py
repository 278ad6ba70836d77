"""Instructions between NeuronCores: the LNC pair's barrier and tile exchange, and collectives.

- ``core_barrier`` / ``barrier_wait`` (``nki.isa.core_barrier`` [S15]): each core signals a
  semaphore of every other core (a remote semaphore update), then waits until its own has been
  signalled by all of them. The signal instruction reads ``data`` (it waits for this core's
  writes of the shared tensor); the wait writes it (this core's later accesses wait for it).
- ``sendrecv`` (``nki.isa.sendrecv`` [S15]): a DMA that sends this core's SBUF ``src`` into the
  ``dst`` tile of core ``send_to`` while core ``recv_from`` sends into this core's ``dst``; the
  machine starts a transfer once both ends have reached it (``hwsim.machine.lnc``) and the
  instruction completes when its own transfer and the incoming one are done.
- ``collective`` (all-reduce, all-gather, reduce-scatter, all-to-all, permute, broadcast) on a
  core's collective engine, over a group of ranks, timed on the topology (``hwsim.cost.
  collectives``) once every rank has arrived (``hwsim.machine.collectives``).

Numerics of the exchanges are the machine's (they read and write other cores' memories); these
instructions' ``execute`` does nothing on its own core.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hwsim.engines import COLLECTIVE_ENGINE, sequencer_engines
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import Instruction, MachineSpec, register
from hwsim.isa.dma_ops import _DmaInstruction
from hwsim.isa.operands import READ, READ_WRITE, WRITE, maybe_operand, operand
from hwsim.kernels import AluOp

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState

#: The semaphore a core's barrier waits on; peers increment it remotely.
BARRIER_SEMAPHORE = "S.lnc.barrier"


def remote_semaphore(core: int, name: str) -> str:
    """The name by which an instruction signals semaphore ``name`` of another ``core`` (of the
    same program): a remote semaphore update [S23]."""
    return f"@{core}:{name}"


def parse_remote(name: str) -> tuple[int, str] | None:
    """(core, name) of a remote semaphore name, or None for one of the core's own."""
    if not name.startswith("@"):
        return None
    core, sep, rest = name[1:].partition(":")
    if not sep or not core.isdigit():
        raise ValueError(f"semaphore '{name}': a remote name is '@<core>:<name>'")
    return int(core), rest


def _check_v3(instruction: Instruction, spec: MachineSpec) -> None:
    instruction.require_generation(spec, "v3", "v4")


@dataclass(frozen=True, kw_only=True)
class _Synchronising(Instruction):
    """An instruction that orders accesses of ``data`` without moving its bytes: any sequencer
    may name it, it reads and writes nothing (statistics, initcheck)."""

    ENGINES: ClassVar[tuple[str, ...]] = ("sync", "gpsimd", "vector", "scalar", "tensor")
    #: Its operands order other accesses and touch no byte (the race checker skips them).
    ORDERS_ONLY: ClassVar[bool] = True

    def check_operand(
        self, spec: MachineSpec, name: str, ap: AccessPattern, *, is_write: bool
    ) -> None:
        if ap.memory is not MemorySpace.HBM:
            self.fail(f"operand '{name}': a barrier synchronises on shared HBM data [S15]")

    def moved_reads(self) -> tuple[AccessPattern, ...]:
        return ()

    def initcheck_reads(self, state: CoreState) -> tuple[AccessPattern, ...]:
        return ()

    def initcheck_writes(self, state: CoreState) -> tuple[tuple[AccessPattern, object], ...]:
        return ()

    def execute(self, state: CoreState) -> None:
        return None


@register("core_barrier", profiler="EVENT_SEMAPHORE")
@dataclass(frozen=True, kw_only=True)
class CoreBarrier(_Synchronising):
    """Signal every core of ``peers``: their barrier semaphores += 1 when this completes (the
    remote write lands ``topology.remote_semaphore_ns`` after the start). Its ``signals`` hold
    the remote updates (``remote_semaphore``)."""

    data: AccessPattern = operand(READ)
    peers: tuple[int, ...] = ()
    #: Further shared tensors the barrier orders like ``data`` (a lowered graph's barrier
    #: orders every tensor touched since the previous one: ``hwsim.bridge.lnc``).
    more: tuple[AccessPattern, ...] = maybe_operand(READ, default=())

    def reads(self) -> tuple[AccessPattern, ...]:
        return (self.data, *self.more)

    def writes(self) -> tuple[AccessPattern, ...]:
        return ()

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        _check_v3(self, spec)
        _check_more(self, spec)
        if not self.peers:
            self.fail("a barrier needs at least one peer core")


@register("barrier_wait", profiler="EVENT_SEMAPHORE")
@dataclass(frozen=True, kw_only=True)
class BarrierWait(_Synchronising):
    """Wait (its ``waits``) until every peer's barrier signal has landed; accesses of ``data``
    after it wait for it."""

    data: AccessPattern = operand(READ_WRITE)
    more: tuple[AccessPattern, ...] = maybe_operand(READ_WRITE, default=())

    def reads(self) -> tuple[AccessPattern, ...]:
        return (self.data, *self.more)

    def writes(self) -> tuple[AccessPattern, ...]:
        return (self.data, *self.more)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        _check_v3(self, spec)
        _check_more(self, spec)


def _check_more(instruction: _Synchronising, spec: MachineSpec) -> None:
    for ap in getattr(instruction, "more", ()):
        if not isinstance(ap, AccessPattern) or ap.memory is not MemorySpace.HBM:
            instruction.fail("operand 'more': a barrier synchronises on shared HBM data [S15]")


@register("sendrecv", profiler="DMA_DIRECT2D")
@dataclass(frozen=True, kw_only=True)
class SendRecv(_DmaInstruction):
    """Send ``src`` (SBUF) to core ``send_to``'s ``dst`` tile while core ``recv_from`` sends
    into this core's ``dst``. ``pipe``: exchanges of one pipe pair up in order (the k-th of
    each core with the k-th of its peer's)."""

    send_to: int = 0
    recv_from: int = 0
    pipe: int = 0

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        _check_v3(self, spec)
        for name, ap in (("src", self.src), ("dst", self.dst)):
            if ap.memory is not MemorySpace.SBUF:
                self.fail(f"operand '{name}': sendrecv moves SBUF tiles [S15]")
        if self.src.shape != self.dst.shape or self.src.dtype != self.dst.dtype:
            self.fail(
                f"src {self.src.shape} {self.src.dtype.name} and dst {self.dst.shape} "
                f"{self.dst.dtype.name} must have the same shape and dtype [S15]"
            )

    def execute(self, state: CoreState) -> None:
        return None  # the exchange moves the data (``hwsim.machine.lnc``)


class CollectiveKind(StrEnum):
    all_reduce = "all_reduce"
    all_gather = "all_gather"
    reduce_scatter = "reduce_scatter"
    all_to_all = "all_to_all"
    permute = "permute"
    broadcast = "broadcast"


#: The reductions a collective may apply (``nki.collectives``: add, minimum, maximum).
REDUCE_OPS = (AluOp.add, AluOp.max, AluOp.min)


@register("collective", engines=(COLLECTIVE_ENGINE,), profiler="CC_OP")
@dataclass(frozen=True, kw_only=True)
class Collective(Instruction):
    """One rank's part in a collective over ``group`` (the first physical core of each rank,
    in rank order; this core is ``group[rank]``), each rank ``cores_per_rank`` physical cores.

    Element order is row-major over each operand's shape; with N ranks, src and dst elements:
    all_reduce and broadcast E and E; all_gather E and N x E (dst = the srcs in rank order);
    reduce_scatter N x E and E (dst = the reduced chunk ``rank``); all_to_all N x E and N x E
    (dst chunk j = rank j's src chunk ``rank``); permute E and E (this rank sends its src to
    rank ``send_to`` and its dst receives rank ``recv_from``'s). Reductions run in fp32 in rank
    order [S15].
    """

    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ)
    kind: CollectiveKind = CollectiveKind.all_reduce
    group: tuple[int, ...] = (0,)
    rank: int = 0
    op: AluOp = AluOp.add
    cores_per_rank: int = 1
    send_to: int = 0  # permute: the rank this one sends to
    recv_from: int = 0  # permute: the rank that sends to this one
    root: int = 0  # broadcast: the rank whose src every dst receives
    algorithm: str = ""  # "": the config's (collectives.algorithm)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        n, kind = len(self.group), CollectiveKind(self.kind)
        if not 0 <= self.rank < n or len(set(self.group)) != n:
            self.fail(f"rank {self.rank} of group {self.group}: ranks must be distinct, 0..{n - 1}")
        for name, member in (("send_to", self.send_to), ("recv_from", self.recv_from)):
            if not 0 <= member < n:
                self.fail(f"{name}={member}: a rank of the group, 0..{n - 1}")
        if AluOp(self.op) not in REDUCE_OPS:
            self.fail(f"op={AluOp(self.op).name}: collectives reduce with add, max or min")
        src = self.src.free_elements * self.src.partitions
        dst = self.dst.free_elements * self.dst.partitions
        if kind in (CollectiveKind.reduce_scatter, CollectiveKind.all_to_all) and src % n:
            self.fail(f"{kind}: src's {src} elements do not split into {n} chunks")
        expected = {
            CollectiveKind.all_gather: src * n,
            CollectiveKind.reduce_scatter: src // n,
        }.get(kind, src)
        if dst != expected:
            self.fail(
                f"{kind} over {n} ranks: dst has {dst} elements, src {src}; dst needs {expected}"
            )

    @property
    def nbytes(self) -> int:
        """The message size the cost model takes (``CollectiveCosts.of``)."""
        src_bytes = self.src.partitions * self.src.free_elements * self.src.dtype.itemsize
        if self.kind == CollectiveKind.reduce_scatter:
            return src_bytes // len(self.group)
        return src_bytes

    def execute(self, state: CoreState) -> None:
        return None  # every rank's data together: ``combine``

    def combine(self, sources: list[np.ndarray]) -> np.ndarray:
        """This rank's dst values (flat, fp32 or int64) from every rank's src (flat, in rank
        order)."""
        n, kind = len(sources), CollectiveKind(self.kind)
        if kind in (CollectiveKind.all_reduce, CollectiveKind.reduce_scatter):
            total = sources[0].astype(sources[0].dtype, copy=True)
            reduce = {AluOp.add: np.add, AluOp.max: np.maximum, AluOp.min: np.minimum}[
                AluOp(self.op)
            ]
            for values in sources[1:]:
                reduce(total, values, out=total)
            if kind is CollectiveKind.all_reduce:
                return total
            return np.split(total, n)[self.rank]
        if kind is CollectiveKind.all_gather:
            return np.concatenate(sources)
        if kind is CollectiveKind.all_to_all:
            return np.concatenate([np.split(values, n)[self.rank] for values in sources])
        if kind is CollectiveKind.broadcast:
            return sources[self.root]
        return sources[self.recv_from]


#: The engines a barrier may run on (sequencers), for front ends.
BARRIER_ENGINES = tuple(e for e in sequencer_engines() if e in CoreBarrier.ENGINES)
