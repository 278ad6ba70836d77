"""What a run knows before its clock starts, worked out once per program (and per config).

Two layers, kept on the program (``Program.run_cache``) for its next run:

- per core, whatever the config: each stream's instructions with their semaphore waits and
  signals as indices into the core's bank, and the *chain* of a same-engine dependency (the pc
  of the producer it streams behind, ``Cost.chain_ticks``);
- per core and config: each instruction's legality and cost facts (``Facts``), worked out once
  per distinct instruction (the builder names each instruction's static twin).

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

from hwsim.builder import STATIC_TWIN, engine_semaphore
from hwsim.config import config_hash
from hwsim.engines import engine_names, shared_ports
from hwsim.errors import MemoryAccessError
from hwsim.isa.ap import MemorySpace
from hwsim.isa.base import Instruction, MachineSpec
from hwsim.machine.dma_plan import DmaCostModel, TransferPlan, plan_transfer
from hwsim.program import CoreProgram, Program
from hwsim.trace.facts import summary_keys

#: What an instruction costs, computed once per distinct instruction and config: (issue ticks,
#: latency ticks, chain ticks (a same-engine dependent may start), shared ports used, ticks it
#: holds them, DMA plan or None, ticks from start until the transfer is submitted).
Facts = tuple[int, int, int, tuple[int, ...], int, TransferPlan | None, int]
#: Semaphore waits or signals of one instruction, as (semaphore index, value or amount).
SemaphoreSteps = tuple[tuple[int, int], ...]

#: Configs whose facts a program keeps (a sweep moves on; a repeated run or a benchmark does not).
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
    a run instead of recording them per instruction: issue, latency and chain (``Facts``)."""

    issue: np.ndarray
    latency: np.ndarray
    chain: np.ndarray


@dataclass
class CoreFacts:
    """Per engine: the facts of each pc, and the same ticks as arrays."""

    facts: dict[str, list[Facts]]
    durations: dict[str, Durations]


@dataclass
class PreparedCore:
    """One core's streams, prepared: the bank's semaphore names in index order, and per engine
    (with a non-empty stream) its static steps, its summary keys (``summary_keys``) and, per
    config key, its facts."""

    semaphore_names: list[str]
    static: dict[str, StaticSteps]
    facts: dict[tuple[Any, ...], CoreFacts]
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


def facts_of_core(
    program: Program, prepared: PreparedCore, spec: MachineSpec, ports: dict[str, int]
) -> CoreFacts:
    """Each engine's facts per pc on ``spec``'s config (cached on the prepared core)."""
    key = (config_hash(spec.config), _hbm_key(program))
    found = prepared.facts.get(key)
    if found is not None:
        return found
    dma = DmaCostModel(
        spec.config.dma, spec.timebase.base_mhz, spec.config.hbm.bandwidth_bytes_per_ns_per_stack
    )
    cache = _FactsCache(spec, dma, program, ports)
    facts = {
        engine: [cache.of(instruction) for instruction in steps.instructions]
        for engine, steps in prepared.static.items()
    }
    durations = {engine: _durations(of) for engine, of in facts.items()}
    while len(prepared.facts) >= KEPT_CONFIGS:
        del prepared.facts[next(iter(prepared.facts))]
    found = prepared.facts[key] = CoreFacts(facts, durations)
    return found


def _durations(facts: list[Facts]) -> Durations:
    def column(field: int) -> np.ndarray:
        return np.fromiter((f[field] for f in facts), np.int64, len(facts))

    return Durations(column(0), column(1), column(2))


def port_indices(spec: MachineSpec) -> dict[str, int]:
    """Index of each shared port a run has (``CoreState.shared_port_free_tick``): the registered
    memory ports the config turns on (``hwsim.engines.SharedPort``), then the hardware DGE blocks,
    one per triggering sequencer (§2.5 [S13])."""
    names = [port.name for port in shared_ports() if port.active(spec.config)]
    return {name: i for i, name in enumerate([*names, "dge.sync", "dge.scalar"])}


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


class _FactsCache:
    """Legality and cost of each distinct instruction, worked out once.

    Instructions from the builder name their twin (``STATIC_TWIN``: the first instruction emitted
    with the same static key) and are found by its identity; others by ``static_key()``, which
    costs hashing and comparing their operands.
    """

    def __init__(
        self, spec: MachineSpec, dma: DmaCostModel, program: Program, ports: dict[str, int]
    ) -> None:
        self.spec, self.dma, self.program, self.ports = spec, dma, program, ports
        self._by_twin: dict[int, Facts] = {}  # twins live as long as the program: ids are stable
        self._by_key: dict[tuple[Any, ...], Facts] = {}

    def of(self, instruction: Instruction) -> Facts:
        twin = instruction.__dict__.get(STATIC_TWIN)
        if twin is None:
            return self._by_static_key(instruction)
        facts = self._by_twin.get(id(twin))
        if facts is None:
            facts = self._by_twin[id(twin)] = self._by_static_key(instruction)
        return facts

    def _by_static_key(self, instruction: Instruction) -> Facts:
        key = instruction.static_key()
        facts = self._by_key.get(key)
        if facts is None:
            facts = self._by_key[key] = _work_out(
                instruction, self.spec, self.dma, self.program, self.ports
            )
        return facts


def _work_out(
    instruction: Instruction,
    spec: MachineSpec,
    dma: DmaCostModel,
    program: Program,
    indices: dict[str, int],
) -> Facts:
    """Legality checks, then the instruction's static facts (``Facts``)."""
    instruction.check(spec)
    _check_hbm_operands(instruction, program)
    plan = None
    submit = hold = 0
    if instruction.IS_DMA:
        sides = instruction.transfer()  # type: ignore[attr-defined]
        plan = plan_transfer(dma, spec.config.dma.engines, instruction.queue, sides)  # type: ignore[attr-defined]
        cost, submit, hold = instruction.trigger_cost(spec, sum(p.descriptors for p in plan.pieces))  # type: ignore[attr-defined]
    else:
        cost = instruction.cost(spec)
    latency = max(cost.latency_ticks, cost.issue_ticks)
    chain = latency if cost.chain_ticks is None else min(latency, cost.chain_ticks)
    ports = _ports_used(instruction, spec, indices)
    if hold:
        ports = (*ports, indices[_dge_port(instruction.engine)])
    return cost.issue_ticks, latency, chain, ports, hold or cost.issue_ticks, plan, submit


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


def _dge_port(engine: str) -> str:
    return "dge.scalar" if engine == "scalar" else "dge.sync"


def _ports_used(
    instruction: Instruction, spec: MachineSpec, indices: dict[str, int]
) -> tuple[int, ...]:
    if instruction.IS_DMA:
        return ()
    memories = {ap.memory for ap in (*instruction.reads(), *instruction.writes())}
    return tuple(
        indices[port.name]
        for port in shared_ports()
        if port.name in indices and instruction.engine in port.engines and port.memory in memories
    )
