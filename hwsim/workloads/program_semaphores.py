"""The semaphore values of a saved program's instructions, checked on load.

A semaphore counts up: an instruction ``waits`` until a semaphore reaches a value and
``signals`` (increments) semaphores when it completes (``hwsim.machine.semaphores``). A wait for
a value of 0 or less is met before anything runs, so it orders nothing; an increment of 0 or
less would make the count go down, which the simulator's bookkeeping of future values cannot
represent. Neither is ever written by hwsim, so a file holding one was edited or damaged, and
would run with its ordering silently gone: it is refused, naming the field.
"""

from __future__ import annotations

from hwsim.isa.base import Instruction
from hwsim.workloads.typed_json import FieldError

#: The largest wait value or increment a saved program may hold: a semaphore counts in 32 bits
#: here (an assumption: no source gives the NeuronCore's counter width), and no program hwsim
#: writes comes near it.
MAX_SEMAPHORE_VALUE = 2**31 - 1


def check_semaphores(instruction: Instruction) -> None:
    """Raise ``FieldError`` (path ``waits[i][1]`` / ``signals[i][1]``) at the first wait value or
    increment outside 1..``MAX_SEMAPHORE_VALUE``."""
    for field, pairs, what in (
        ("waits", instruction.waits, "a wait for"),
        ("signals", instruction.signals, "an increment of"),
    ):
        for i, (name, value) in enumerate(pairs):
            if not 1 <= value <= MAX_SEMAPHORE_VALUE:
                raise (
                    FieldError(
                        f"{what} {value} on semaphore {name!r} is outside 1..{MAX_SEMAPHORE_VALUE} "
                        "(hwsim never writes one: the file was edited or damaged); export it again"
                    )
                    .inside(1)
                    .inside(i)
                    .inside(field)
                )
