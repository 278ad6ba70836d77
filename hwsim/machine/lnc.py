"""The tile exchange of a logical NeuronCore's physical cores (``sendrecv``), in a run.

Each core's k-th ``sendrecv`` on a pipe pairs with the k-th of the cores it sends to and receives
from. A transfer from core A to core B may start once both have reached their exchange (B's
``dst`` is free then: its ``sendrecv`` waited for every earlier access of it) plus the remote
semaphore handshake (``topology.remote_semaphore_ns``); it runs on A's DMA engines like any DMA
(SBUF to SBUF, ``hwsim.cost.dma``) and its bytes land in B's ``dst``. A core's exchange completes
(its semaphores update) when both its outgoing and its incoming transfer are done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hwsim.cost.dma import TransferPlan
from hwsim.errors import HwsimError
from hwsim.isa.multicore_ops import SendRecv
from hwsim.machine.dma import DmaSystem, DmaTransfer
from hwsim.machine.state import CoreState


@dataclass(eq=False)
class _End:
    """One core's side of an exchange."""

    core: int
    pc: int
    engine: str
    instruction: SendRecv
    plan: TransferPlan
    ready: int
    complete: Callable[[int], None]
    sent: bool = False
    out_done: int | None = None
    in_done: int | None = None
    completed: bool = False


class LncExchange:
    """The ``sendrecv`` exchanges of one run: pairs them up, moves the data, times the
    transfers on the senders' DMA engines, and completes each end."""

    def __init__(
        self,
        dma: DmaSystem,
        states: list[CoreState],
        numerics: bool,
        handshake_ticks: int,
    ) -> None:
        self.dma, self.states, self.numerics = dma, states, numerics
        self.handshake_ticks = handshake_ticks
        self._ends: dict[tuple[int, int], dict[int, _End]] = {}
        self._counts: dict[tuple[int, int], int] = {}

    def arrive(
        self,
        core: int,
        pc: int,
        engine: str,
        instruction: SendRecv,
        plan: TransferPlan,
        ready: int,
        now: int,
        complete: Callable[[int], None],
    ) -> None:
        """Core ``core`` reached its exchange ``instruction`` (``pc`` of ``engine``) at tick
        ``ready``; ``complete(tick)`` updates its semaphores once both its transfers are done."""
        cores = len(self.states)
        for name, peer in (("send_to", instruction.send_to), ("recv_from", instruction.recv_from)):
            if not 0 <= peer < cores:
                raise HwsimError(
                    f"core {core} {engine}[{pc}] {instruction.label()}: {name}={peer} is not a "
                    f"core of this program (cores 0..{cores - 1})"
                )
        key = (core, instruction.pipe)
        seq = self._counts.get(key, 0)
        self._counts[key] = seq + 1
        ends = self._ends.setdefault((instruction.pipe, seq), {})
        end = ends[core] = _End(core, pc, engine, instruction, plan, ready, complete)
        target = ends.get(instruction.send_to)
        if target is not None:
            self._send(end, target, now)
        for other in list(ends.values()):
            if other is not end and other.instruction.send_to == core and not other.sent:
                self._send(other, end, now)

    def _send(self, sender: _End, receiver: _End, now: int) -> None:
        sender.sent = True
        start = max(sender.ready, receiver.ready) + self.handshake_ticks
        if self.numerics:
            values = self.states[sender.core].read(sender.instruction.src)
            self.states[receiver.core].write(receiver.instruction.dst, values)

        def done(tick: int) -> None:
            sender.out_done = tick
            receiver.in_done = tick
            for end in (sender, receiver) if sender is not receiver else (sender,):
                self._maybe_complete(end)

        queue = sender.instruction.queue
        transfer = DmaTransfer(sender.core, queue, sender.engine, sender.pc, done)
        self.dma.submit(transfer, sender.plan, start, now)

    @staticmethod
    def _maybe_complete(end: _End) -> None:
        if end.out_done is not None and end.in_done is not None and not end.completed:
            end.completed = True
            end.complete(max(end.out_done, end.in_done))
