"""DMA engines and queues of the NeuronCores, and the HBM bandwidth their stack shares.

A ``dma_copy`` is split over the core's DMA engines by partitions, like the hardware (HARDWARE.md
§2.5: 128 partitions over 16 engines = 8 each). Every piece joins the same queue ID on its engine;
queues are FIFO, and an engine serves its queues round-robin, one piece at a time. A piece arrives
``start_latency`` after the trigger, then occupies its engine for
``descriptors * descriptor_overhead + bytes / bandwidth``. Pieces that touch HBM also reserve their
bytes on the stack's shared bandwidth, first come first served; a piece ends when both its engine
time and its HBM reservation are done, so engines that together ask for more than the stack gives
slow down (contention). The transfer completes when its last piece does; completions on one queue
are signalled in order, so a queue's semaphore counts finished transfers.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

import simpy

from hwsim.trace.records import DmaRecord


@dataclass
class DmaPiece:
    transfer: DmaTransfer
    index: int
    nbytes: int
    descriptors: int
    arrival_tick: int


@dataclass
class DmaTransfer:
    """One triggered DMA instruction in flight."""

    core: int
    queue: int
    trigger_engine: str
    trigger_pc: int
    hbm_bytes_per_byte: int  # 0 (SBUF->SBUF), 1 (one side in HBM) or 2 (HBM->HBM)
    bandwidth_scale: Fraction  # < 1 for dma_transpose
    on_complete: Callable[[int], None]  # called with the completion tick
    remaining: int = 0
    last_end_tick: int = 0
    pieces: list[DmaPiece] = field(default_factory=list)


class _Engine:
    def __init__(self, queues: int) -> None:
        self.queues: list[deque[DmaPiece]] = [deque() for _ in range(queues)]
        self.next_queue = 0
        self.pending = 0
        self.wake: simpy.Event | None = None


class DmaSystem:
    """All DMA engines of all cores, with per-stack HBM bandwidth reservations."""

    def __init__(
        self,
        env: simpy.Environment,
        *,
        cores: int,
        engines: int,
        queues_per_engine: int,
        ticks_per_byte: Fraction,
        descriptor_ticks: Fraction,
        start_latency_ticks: int,
        hbm_ticks_per_byte: Fraction,
        cores_per_stack: int,
        records: list[DmaRecord],
    ) -> None:
        self.env = env
        self.engines_per_core = engines
        self.ticks_per_byte = ticks_per_byte
        self.descriptor_ticks = descriptor_ticks
        self.start_latency_ticks = start_latency_ticks
        self.hbm_ticks_per_byte = hbm_ticks_per_byte
        self.cores_per_stack = cores_per_stack
        self.records = records
        stacks = -(-cores // cores_per_stack)
        self.stack_free_tick: list[Fraction] = [Fraction(0)] * stacks
        self.queue_last_completion: dict[tuple[int, int], int] = {}
        self._engines = [[_Engine(queues_per_engine) for _ in range(engines)] for _ in range(cores)]
        for core in range(cores):
            for index in range(engines):
                env.process(self._serve(core, index))

    def split(self, partitions: int) -> list[int]:
        """Partitions handled by each engine: as even as possible, engines in order."""
        used = min(partitions, self.engines_per_core)
        base, extra = divmod(partitions, used)
        return [base + (1 if i < extra else 0) for i in range(used)]

    def submit(
        self, transfer: DmaTransfer, pieces: list[tuple[int, int]], trigger_tick: int
    ) -> None:
        """Queue a transfer's pieces, given as (bytes, descriptors) per engine, in engine order."""
        arrival = trigger_tick + self.start_latency_ticks
        transfer.remaining = len(pieces)
        for index, (nbytes, descriptors) in enumerate(pieces):
            piece = DmaPiece(transfer, index, nbytes, descriptors, arrival)
            transfer.pieces.append(piece)
            engine = self._engines[transfer.core][index]
            engine.queues[transfer.queue].append(piece)
            engine.pending += 1
            if engine.wake is not None and not engine.wake.triggered:
                engine.wake.succeed()

    def _next_piece(self, engine: _Engine, now: int) -> DmaPiece | int | None:
        """The next arrived piece round-robin over queues; else the earliest arrival tick."""
        queues = engine.queues
        count = len(queues)
        earliest: int | None = None
        for step in range(count):
            index = (engine.next_queue + step) % count
            queue = queues[index]
            if queue:
                arrival = queue[0].arrival_tick
                if arrival <= now:
                    engine.next_queue = (index + 1) % count
                    engine.pending -= 1
                    return queue.popleft()
                if earliest is None or arrival < earliest:
                    earliest = arrival
        return earliest

    def _serve(self, core: int, index: int):
        env = self.env
        engine = self._engines[core][index]
        stack = core // self.cores_per_stack
        while True:
            now = int(env.now)
            chosen = self._next_piece(engine, now)
            if chosen is None:
                engine.wake = env.event()
                yield engine.wake
                engine.wake = None
                continue
            if isinstance(chosen, int):
                yield env.timeout(chosen - now)
                continue
            piece = chosen
            transfer = piece.transfer
            busy = (
                piece.descriptors * self.descriptor_ticks
                + piece.nbytes * self.ticks_per_byte / transfer.bandwidth_scale
            )
            end = now + busy
            if transfer.hbm_bytes_per_byte:
                hbm_time = piece.nbytes * transfer.hbm_bytes_per_byte * self.hbm_ticks_per_byte
                hbm_start = max(Fraction(now), self.stack_free_tick[stack])
                self.stack_free_tick[stack] = hbm_start + hbm_time
                end = max(end, hbm_start + hbm_time)
            end_tick = max(now + 1, math.ceil(end))
            yield env.timeout(end_tick - now)
            self.records.append(
                DmaRecord(
                    core,
                    index,
                    transfer.queue,
                    transfer.trigger_engine,
                    transfer.trigger_pc,
                    piece.index,
                    piece.nbytes,
                    piece.descriptors,
                    piece.arrival_tick,
                    now,
                    end_tick,
                )
            )
            transfer.last_end_tick = max(transfer.last_end_tick, end_tick)
            transfer.remaining -= 1
            if transfer.remaining == 0:
                key = (core, transfer.queue)
                done = max(transfer.last_end_tick, self.queue_last_completion.get(key, 0))
                self.queue_last_completion[key] = done
                transfer.on_complete(done)
