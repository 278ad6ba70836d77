"""Run a program on a hardware config: engines as SimPy processes, <= 1 event per instruction.

Each engine runs its in-order stream: wait until its semaphores reach their values, take a shared
access port if the config has one (NeuronCore-v2 sharing rules), start, occupy the engine for the
issue interval, and schedule its semaphore increments at start + latency. Everything static (costs,
semaphore indices, port use, DMA splits) is computed once per program before the clock starts.
A process that would sleep until a tick before which no other event is due moves the clock there
itself instead (``_advance_to``): same ticks, same order, one SimPy event fewer.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from operator import itemgetter
from typing import Any

import numpy as np
import simpy

from hwsim.builder import STATIC_TWIN, engine_semaphore
from hwsim.config import HardwareConfig, config_hash, load_config
from hwsim.engines import engine_names, shared_ports
from hwsim.errors import (
    ConfigError,
    DeadlockError,
    HwsimError,
    IllegalInstructionError,
    MemoryAccessError,
)
from hwsim.isa.ap import MemorySpace
from hwsim.isa.base import Instruction, MachineSpec
from hwsim.machine.dma import DmaSystem, DmaTransfer
from hwsim.machine.dma_plan import DmaCostModel, TransferPlan, plan_transfer
from hwsim.machine.initcheck import InitChecker, size_mirrors
from hwsim.machine.initcheck import enabled as initcheck_enabled
from hwsim.machine.race import RaceChecker
from hwsim.machine.semaphores import SemaphoreBank
from hwsim.machine.state import CoreState, Hbm
from hwsim.program import Program
from hwsim.trace.records import InstructionRecord, SemaphoreUpdate, Trace

#: Last tick a trace can hold: its analyses keep ticks in int64 arrays. The config's bounds keep
#: real runs far below; a run of thousands of worst-case instructions on the slowest clock with
#: the largest time base could still pass it, and is refused rather than overflowing.
MAX_TRACE_TICK = (1 << 63) - 1


@dataclass
class RunResult:
    """Outputs (HBM tensors declared as outputs, as numpy arrays), the trace, and its summary."""

    outputs: dict[str, np.ndarray]
    trace: Trace
    summary: dict[str, Any] = field(default_factory=dict)


#: What an instruction costs, computed once per distinct instruction and config: (issue ticks,
#: latency ticks, chain ticks (a same-engine dependent may start), shared ports used, ticks it
#: holds them, DMA plan or None, ticks from start until the transfer is submitted).
_Facts = tuple[int, int, int, tuple[int, ...], int, TransferPlan | None, int]
#: One instruction ready to run: (instruction, semaphore waits as (index, value), the pc of its
#: latest same-engine producer or -1, signals as (index, amount)) + its facts.
_Step = tuple[
    Instruction,
    tuple[tuple[int, int], ...],
    int,
    tuple[tuple[int, int], ...],
    int,
    int,
    int,
    tuple[int, ...],
    int,
    TransferPlan | None,
    int,
]


def run(
    program: Program,
    config: HardwareConfig | str = "trn2",
    *,
    numerics: bool = True,
    race_check: bool = False,
    initcheck: bool | None = None,
    summarize: bool = True,
) -> RunResult:
    """Simulate ``program`` on ``config``.

    numerics=False is timing-only mode (no values computed; outputs are not returned).
    race_check=True reports unordered conflicting accesses by different engines (RaceError).
    initcheck=True reports every read of never-written memory (InitCheckError, at the end of
    the run; ``hwsim.machine.initcheck``); None takes it from ``HWSIM_INITCHECK`` (0 or 1).
    """
    if isinstance(config, str):
        config = load_config(config)
    spec = MachineSpec(config)
    if len(program.cores) > config.chip.cores_per_chip:
        raise IllegalInstructionError(
            f"program uses {len(program.cores)} cores; {config.chip.name} has "
            f"{config.chip.cores_per_chip} per chip"
        )
    env = simpy.Environment()
    trace = Trace(base_mhz=spec.timebase.base_mhz, config=config)
    trace.meta.update(program.meta)
    trace.meta["config_name"] = config.chip.name
    trace.meta["config_hash"] = config_hash(config)
    trace.memory_allocations = [
        (a.core, a.memory, a.name, a.start_partition, a.partitions, a.offset_bytes, a.size_bytes)
        for a in program.allocations
    ]
    hbm = Hbm(config.hbm.stacks, config.hbm.capacity_bytes_per_stack)
    hbm.reserve_arena(program.scratch_arena_bytes)
    for decl in program.hbm.values():
        values = decl.values if numerics else None
        planned = decl.address_bytes is not None
        written = decl.kind == "input" or values is not None  # what initcheck counts as written
        hbm.add(decl.name, decl.shape, decl.dtype, values, planned=planned, initialised=written)
    race = RaceChecker() if race_check else None
    init = InitChecker() if initcheck_enabled(initcheck, numerics) else None
    with _cyclic_gc_paused():
        try:
            runners, banks = _simulate(env, spec, program, hbm, trace, numerics, race, init)
        except HwsimError as error:  # uninitialised reads before it may be what went wrong
            if init is not None:
                init.raise_if_findings(stopped_by=error)
            raise
        if env.now > MAX_TRACE_TICK:
            raise ConfigError(
                f"{config.chip.name}: the run lasted {env.now} ticks of "
                f"{spec.timebase.base_mhz} MHz, past the int64 ticks of a trace; use clocks "
                "with a smaller LCM or shorter latencies"
            )
        blocked = [runner for runner in runners if runner.proc is not None and runner.proc.is_alive]
        if blocked:
            raise DeadlockError(_deadlock_message(blocked))
        if race is not None:
            race.raise_if_races()
        if init is not None:
            init.check_outputs(hbm, [d.name for d in program.hbm.values() if d.kind == "output"])
            init.raise_if_findings()
        # Runners are in (core, engine) order and each records in pc order: the trace's order.
        for runner in runners:
            trace.instructions.extend(runner.records)
        for sems in banks:
            trace.semaphore_updates.extend(_semaphore_records(sems))
        del runners, banks  # before the collector resumes: it scans what is still alive
    outputs = {
        decl.name: hbm.tensors[decl.name].as_array().copy()
        for decl in program.hbm.values()
        if decl.kind == "output" and numerics
    }
    result = RunResult(outputs, trace)
    if summarize:
        from hwsim.trace.stats import summarize as summarize_trace

        result.summary = summarize_trace(trace)
    return result


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the run, restoring its state after.

    A run allocates an object or more per instruction and keeps every trace record alive, so the
    collector's passes over the growing heap cost as much as the simulation itself (measured: half
    the wall time of a 140k-instruction run). Nothing needs it meanwhile: the run's garbage is
    freed by reference counting (an event drops its callbacks once processed); the few cycles left
    (one per SimPy process) are collected after.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _simulate(
    env: simpy.Environment,
    spec: MachineSpec,
    program: Program,
    hbm: Hbm,
    trace: Trace,
    numerics: bool,
    race: RaceChecker | None,
    init: InitChecker | None,
) -> tuple[list[_EngineRunner], list[SemaphoreBank]]:
    """Prepare every engine's stream, run the clock until nothing is left to do."""
    dma = _make_dma_system(env, spec, len(program.cores), trace)
    runners: list[_EngineRunner] = []
    banks: list[SemaphoreBank] = []
    dma_model = DmaCostModel(
        spec.config.dma, spec.timebase.base_mhz, spec.config.hbm.bandwidth_bytes_per_ns_per_stack
    )
    # shared by every stream: legality and cost once each
    facts = _FactsCache(spec, dma_model, program)
    for core, core_program in enumerate(program.cores):
        state = CoreState(
            spec.memory_capacity(MemorySpace.SBUF),
            spec.memory_capacity(MemorySpace.PSUM),
            hbm,
            core,
        )
        state.shared_port_free_tick = [0] * len(facts.ports)
        if init is not None:
            size_mirrors(state, core_program.streams)
        sems = SemaphoreBank(env, core=core)  # semaphores are added as _prepare meets them
        banks.append(sems)
        for engine in engine_names():
            stream = core_program.streams.get(engine, [])
            if not stream:
                continue
            steps = _prepare(stream, sems, facts, engine)
            runner = _EngineRunner(
                env, core, engine, stream, steps, sems, dma, state, numerics, race, init
            )
            runner.proc = env.process(runner.process())
            runners.append(runner)
    env.run()
    return runners, banks


def _make_dma_system(
    env: simpy.Environment, spec: MachineSpec, cores: int, trace: Trace
) -> DmaSystem:
    config = spec.config
    hbm_ticks_per_byte = Fraction(spec.timebase.base_mhz, 1000) / Fraction(
        str(config.hbm.bandwidth_bytes_per_ns_per_stack)
    )
    return DmaSystem(
        env,
        cores=cores,
        engines=config.dma.engines,
        start_latency_ticks=spec.timebase.ns_to_ticks(config.dma.start_latency_ns),
        hbm_denominator=hbm_ticks_per_byte.denominator,
        cores_per_stack=config.hbm.cores_per_stack,
        records=trace.dma,
    )


def _semaphore_records(sems: SemaphoreBank) -> list[SemaphoreUpdate]:
    """A bank's updates by tick, ties in the order they were scheduled."""
    return sorted(sems.updates, key=itemgetter(1))


class _FactsCache:
    """Legality and cost of each distinct instruction of a run, worked out once.

    Instructions from the builder name their twin (``STATIC_TWIN``: the first instruction emitted
    with the same static key) and are found by its identity; others by ``static_key()``, which
    costs hashing and comparing their operands.
    """

    def __init__(self, spec: MachineSpec, dma: DmaCostModel, program: Program) -> None:
        self.spec, self.dma, self.program = spec, dma, program
        self.ports = _port_indices(spec.config)
        self._by_twin: dict[int, _Facts] = {}  # twins live as long as the program: ids are stable
        self._by_key: dict[tuple[Any, ...], _Facts] = {}

    def of(self, instruction: Instruction) -> _Facts:
        twin = instruction.__dict__.get(STATIC_TWIN)
        if twin is None:
            return self._by_static_key(instruction)
        facts = self._by_twin.get(id(twin))
        if facts is None:
            facts = self._by_twin[id(twin)] = self._by_static_key(instruction)
        return facts

    def _by_static_key(self, instruction: Instruction) -> _Facts:
        key = instruction.static_key()
        facts = self._by_key.get(key)
        if facts is None:
            facts = self._by_key[key] = _work_out(
                instruction, self.spec, self.dma, self.program, self.ports
            )
        return facts


def _prepare(
    stream: list[Instruction], sems: SemaphoreBank, facts: _FactsCache, engine: str
) -> list[_Step]:
    """Each instruction with its semaphore indices and static facts, for the engine loop.

    A wait on the engine's own completion semaphore (a same-engine RAW dependency, which the
    builder records like any other) becomes a *chain* wait on its producer's pc: the engine
    streams the consumer behind it (``Cost.chain_ticks``) instead of waiting for completion.
    """
    steps: list[_Step] = []
    append = steps.append
    facts_of = facts.of
    sem_index = sems.index
    own = engine_semaphore(engine)
    # The pc of each instruction that counts one completion of the engine's own semaphore (not
    # its DMA triggers, which count on their queues): a wait for count k streams behind the k-th.
    signal_pcs: list[int] = []
    translated: dict[tuple[tuple[str, int], ...], tuple[tuple[int, int], ...]] = {}
    for pc, instruction in enumerate(stream):
        signals = translated.get(instruction.signals)
        if signals is None:  # most instructions signal alike: share one tuple
            signals = translated[instruction.signals] = tuple(
                [(sem_index[name], amount) for name, amount in instruction.signals]
            )
        waits: tuple[tuple[int, int], ...] = ()
        chain = -1
        if instruction.waits:
            waits = tuple(
                [
                    (sem_index[name], value)
                    for name, value in instruction.waits
                    if name != own or value > len(signal_pcs)  # a later one: a deadlock
                ]
            )
            for name, value in instruction.waits:
                if name == own and 0 < value <= len(signal_pcs):
                    chain = max(chain, signal_pcs[value - 1])
        if any(name == own for name, _ in instruction.signals):
            signal_pcs.append(pc)
        issue, latency, chain_ticks, ports, hold, plan, submit = facts_of(instruction)
        append(
            (
                instruction,
                waits,
                chain,
                signals,
                issue,
                latency,
                chain_ticks,
                ports,
                hold,
                plan,
                submit,
            )
        )
    return steps


def _work_out(
    instruction: Instruction,
    spec: MachineSpec,
    dma: DmaCostModel,
    program: Program,
    indices: dict[str, int],
) -> _Facts:
    """Legality checks, then the instruction's static facts (``_Facts``)."""
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
    ports = _ports_used(instruction, spec.config, indices)
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


def _port_indices(config: HardwareConfig) -> dict[str, int]:
    """Index of each shared port a run has (``CoreState.shared_port_free_tick``): the registered
    memory ports the config turns on (``hwsim.engines.SharedPort``), then the hardware DGE blocks,
    one per triggering sequencer (§2.5 [S13])."""
    names = [port.name for port in shared_ports() if port.active(config)]
    return {name: i for i, name in enumerate([*names, "dge.sync", "dge.scalar"])}


def _dge_port(engine: str) -> str:
    return "dge.scalar" if engine == "scalar" else "dge.sync"


def _ports_used(
    instruction: Instruction, config: HardwareConfig, indices: dict[str, int]
) -> tuple[int, ...]:
    if instruction.IS_DMA:
        return ()
    memories = {ap.memory for ap in (*instruction.reads(), *instruction.writes())}
    return tuple(
        indices[port.name]
        for port in shared_ports()
        if port.name in indices and instruction.engine in port.engines and port.memory in memories
    )


class _EngineRunner:
    """One engine's SimPy process and what it needs; holds no statistics (the trace does)."""

    def __init__(
        self,
        env: simpy.Environment,
        core: int,
        engine: str,
        stream: list[Instruction],
        steps: list[_Step],
        sems: SemaphoreBank,
        dma: DmaSystem,
        state: CoreState,
        numerics: bool,
        race: RaceChecker | None,
        init: InitChecker | None,
    ) -> None:
        self.env, self.core, self.engine, self.stream = env, core, engine, stream
        self.steps, self.sems, self.dma, self.state = steps, sems, dma, state
        self.numerics, self.race, self.init = numerics, race, init
        self.pc = 0
        self.blocked_on: tuple[int, int] | None = None
        self.port_free_tick = state.shared_port_free_tick
        #: Per pc already started: when a dependent instruction of this engine may start.
        self.chain_ready: list[int] = []
        self.records: list[InstructionRecord] = []
        self.proc: simpy.Process | None = None

    def process(self):
        env, sems, core, engine = self.env, self.sems, self.core, self.engine
        timeout, peek = env.timeout, env.peek
        time_reaching, schedule = sems.time_reaching, sems.schedule
        append = self.records.append
        make_record = tuple.__new__
        ports = self.port_free_tick
        state = self.state if self.numerics else None
        race, init = self.race, self.init
        chain_ready = self.chain_ready
        last_done = 0
        clock = None
        # Sleeping until ``t`` when no event is due at or before ``t`` would wake this process
        # next, with nothing else run in between: so it advances the clock itself instead (see
        # ``_advance_to``), which is what makes one SimPy event per instruction an upper bound.
        for pc, step in enumerate(self.steps):
            (
                instruction,
                waits,
                chain,
                signals,
                issue,
                latency,
                chain_ticks,
                ports_used,
                hold,
                plan,
                submit,
            ) = step
            self.pc = pc
            ready = now = int(env.now)
            if chain >= 0 and chain_ready[chain] > now:  # streams behind its producer
                behind = chain_ready[chain]
                if peek() > behind:
                    _advance_to(env, behind)
                else:
                    yield timeout(behind - now)
                now = behind
            for sem, value in waits:
                reach = time_reaching(sem, value)
                if reach is None:
                    self.blocked_on = (sem, value)
                    reach = yield sems.wait_for(sem, value)
                    self.blocked_on = None
                    now = int(env.now)
                if reach > now:
                    if peek() > reach:
                        _advance_to(env, reach)
                    else:
                        yield timeout(reach - now)
                    now = reach
            for port in ports_used:
                if ports[port] > now:
                    if peek() > ports[port]:
                        _advance_to(env, ports[port])
                    else:
                        yield timeout(ports[port] - now)
                    now = int(env.now)
            start = now
            for port in ports_used:
                ports[port] = start + hold
            chain_ready.append(start + chain_ticks)
            if race is not None:
                clock = race.begin(core, engine, pc, instruction, waits, sems)
            if state is not None:
                if init is None:
                    instruction.execute(state)
                else:  # initcheck: check the reads, execute, mark the writes
                    init.execute(state, pc, instruction)
            done = start + latency
            if done < last_done:
                done = last_done
            last_done = done
            if plan is None:
                for sem, amount in signals:
                    schedule(sem, done, amount, (engine, pc), clock)
            else:  # a DMA trigger: its semaphores count completed transfers
                self._submit_dma(pc, instruction, plan, signals, start + submit, clock)
            end = start + issue
            append(
                make_record(
                    InstructionRecord, (core, engine, pc, instruction, ready, start, end, done)
                )
            )
            if peek() > end:
                _advance_to(env, end)
            else:
                yield timeout(issue)
        self.pc = len(self.steps)

    def _submit_dma(
        self,
        pc: int,
        instruction: Instruction,
        plan: TransferPlan,
        completion_signals: tuple[tuple[int, int], ...],
        start: int,
        clock: Any,
    ) -> None:
        sems = self.sems
        if self.race is not None:
            clock = self.race.dma_clock(self.core, plan.queue, clock, instruction)

        def complete(tick: int) -> None:
            for sem, amount in completion_signals:
                sems.schedule(sem, tick, amount, ("dma", pc), clock)

        transfer = DmaTransfer(self.core, plan.queue, self.engine, pc, complete)
        self.dma.submit(transfer, plan, start)


def _advance_to(env: simpy.Environment, tick: int) -> None:
    """Move the clock to ``tick`` from inside a process, in place of ``yield env.timeout(...)``.

    Only when ``env.peek() > tick``: no other event is due before or at ``tick``, so the timeout
    would be the next event processed, resuming this process at ``tick`` with nothing run in
    between. Skipping it changes no tick and no order of anything (event ids only break ties
    between events due at the same tick, and all later ones shift alike). SimPy offers no public
    way to do this; ``_now`` is its clock (``Environment.now`` returns it).
    """
    env._now = tick


def _deadlock_message(blocked: list[_EngineRunner]) -> str:
    lines = []
    for runner in blocked:
        instruction = runner.stream[runner.pc]
        where = f"core {runner.core} {runner.engine}[{runner.pc}] {instruction.label()}"
        if runner.blocked_on is None:
            lines.append(f"{where}: blocked")
            continue
        sem, needed = runner.blocked_on
        name = runner.sems.names[sem]
        have = runner.sems.scheduled_total(sem)
        lines.append(f"{where} waits for semaphore {name} >= {needed} (value {have})")
    return "deadlock: the run ended with instructions still waiting: " + "; ".join(lines)
