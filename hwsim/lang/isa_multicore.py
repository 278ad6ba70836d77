"""Kernel-language calls between NeuronCores: ``core_barrier``, ``sendrecv`` (the LNC pair,
``nki.isa``) and ``collective`` (a rank's part in a collective over a group of cores).

A kernel builds one core's program; a multi-core program is one build per core merged
(``hwsim.chip.spmd``), so these calls take the core they are built for (``core``), as NKI's
``program_id`` gives it. Semantics and costs are the instructions' (``hwsim.isa.multicore_ops``).
"""

from __future__ import annotations

from typing import Any

from hwsim.engines import COLLECTIVE_ENGINE
from hwsim.errors import IllegalInstructionError
from hwsim.isa.ap import AccessPattern
from hwsim.isa.base import Instruction
from hwsim.isa.multicore_ops import (
    BARRIER_SEMAPHORE,
    CollectiveKind,
    remote_semaphore,
)
from hwsim.kernels import AluOp
from hwsim.lang.emit import emit, enum_arg, gpsimd_engine, sync_engine
from hwsim.lang.kernel import current, source_location


def core_barrier(
    data: Any,
    *,
    core: int,
    cores: tuple[int, ...] = (0, 1),
    engine: str = gpsimd_engine,
    more: tuple[Any, ...] = (),
) -> Instruction:
    """Every core of ``cores`` waits here until all have arrived (``nki.isa.core_barrier``):
    this core (``core``) signals the others' barrier semaphores once its accesses of ``data``
    (shared HBM) are done, then waits for theirs; its later accesses of ``data`` wait for the
    barrier; ``more``: further shared tensors (tiles, views or HBM access patterns) ordered
    the same way. Returns the wait."""
    if core not in cores or len(set(cores)) != len(cores):
        raise IllegalInstructionError(
            f"{source_location()}: core_barrier(cores={cores}) must list core {core} once"
        )
    context = current()
    context.state_changes += 1
    peers = tuple(c for c in cores if c != core)
    context.barriers += 1
    signals = tuple((remote_semaphore(peer, BARRIER_SEMAPHORE), 1) for peer in peers)
    also = tuple(p if isinstance(p, AccessPattern) else p.ap() for p in more)
    emit("core_barrier", engine, data=data, peers=peers, signals=signals, more=also)
    waits = ((BARRIER_SEMAPHORE, context.barriers * len(peers)),)
    return emit("barrier_wait", engine, data=data, waits=waits, more=also)


def sendrecv(
    src: Any,
    dst: Any,
    *,
    send_to: int,
    recv_from: int,
    pipe: int = 0,
    engine: str = sync_engine,
    queue: int | None = None,
) -> Instruction:
    """Send the SBUF tile ``src`` to core ``send_to``'s ``dst`` while core ``recv_from`` sends
    into this core's ``dst`` (``nki.isa.sendrecv``): DMA between the cores' SBUFs."""
    context = current()
    chosen = context.next_queue(engine) if queue is None else queue
    return emit(
        "sendrecv", engine, src=src, dst=dst, send_to=send_to, recv_from=recv_from, pipe=pipe,
        queue=chosen,
    )  # fmt: skip


def collective(
    kind: str | CollectiveKind,
    dst: Any,
    src: Any,
    *,
    group: tuple[int, ...],
    rank: int,
    op: AluOp = AluOp.add,
    cores_per_rank: int = 1,
    send_to: int = 0,
    recv_from: int = 0,
    root: int = 0,
    algorithm: str = "",
) -> Instruction:
    """This rank's part (``group[rank]`` is its first physical core) in a collective of
    ``kind`` (all_reduce, all_gather, reduce_scatter, all_to_all, permute, broadcast) on the
    core's collective engine; see ``hwsim.isa.multicore_ops.Collective``."""
    return emit(
        "collective", COLLECTIVE_ENGINE, dst=dst, src=src,
        kind=enum_arg(CollectiveKind, kind, "collective", "kind"), group=tuple(group),
        rank=rank, op=AluOp(op), cores_per_rank=cores_per_rank, send_to=send_to,
        recv_from=recv_from, root=root, algorithm=algorithm,
    )  # fmt: skip
