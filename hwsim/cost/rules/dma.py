"""Cost rule of the DMA triggers (``dma_copy``, ``dma_transpose``, ``dma_gather``): the trigger on
its engine by who builds the descriptors (``dge_mode``, HARDWARE.md §2.5 [S13]; the modes are
described in ``hwsim.isa.dma_ops``), and its transfer on the DMA engines (``DmaCosts.plan``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hwsim.cost.rules.registry import cost_rule
from hwsim.cost.values import Cost
from hwsim.isa.dma_ops import DgeMode, _DmaInstruction

if TYPE_CHECKING:
    from hwsim.cost.model import CostModel


@cost_rule(_DmaInstruction)
def dma_trigger(model: CostModel, instruction: _DmaInstruction) -> Cost:
    """The trigger's cost on its engine, with its transfer, the ticks from its start until the
    transfer is submitted to the queues, and the ticks it holds its DGE block's port."""
    plan = model.dma.plan(instruction.queue, instruction.transfer())
    dma = model.config.dma
    mode = DgeMode(instruction.dge_mode)
    doorbell = model.timebase.ns_to_ticks(dma.trigger_ns)
    if mode is DgeMode.swdge:  # GpSimdE writes the descriptors
        descriptors = sum(piece.descriptors for piece in plan.pieces)
        work = descriptors * dma.swdge_descriptor_cycles
        issue = model.compute("gpsimd", work, floor=False).issue_ticks
        return Cost(issue, issue, transfer=plan, submit_ticks=issue)
    if mode is DgeMode.hwdge:  # a DGE block generates them
        assert dma.hwdge_ns is not None  # the instruction's check refused it otherwise
        generate = model.timebase.ns_to_ticks(dma.hwdge_ns)
        if instruction.engine == "scalar":  # overlapped with ScalarE's earlier work [S13]
            return Cost(
                doorbell, doorbell, transfer=plan, submit_ticks=generate, hold_ticks=generate
            )
        return Cost(generate, generate, transfer=plan, submit_ticks=generate)
    return Cost(doorbell, doorbell, transfer=plan)  # built ahead of time: a doorbell
