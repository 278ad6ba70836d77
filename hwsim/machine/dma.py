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

Time stays exact without rational arithmetic in the hot loop: a piece's engine time only enters
its end tick through a ceiling, and ceil(now + busy) = now + ceil(busy) for an integer ``now``,
so ``compile_plan`` rounds it once per distinct instruction. HBM reservations accumulate, so a
stack's free time is an integer count of 1/d ticks, d the denominator of HBM ticks per byte.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import simpy

from hwsim.trace.records import DmaRecord

#: A compiled piece: (index in its transfer, bytes, descriptors, engine ticks rounded up,
#: HBM time in 1/d ticks or -1 when the piece does not touch HBM).
PlanPiece = tuple[int, int, int, int, int]


@dataclass(frozen=True, slots=True)
class DmaPlan:
    """A DMA instruction's transfer, computed once per distinct instruction and config."""

    queue: int
    pieces: tuple[PlanPiece, ...]  # one per DMA engine, in engine order


@dataclass(slots=True)
class DmaTransfer:
    """One triggered DMA instruction in flight."""

    core: int
    queue: int
    trigger_engine: str
    trigger_pc: int
    on_complete: Callable[[int], None]  # called with the completion tick
    remaining: int = 0
    last_end_tick: int = 0


class _Engine:
    """One DMA engine: FIFO queues, the sorted IDs of the non-empty ones, round-robin position.

    Queued items are (transfer, arrival tick, piece) tuples."""

    __slots__ = ("active", "next_queue", "queues", "wake")

    def __init__(self, queues: int) -> None:
        self.queues: list[deque[tuple[DmaTransfer, int, PlanPiece]]] = [
            deque() for _ in range(queues)
        ]
        self.active: list[int] = []
        self.next_queue = 0
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
        self.ticks_per_byte = Fraction(ticks_per_byte)
        self.descriptor_ticks = Fraction(descriptor_ticks)
        self.start_latency_ticks = start_latency_ticks
        self.hbm_ticks_per_byte = Fraction(hbm_ticks_per_byte)
        self.cores_per_stack = cores_per_stack
        self.records = records
        stacks = -(-cores // cores_per_stack)
        #: When each stack's HBM bandwidth is next free, in 1/hbm_denominator ticks.
        self.hbm_denominator = self.hbm_ticks_per_byte.denominator
        self.stack_free_units: list[int] = [0] * stacks
        self.queue_last_completion: dict[tuple[int, int], int] = {}
        self._compiled: dict[tuple[Any, ...], DmaPlan] = {}  # many instructions share a plan
        self._engines = [[_Engine(queues_per_engine) for _ in range(engines)] for _ in range(cores)]
        for core in range(cores):
            for index in range(engines):
                env.process(self._serve(core, index))

    def split(self, partitions: int) -> list[int]:
        """Partitions handled by each engine: as even as possible, engines in order."""
        used = min(partitions, self.engines_per_core)
        base, extra = divmod(partitions, used)
        return [base + (1 if i < extra else 0) for i in range(used)]

    def compile_plan(self, plan: tuple[Any, ...]) -> DmaPlan:
        """An instruction's ``dma_plan`` (queue, [(bytes, descriptors)], HBM sides, bandwidth
        scale) with each piece's engine ticks and HBM reservation worked out once."""
        queue, pieces, hbm_sides, bandwidth_scale = plan
        key = (queue, tuple(pieces), hbm_sides, bandwidth_scale)
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = self._compile(queue, pieces, hbm_sides, bandwidth_scale)
        return found

    def _compile(
        self, queue: int, pieces: list[tuple[int, int]], hbm_sides: int, bandwidth_scale: Fraction
    ) -> DmaPlan:
        ticks_per_byte = self.ticks_per_byte / Fraction(bandwidth_scale)
        hbm_units_per_byte = self.hbm_ticks_per_byte.numerator * hbm_sides
        compiled = []
        for index, (nbytes, descriptors) in enumerate(pieces):
            busy = descriptors * self.descriptor_ticks + nbytes * ticks_per_byte
            hbm_units = nbytes * hbm_units_per_byte if hbm_sides else -1
            compiled.append((index, nbytes, descriptors, math.ceil(busy), hbm_units))
        return DmaPlan(queue, tuple(compiled))

    def submit(self, transfer: DmaTransfer, plan: DmaPlan, trigger_tick: int) -> None:
        """Queue a transfer's pieces on their engines (piece i on engine i)."""
        arrival = trigger_tick + self.start_latency_ticks
        queue = plan.queue
        engines = self._engines[transfer.core]
        transfer.remaining = len(plan.pieces)
        for piece in plan.pieces:
            engine = engines[piece[0]]
            waiting = engine.queues[queue]
            if not waiting:
                insort(engine.active, queue)
            waiting.append((transfer, arrival, piece))
            wake = engine.wake
            if wake is not None and not wake.triggered:
                wake.succeed()

    def _serve(self, core: int, index: int):
        env = self.env
        timeout, peek = env.timeout, env.peek
        engine = self._engines[core][index]
        queues, active = engine.queues, engine.active
        count = len(queues)
        stack = core // self.cores_per_stack
        stack_free = self.stack_free_units
        denominator = self.hbm_denominator
        records = self.records
        make_record = tuple.__new__
        last_completion = self.queue_last_completion
        while True:
            now = int(env.now)
            # Round-robin from next_queue over the non-empty queues: the first whose head has
            # arrived; else sleep until the earliest head arrives (or until something is queued).
            if not active:
                engine.wake = env.event()
                yield engine.wake
                engine.wake = None
                continue
            count_active = len(active)
            first = bisect_left(active, engine.next_queue)
            chosen = -1
            earliest = -1
            for position in range(first, first + count_active):
                queue_id = active[position % count_active]
                arrival = queues[queue_id][0][1]
                if arrival <= now:
                    chosen = queue_id
                    break
                if earliest < 0 or arrival < earliest:
                    earliest = arrival
            if chosen < 0:
                if peek() > earliest:
                    env._now = earliest  # no event is due first: see simulator._advance_to
                else:
                    yield timeout(earliest - now)
                continue
            waiting = queues[chosen]
            transfer, arrival, piece = waiting.popleft()
            if not waiting:
                active.remove(chosen)
            engine.next_queue = (chosen + 1) % count
            piece_index, nbytes, descriptors, busy, hbm_units = piece
            end_tick = now + busy
            if hbm_units >= 0:
                hbm_start = now * denominator
                if stack_free[stack] > hbm_start:
                    hbm_start = stack_free[stack]
                hbm_end = hbm_start + hbm_units
                stack_free[stack] = hbm_end
                hbm_end_tick = -(-hbm_end // denominator)
                if hbm_end_tick > end_tick:
                    end_tick = hbm_end_tick
            if end_tick <= now:
                end_tick = now + 1
            if peek() > end_tick:
                env._now = end_tick  # no event is due first: see simulator._advance_to
            else:
                yield timeout(end_tick - now)
            records.append(
                make_record(
                    DmaRecord,
                    (
                        core,
                        index,
                        transfer.queue,
                        transfer.trigger_engine,
                        transfer.trigger_pc,
                        piece_index,
                        nbytes,
                        descriptors,
                        arrival,
                        now,
                        end_tick,
                    ),
                )
            )
            if end_tick > transfer.last_end_tick:
                transfer.last_end_tick = end_tick
            transfer.remaining -= 1
            if transfer.remaining == 0:
                key = (core, transfer.queue)
                done = max(transfer.last_end_tick, last_completion.get(key, 0))
                last_completion[key] = done
                transfer.on_complete(done)
