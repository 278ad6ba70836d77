"""Instruction scheduling: reorder a recorded stream within what its dependencies allow.

The compiler layer both front ends share (the kernel language and NKI kernels, and the bridge's
lowerings, which are kernel-language kernels): a front end records instructions in program order
(``InstructionStream``), a policy picks the order to emit them in (``schedule_order``), and
``replay`` emits them into a ``ProgramBuilder``, which inserts the semaphores the new order needs.

Policies (``SCHEDULES``):

- ``program``: program order, as recorded (what the kernel language does without a scheduler);
- ``list``: the cost-model-driven list scheduler (``hwsim.schedule.list_scheduler``) over the
  dependency graph (``hwsim.schedule.dag``): the longest remaining path first, on whichever
  engine can start earliest (with and without waiting for a better item about to be ready);
  whichever the cost model estimates fastest, program order when none beats it;
- ``best``: the same candidates, each simulated (timing-only), the fastest kept: never slower
  than program order (``hwsim.schedule.choose``).

    stream = InstructionStream()
    for instruction in instructions:
        stream.add(instruction)
    builder = ProgramBuilder()
    replay(builder, stream.items, schedule_order(stream, config, "list"))
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from hwsim.builder import ProgramBuilder
from hwsim.config import HardwareConfig
from hwsim.errors import HwsimError
from hwsim.isa.base import Instruction
from hwsim.schedule.choose import candidate_orders, estimated_best, simulated_best
from hwsim.schedule.dag import DependencyGraph, build_graph, check_order
from hwsim.schedule.list_scheduler import estimate_order, list_schedule
from hwsim.schedule.stream import Barrier, InstructionStream, Item, PlaceHbm, replay

#: Scheduling policies by name.
SCHEDULES = ("program", "list", "best")
#: Environment variable naming the policy of builds that do not choose one.
SCHEDULE_ENV = "HWSIM_SCHEDULE"
#: The policy of an NKI kernel's build (``hwsim.nki``) that chooses none: the NKI compiler
#: reorders instructions that have no data dependency and schedules them itself (HARDWARE.md
#: §4 [S24]), with a performance simulation of its own behind its choices (its DMA prefetch
#: keeps "performance simulation state" [S39]). ``best`` is that: the list scheduler's
#: orders and program order, each simulated, the fastest kept. Kernel-language kernels
#: (``hwsim.lang``: the library, written in their issue order, and the bridge's lowerings,
#: where build time counts) keep program order unless asked.
COMPILER_SCHEDULE = "best"


def resolve_schedule(schedule: str | None, default: str = "program") -> str:
    """The policy a build uses: ``schedule``, else ``$HWSIM_SCHEDULE``, else ``default`` (the
    front end's: ``program`` for the kernel language, ``COMPILER_SCHEDULE`` for NKI)."""
    name = schedule if schedule is not None else os.environ.get(SCHEDULE_ENV, default)
    if name not in SCHEDULES:
        where = "schedule=" if schedule is not None else f"${SCHEDULE_ENV}="
        raise HwsimError(
            f"{where}{name!r} is not a scheduling policy; valid: {', '.join(SCHEDULES)}"
        )
    return name


def schedule_order(
    stream: InstructionStream,
    config: HardwareConfig,
    policy: str = "list",
    *,
    keep_queue_order: bool = False,
) -> list[int]:
    """The order (item indices) to emit ``stream`` in under ``policy`` on ``config`` (``best``
    needs a whole program to simulate: ``emit_scheduled``; here it is ``list``)."""
    policy = resolve_schedule(policy)
    if policy == "program":
        return list(range(len(stream)))
    return estimated_best(candidate_orders(stream, config, keep_queue_order=keep_queue_order))


def emit_scheduled(
    builder: ProgramBuilder, stream: InstructionStream, config: HardwareConfig, policy: str
) -> ProgramBuilder:
    """Emit ``stream`` under ``policy``: into ``builder`` (``program``, ``list``), or into a new
    builder with ``builder``'s tensors and allocations (``best``). Returns the builder used."""
    if resolve_schedule(policy) == "best":
        return simulated_best(builder, stream, config)
    replay(builder, stream.items, schedule_order(stream, config, policy))
    return builder


def reorder(
    instructions: Sequence[Instruction], config: HardwareConfig, policy: str = "list"
) -> list[Instruction]:
    """``instructions`` (program order, no marks) in the order ``policy`` emits them."""
    stream = InstructionStream()
    for instruction in instructions:
        stream.add(instruction)
    return [instructions[i] for i in schedule_order(stream, config, policy)]


__all__ = [
    "COMPILER_SCHEDULE",
    "SCHEDULES",
    "SCHEDULE_ENV",
    "Barrier",
    "DependencyGraph",
    "InstructionStream",
    "Item",
    "PlaceHbm",
    "build_graph",
    "candidate_orders",
    "check_order",
    "emit_scheduled",
    "estimate_order",
    "list_schedule",
    "reorder",
    "replay",
    "resolve_schedule",
    "schedule_order",
]
