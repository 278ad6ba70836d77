"""What the list scheduler assumes each instruction costs on a config: the simulator's own cost
model (``Instruction.cost``, ``trigger_cost`` and the DMA transfer plan), uncontended.

The estimate ignores what only a run knows (shared-port arbitration, DMA processor sharing
between queues, HBM contention beyond the one shared DMA resource the scheduler models); it only
has to rank orders, the simulator still times the chosen one exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hwsim.config import HardwareConfig
from hwsim.isa.base import Instruction, MachineSpec
from hwsim.machine.dma_plan import WORK_UNITS_PER_TICK, DmaCostModel, plan_transfer


@dataclass(frozen=True, slots=True)
class Estimate:
    """One instruction's assumed timing, in ticks of the config's time base.

    issue_ticks:    its (triggering) engine is busy this long.
    latency_ticks:  from its start until its results are visible; for a DMA, until its transfer
                    is done when it finds the DMA engines idle.
    chain_ticks:    from its start until a dependent instruction on the same engine may start.
    transfer_delay_ticks: DMA: from the trigger's start until the transfer can be served
                    (descriptor generation, then the DMA start latency); 0 otherwise.
    transfer_ticks: DMA: how long the transfer keeps the DMA engines (and HBM) busy; 0 otherwise.
    """

    issue_ticks: int
    latency_ticks: int
    chain_ticks: int
    transfer_delay_ticks: int = 0
    transfer_ticks: int = 0


class CostEstimator:
    """Estimates per instruction on one config, worked out once per distinct instruction."""

    def __init__(self, config: HardwareConfig) -> None:
        self.spec = MachineSpec(config)
        timebase = self.spec.timebase
        self.dma = DmaCostModel(
            config.dma, timebase.base_mhz, config.hbm.bandwidth_bytes_per_ns_per_stack
        )
        self.start_latency_ticks = timebase.ns_to_ticks(config.dma.start_latency_ns)
        self._hbm_denominator = self.dma.hbm_ticks_per_byte.denominator
        self._found: dict[tuple[Any, ...], Estimate] = {}

    def of(self, instruction: Instruction) -> Estimate:
        key = instruction.static_key()
        found = self._found.get(key)
        if found is None:
            found = self._found[key] = self._work_out(instruction)
        return found

    def _work_out(self, instruction: Instruction) -> Estimate:
        try:
            return self._estimate(instruction)
        except Exception:
            # An illegal instruction's cost may fail in any way: fail with the run's own message
            # (the run checks every instruction; checking here too would double the work).
            instruction.check(self.spec)
            raise

    def _estimate(self, instruction: Instruction) -> Estimate:
        if not instruction.IS_DMA:
            cost = instruction.cost(self.spec)
            latency = max(cost.issue_ticks, cost.latency_ticks)
            chain = latency if cost.chain_ticks is None else min(latency, cost.chain_ticks)
            return Estimate(cost.issue_ticks, latency, chain)
        sides = instruction.transfer()  # type: ignore[attr-defined]
        queue = instruction.queue  # type: ignore[attr-defined]
        plan = plan_transfer(self.dma, self.spec.config.dma.engines, queue, sides)
        descriptors = sum(piece.descriptors for piece in plan.pieces)
        cost, submit, _ = instruction.trigger_cost(self.spec, descriptors)  # type: ignore[attr-defined]
        engine_ticks = max(piece.work for piece in plan.pieces) / WORK_UNITS_PER_TICK
        hbm_units = sum(max(piece.hbm_units, 0) for piece in plan.pieces)
        transfer = math.ceil(max(engine_ticks, hbm_units / self._hbm_denominator))
        delay = submit + self.start_latency_ticks
        return Estimate(
            cost.issue_ticks,
            max(cost.issue_ticks, delay + transfer),
            cost.issue_ticks,
            delay,
            transfer,
        )
