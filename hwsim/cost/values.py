"""The values the cost model answers with: a rule's ``Cost``, an instruction's
``InstructionCost`` on a config, and the scheduler's uncontended ``Estimate``. All in ticks of the
config's time base."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from hwsim.cost.dma import TransferPlan


@dataclass(frozen=True, slots=True)
class Cost:
    """What a cost rule gives for one instruction (``hwsim.cost.rules``), in ticks.

    issue_ticks: the engine is busy this long; the next instruction may issue after it.
    latency_ticks: from start until results are visible and completion semaphores update (what
        another engine's dependent instruction waits for).
    chain_ticks: from start until a dependent instruction on the *same* engine may start: the
        engine streams it behind its producer (in order, no semaphore), so only the pipeline
        fill shows (``CostModel.compute``). None: the latency.

    A DMA trigger's rule also gives its transfer (``DmaCosts.plan``), the ticks from its start
    until the transfer is handed to the queues, and the ticks it holds its DGE block (0: none).
    """

    issue_ticks: int
    latency_ticks: int
    chain_ticks: int | None = None
    transfer: TransferPlan | None = None
    submit_ticks: int = 0
    hold_ticks: int = 0


class InstructionCost(NamedTuple):
    """What one instruction costs on one config: everything the simulator needs to time it.

    A named tuple, not a dataclass: the engine loop unpacks one per instruction it runs.

    issue_ticks:   its engine is busy this long.
    latency_ticks: from its start until its results are visible (at least ``issue_ticks``).
    chain_ticks:   from its start until a dependent instruction on the same engine may start
                   (at most ``latency_ticks``).
    ports:         the shared ports it holds, as indices into ``CostModel.port_names``.
    hold_ticks:    how long it holds them (its issue, or a DGE block's descriptor generation).
    transfer:      a DMA trigger's transfer on the DMA engines, or None.
    submit_ticks:  DMA: from the trigger's start until the transfer is handed to the queues.
    """

    issue_ticks: int
    latency_ticks: int
    chain_ticks: int
    ports: tuple[int, ...]
    hold_ticks: int
    transfer: TransferPlan | None
    submit_ticks: int


@dataclass(frozen=True, slots=True)
class Estimate:
    """One instruction's timing as the list scheduler assumes it: uncontended (no shared-port
    arbitration, no DMA processor sharing between queues, HBM only as one shared resource).

    issue_ticks, chain_ticks: as ``InstructionCost``'s.
    latency_ticks: from its start until its results are visible; for a DMA, until its transfer
        is done when it finds the DMA engines idle.
    transfer_delay_ticks: DMA: from the trigger's start until the transfer can be served
        (descriptor generation, then the DMA start latency); 0 otherwise.
    transfer_ticks: DMA: how long the transfer keeps the DMA engines (and HBM) busy; 0 otherwise.
    """

    issue_ticks: int
    latency_ticks: int
    chain_ticks: int
    transfer_delay_ticks: int = 0
    transfer_ticks: int = 0
