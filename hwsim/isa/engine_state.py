"""Engine-internal state some instructions keep: reduce accumulators and random number generators.

Both live in ``CoreState.engine_registers``, one per (engine, kind), a register per lane (lane
p serves partition p). Instructions that use them set ``Instruction.ENGINE_STATE`` so that a
scheduler keeps their program order on the engine (no operand orders them).

**Accumulators** (``reduce_cmd`` of nki.isa [S15]): one fp32 register per lane. VectorE's are
shared by exponential, range_select, select_reduce, tensor_scalar_reduce and
tensor_scalar_cumulative; ScalarE's by activation_reduce and activate2 [S15]. A register is
*undefined* until an instruction starts it (reset, reset_reduce, load_reduce); ``idle`` leaves
it undefined ("the accumulator state may still be modified" [S15]). ``reduce`` on an undefined
register is an error naming the instruction and the lane: hardware would continue from
whatever the register held.

**Random number generators**: xorwow (``kernels.prng``), 4 generators per VectorE lane and one
per GpSimdE lane (nki.isa's 24 and 6 state words per lane [S15]). An engine whose state was never
set starts as if ``set_rng_seed`` had seeded it with 0 (the simulator's choice, so unseeded runs
are reproducible; hardware keeps whatever state the engine had).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

import numpy as np

from hwsim import kernels
from hwsim.kernels import AluOp

if TYPE_CHECKING:
    from hwsim.isa.base import Instruction
    from hwsim.machine.state import CoreState


class ReduceCmd(StrEnum):
    """How an instruction's accumulator registers start (``nki.isa.reduce_cmd``) [S15]."""

    idle = "idle"
    reset = "reset"
    reduce = "reduce"
    reset_reduce = "reset_reduce"
    load_reduce = "load_reduce"


#: xorwow generators per lane, by engine (24 / 6 uint32 words of state per lane [S15]).
PRNG_GENERATORS = {"vector": 4, "gpsimd": 1}
#: The seed an engine's generators start from when nothing set them.
DEFAULT_SEED = 0
#: reduce_cmd values that start the accumulator at this instruction.
STARTING_CMDS = frozenset({ReduceCmd.reset, ReduceCmd.reset_reduce, ReduceCmd.load_reduce})
#: reduce_cmd values that fold this instruction's results into the accumulator.
REDUCING_CMDS = frozenset({ReduceCmd.reduce, ReduceCmd.reset_reduce, ReduceCmd.load_reduce})


def _lanes(state: CoreState) -> int:
    return state.sbuf_geometry[0]


class Accumulators:
    """One engine's fp32 accumulator registers and which lanes hold a defined value."""

    def __init__(self, lanes: int) -> None:
        self.values = np.zeros(lanes, dtype=np.float32)
        self.defined = np.zeros(lanes, dtype=bool)

    def update(
        self,
        instruction: Instruction,
        cmd: ReduceCmd,
        first_lane: int,
        results: np.ndarray | None,
        op: AluOp,
        initial: np.ndarray | float = 0.0,
    ) -> np.ndarray:
        """Apply ``cmd`` to lanes ``first_lane ..`` with this instruction's fp32 results
        ([P, N], or None for a command that reduces nothing); return the registers after it
        ([P] fp32; meaningful where defined). ``initial`` is load_reduce's start value."""
        cmd = ReduceCmd(cmd)
        count = results.shape[0] if results is not None else np.size(initial)
        lanes = slice(first_lane, first_lane + count)
        if cmd is ReduceCmd.idle:
            self.defined[lanes] = False
            return self.values[lanes].copy()
        if cmd is ReduceCmd.reduce and not self.defined[lanes].all():
            lane = first_lane + int(np.flatnonzero(~self.defined[lanes])[0])
            instruction.fail(
                f"reduce_cmd=reduce continues the {instruction.engine} accumulator of lane "
                f"{lane}, which no instruction started (use reset_reduce or load_reduce first; "
                "reduce_cmd=idle also leaves it undefined)"
            )
        if cmd is ReduceCmd.load_reduce:
            start = np.broadcast_to(np.asarray(initial, dtype=np.float32), (count,))
        elif cmd in STARTING_CMDS:
            start = np.full(count, kernels.ACCUMULATE_IDENTITY[AluOp(op)], dtype=np.float32)
        else:
            start = self.values[lanes]
        if cmd in REDUCING_CMDS and results is not None:
            start = kernels.accumulate(results, op, start)
        self.values[lanes] = start
        self.defined[lanes] = True
        return self.values[lanes].copy()

    def set(self, first_lane: int, values: np.ndarray) -> None:
        """Registers an instruction leaves holding ``values`` ([P] fp32), e.g. a reduce result."""
        self.values[first_lane : first_lane + values.shape[0]] = values
        self.defined[first_lane : first_lane + values.shape[0]] = True


def accumulators(state: CoreState, engine: str) -> Accumulators:
    """The accumulator registers of ``engine`` on this core (made at first use)."""
    key = f"{engine}.accumulators"
    found = state.engine_registers.get(key)
    if found is None:
        found = state.engine_registers[key] = Accumulators(_lanes(state))
    assert isinstance(found, Accumulators)
    return found


def prng_state(state: CoreState, engine: str) -> np.ndarray:
    """The generators of ``engine``: int64[lanes, generators, 6] of uint32 words, modified in
    place by the instructions that draw or set them."""
    key = f"{engine}.prng"
    found = state.engine_registers.get(key)
    if found is None:
        found = state.engine_registers[key] = kernels.xorwow_seed(
            DEFAULT_SEED, _lanes(state), PRNG_GENERATORS[engine]
        )
    assert isinstance(found, np.ndarray)
    return found


def draw(state: CoreState, engine: str, first_lane: int, lanes: int, count: int) -> np.ndarray:
    """``count`` random 32-bit values for each of lanes ``first_lane ..`` (int64[lanes, count]),
    advancing those lanes' generators."""
    generators = prng_state(state, engine)
    chosen = slice(first_lane, first_lane + lanes)
    values, after = kernels.xorwow_draw(generators[chosen], count)
    generators[chosen] = after
    return values


def check_reduce_cmd(
    instruction: Instruction,
    cmd: ReduceCmd,
    allowed: frozenset[ReduceCmd],
    reduce_res: object,
    data: object,
) -> None:
    """Legality of an accumulating instruction's ``reduce_cmd`` and ``reduce_res`` [S15]:
    ``cmd`` one of ``allowed``; a reduce_res is a float [P, 1] tile of data's partitions, and
    reads the registers, so ``idle`` (which leaves them undefined) cannot have one."""
    from hwsim.isa.ap import AccessPattern

    cmd = ReduceCmd(cmd)
    if cmd not in allowed:
        valid = ", ".join(sorted(c.value for c in allowed))
        instruction.fail(f"reduce_cmd={cmd.value} is not allowed here; valid: {valid}")
    if reduce_res is None:
        return
    assert isinstance(reduce_res, AccessPattern) and isinstance(data, AccessPattern)
    if reduce_res.partitions != data.partitions or reduce_res.free_elements != 1:
        instruction.fail(
            f"operand 'reduce_res' has shape {reduce_res.shape}; it must be "
            f"[{data.partitions}, 1] (one register per partition)"
        )
    if not reduce_res.dtype.is_float:
        instruction.fail(f"operand 'reduce_res' is {reduce_res.dtype.name}; it must be a float")
    if cmd is ReduceCmd.idle:
        instruction.fail(
            "reduce_res reads the accumulator registers, which reduce_cmd=idle leaves undefined; "
            "use reset_reduce (or reduce after an instruction that started them)"
        )
