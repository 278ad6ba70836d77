"""What a run knows before its clock starts, worked out once per program (and per config).

Two layers, kept on the program (``Program.run_cache``) for its next run:

- per core, whatever the config: each stream's instructions with their semaphore waits and
  signals as indices into the core's bank, and the *chain* of a same-engine dependency (the pc
  of the producer it streams behind, ``Cost.chain_ticks``);
- per core and config: each instruction's cost (``hwsim.cost.InstructionCost``, from the config's
  ``CostModel``, which also checks legality), and each HBM operand against the declared tensors,
  once per distinct instruction (the builder names each instruction's static twin).

A cached layer is used only for the very streams it was made from: it holds their instructions
and is checked against the streams' instructions by identity (``PreparedCore.made_from``), so a
program edited between runs is prepared again. The config layer keeps the last few configs.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from operator import is_
from typing import Any

import numpy as np

from hwsim.builder import engine_semaphore
from hwsim.cost import CostModel, InstructionCost
from hwsim.engines import engine_names
from hwsim.errors import MemoryAccessError
from hwsim.isa.ap import MemorySpace
from hwsim.isa.base import Instruction
from hwsim.program import CoreProgram, Program
from hwsim.trace.facts import summary_keys

#: Semaphore waits or signals of one instruction, as (semaphore index, value or amount).
SemaphoreSteps = tuple[tuple[int, int], ...]

#: Configs whose costs a program keeps (a sweep moves on; a repeated run or a benchmark does not).
KEPT_CONFIGS = 4


@dataclass
class StaticSteps:
    """One stream ready to run, whatever the config: per pc, in parallel columns (the engine loop
    zips them), its semaphore waits, the pc of its latest same-engine producer or -1 (its
    *chain*), and its signals. ``instructions`` is the stream itself, kept to tell whether a
    program's streams are still the ones these were made from (``PreparedCore.made_from``)."""

    instructions: list[Instruction]
    waits: list[SemaphoreSteps]
    chains: array[int]
    signals: list[SemaphoreSteps]


@dataclass
class Durations:
    """One stream's ticks per pc as int64 arrays, for building its trace columns at the end of
    a run instead of recording them per instruction: issue, latency and chain
    (``InstructionCost``)."""

    issue: np.ndarray
    latency: np.ndarray
    chain: np.ndarray


@dataclass
class CoreCosts:
    """Per engine: the cost of each pc on ``model``'s config, and the same ticks as arrays."""

    model: CostModel
    costs: dict[str, list[InstructionCost]]
    durations: dict[str, Durations]


@dataclass
class PreparedCore:
    """One core's streams, prepared: the bank's semaphore names in index order, and per engine
    (with a non-empty stream) its static steps, its summary keys (``summary_keys``) and, per
    config key, its costs."""

    semaphore_names: list[str]
    static: dict[str, StaticSteps]
    costs: dict[tuple[Any, ...], CoreCosts]
    summary_keys: dict[str, tuple[np.ndarray, list[Any], list[Instruction]]]

    @property
    def stream_ids(self) -> tuple[tuple[int, ...], ...]:
        """The ids of the instructions of the streams it was made from (non-empty streams in
        registry order)."""
        return tuple(tuple(map(id, steps.instructions)) for steps in self.static.values())

    def made_from(self, core_program: CoreProgram) -> bool:
        """Whether the core's streams are the very ones it was made from: the same engines, and
        per engine the same instruction objects in the same order (compared by identity, which
        costs no id per instruction)."""
        streams = _streams(core_program)
        return len(streams) == len(self.static) and all(
            engine in self.static
            and len(stream) == len(kept := self.static[engine].instructions)
            and all(map(is_, stream, kept))
            for engine, stream in streams
        )


def prepare_core(program: Program, core: int) -> PreparedCore:
    """The config-independent layer of ``core`` (cached on the program)."""
    core_program = program.cores[core]
    cache = program.run_cache
    found = cache.get(("core", core))
    if isinstance(found, PreparedCore) and found.made_from(core_program):
        return found
    index = _FirstSeen()
    static = {
        engine: _static_steps(stream, index, engine) for engine, stream in _streams(core_program)
    }
    keys = {engine: summary_keys(stream) for engine, stream in _streams(core_program)}
    prepared = PreparedCore(list(index), static, {}, keys)
    cache[("core", core)] = prepared
    return prepared


def costs_of_core(program: Program, prepared: PreparedCore, model: CostModel) -> CoreCosts:
    """Each engine's costs per pc on ``model``'s config (cached on the prepared core), every
    distinct instruction checked (legality by the model, HBM operands here) on first meeting."""
    key = (id(model), _hbm_key(program))
    found = prepared.costs.get(key)
    if found is not None and found.model is model:
        return found
    streams = {engine: steps.instructions for engine, steps in prepared.static.items()}
    costs = model.streams_costs(streams, lambda i: _check_hbm_operands(i, program))
    durations = {engine: _durations(of) for engine, of in costs.items()}
    while len(prepared.costs) >= KEPT_CONFIGS:
        del prepared.costs[next(iter(prepared.costs))]
    found = prepared.costs[key] = CoreCosts(model, costs, durations)
    return found


def _durations(costs: list[InstructionCost]) -> Durations:
    def column(field: int) -> np.ndarray:
        return np.fromiter((cost[field] for cost in costs), np.int64, len(costs))

    return Durations(column(0), column(1), column(2))


def _streams(core_program: CoreProgram) -> list[tuple[str, list[Instruction]]]:
    """The non-empty streams in registry order (the order engines start and report in)."""
    streams = core_program.streams
    return [(engine, streams[engine]) for engine in engine_names() if streams.get(engine)]


def _hbm_key(program: Program) -> tuple[tuple[str, int], ...]:
    """What HBM operand checks depend on: the declared tensors and their sizes."""
    return tuple((name, decl.nbytes) for name, decl in program.hbm.items())


def _static_steps(stream: Sequence[Instruction], index: _FirstSeen, engine: str) -> StaticSteps:
    """Each instruction's semaphore indices (``index``: the core's, by name) and its chain, as
    columns.

    A wait on the engine's own completion semaphore (a same-engine RAW dependency, which the
    builder records like any other) becomes a *chain* wait on its producer's pc: the engine
    streams the consumer behind it (``Cost.chain_ticks``) instead of waiting for completion.
    """
    own = engine_semaphore(engine)
    signals_of = _SignalsMemo(index, own)
    waits: list[SemaphoreSteps] = []
    chains = array("q")
    signals: list[SemaphoreSteps] = []
    # The pc of each instruction that counts one completion of the engine's own semaphore (not
    # its DMA triggers, which count on their queues): a wait for count k streams behind the k-th.
    signal_pcs: list[int] = []
    for pc, instruction in enumerate(stream):
        signal, counts_own = signals_of(instruction.signals)  # first: the bank's index order
        signals.append(signal)
        if instruction.waits:
            named, chain = _waits_and_chain(instruction.waits, own, signal_pcs)
            waits.append(tuple([(index[name], value) for name, value in named]))
        else:
            waits.append(())
            chain = -1
        chains.append(chain)
        if counts_own:
            signal_pcs.append(pc)
    return StaticSteps(list(stream), waits, chains, signals)


def _waits_and_chain(
    waits: tuple[tuple[str, int], ...], own: str, signal_pcs: list[int]
) -> tuple[list[tuple[str, int]], int]:
    """The waits an instruction keeps (by name), and the pc of the latest producer on its own
    engine it streams behind (-1: none)."""
    kept = []
    chain = -1
    for name, value in waits:
        if name != own or value > len(signal_pcs):  # another engine's, or a later one: a deadlock
            kept.append((name, value))
        elif value > 0:
            chain = max(chain, signal_pcs[value - 1])
    return kept, chain


class _FirstSeen(dict[str, int]):
    """Semaphore name -> index, numbered in order of first use (a new name gets the next)."""

    def __missing__(self, name: str) -> int:
        found = self[name] = len(self)
        return found


class _SignalsMemo:
    """An instruction's signals by index, and whether they count its own engine's semaphore:
    worked out once per distinct signals (most instructions of a stream signal alike, and then
    share the one tuple)."""

    def __init__(self, index: _FirstSeen, own: str) -> None:
        self._index, self._own = index, own
        self._found: dict[tuple[tuple[str, int], ...], tuple[SemaphoreSteps, bool]] = {}

    def __call__(self, named: tuple[tuple[str, int], ...]) -> tuple[SemaphoreSteps, bool]:
        found = self._found.get(named)
        if found is None:
            indexed = tuple([(self._index[name], amount) for name, amount in named])
            counts_own = any(name == self._own for name, _ in named)
            found = self._found[named] = (indexed, counts_own)
        return found


def _check_hbm_operands(instruction: Instruction, program: Program) -> None:
    """HBM operands must name a declared tensor and stay inside it."""
    for name, ap in instruction.operand_names().items():
        if ap.memory is not MemorySpace.HBM:
            continue
        decl = program.hbm.get(ap.tensor)
        if decl is None:
            known = ", ".join(sorted(program.hbm)) or "none"
            raise MemoryAccessError(
                f"{instruction.label()}: operand '{name}' names HBM tensor '{ap.tensor}', not"
                f" declared by the program (declared: {known})"
            )
        first, last = ap.byte_span()
        if first < 0 or last > decl.nbytes:
            raise MemoryAccessError(
                f"{instruction.label()}: operand '{name}' bytes [{first}, {last}) fall outside HBM "
                f"tensor '{ap.tensor}' ({decl.nbytes} bytes, shape {decl.shape})"
            )
