"""Run a program on a hardware config: engines as SimPy processes, one event per instruction.

Each engine runs its in-order stream: wait until its semaphores reach their values, take a shared
access port if the config has one (NeuronCore-v2 sharing rules), start, occupy the engine for the
issue interval, and schedule its semaphore increments at start + latency. Everything static (costs,
semaphore indices, port use, DMA splits) is computed once per program before the clock starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import simpy

from hwsim.config import HardwareConfig, config_hash, load_config
from hwsim.errors import DeadlockError, IllegalInstructionError, MemoryAccessError
from hwsim.isa.ap import MemorySpace
from hwsim.isa.base import ENGINES, Instruction, MachineSpec
from hwsim.machine.dma import DmaSystem, DmaTransfer
from hwsim.machine.race import RaceChecker
from hwsim.machine.semaphores import SemaphoreBank
from hwsim.machine.state import CoreState, Hbm
from hwsim.program import Program
from hwsim.trace.records import InstructionRecord, SemaphoreUpdate, Trace


@dataclass
class RunResult:
    """Outputs (HBM tensors declared as outputs, as numpy arrays), the trace, and its summary."""

    outputs: dict[str, np.ndarray]
    trace: Trace
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Static:
    """Per-instruction facts computed once per program and config."""

    issue: list[int]
    latency: list[int]
    waits: list[tuple[tuple[int, int], ...]]
    signals: list[tuple[tuple[int, int], ...]]
    ports: list[tuple[int, ...]]
    dma: list[tuple[Any, ...] | None]


def run(
    program: Program,
    config: HardwareConfig | str = "trn2",
    *,
    numerics: bool = True,
    race_check: bool = False,
    summarize: bool = True,
) -> RunResult:
    """Simulate ``program`` on ``config``.

    numerics=False is timing-only mode (no values computed; outputs are not returned).
    race_check=True reports unordered conflicting accesses by different engines (RaceError).
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
    for decl in program.hbm.values():
        hbm.add(decl.name, decl.shape, decl.dtype, decl.values if numerics else None)
    race = RaceChecker() if race_check else None
    dma = _make_dma_system(env, spec, len(program.cores), trace)
    engine_procs = []
    for core, core_program in enumerate(program.cores):
        state = CoreState(
            spec.memory_capacity(MemorySpace.SBUF),
            spec.memory_capacity(MemorySpace.PSUM),
            hbm,
            core,
        )
        names = _semaphore_names(core_program.streams.values())
        sems = SemaphoreBank(env, names)
        sems.on_update = _semaphore_recorder(trace, core, names)
        for engine in ENGINES:
            stream = core_program.streams.get(engine, [])
            if not stream:
                continue
            static = _prepare(stream, spec, sems, dma, program)
            runner = _EngineRunner(
                env, core, engine, stream, static, sems, dma, state, trace, numerics, race
            )
            engine_procs.append((runner, env.process(runner.process())))
    env.run()
    blocked = [runner for runner, proc in engine_procs if proc.is_alive]
    if blocked:
        raise DeadlockError(_deadlock_message(blocked))
    if race is not None:
        race.raise_if_races()
    trace.instructions.sort(key=lambda r: (r.core, ENGINES.index(r.engine), r.pc))
    trace.semaphore_updates.sort(key=lambda u: (u.core, u.tick))
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


def _make_dma_system(
    env: simpy.Environment, spec: MachineSpec, cores: int, trace: Trace
) -> DmaSystem:
    config = spec.config
    ticks_per_ns = Fraction(spec.timebase.base_mhz, 1000)
    return DmaSystem(
        env,
        cores=cores,
        engines=config.dma.engines,
        queues_per_engine=config.dma.queues_per_engine,
        ticks_per_byte=ticks_per_ns / Fraction(str(config.dma.bandwidth_bytes_per_ns)),
        descriptor_ticks=ticks_per_ns * Fraction(str(config.dma.descriptor_overhead_ns)),
        start_latency_ticks=spec.timebase.ns_to_ticks(config.dma.start_latency_ns),
        hbm_ticks_per_byte=ticks_per_ns
        / Fraction(str(config.hbm.bandwidth_bytes_per_ns_per_stack)),
        cores_per_stack=config.hbm.cores_per_stack,
        records=trace.dma,
    )


def _semaphore_names(streams: Iterable[list[Instruction]]) -> list[str]:
    names: dict[str, None] = {}
    for stream in streams:
        for instruction in stream:
            for name, _ in instruction.waits:
                names.setdefault(name)
            for name, _ in instruction.signals:
                names.setdefault(name)
    return list(names)


def _semaphore_recorder(trace: Trace, core: int, names: list[str]):
    updates = trace.semaphore_updates

    def record(tick: int, sem: int, value: int, source: tuple[str, int]) -> None:
        updates.append(SemaphoreUpdate(core, tick, names[sem], value, source[0], source[1]))

    return record


def _prepare(
    stream: list[Instruction],
    spec: MachineSpec,
    sems: SemaphoreBank,
    dma: DmaSystem,
    program: Program,
) -> _Static:
    """Check legality and compute static costs once per program (not per simulated step)."""
    config = spec.config
    issue, latency, waits, signals, ports, dmas = [], [], [], [], [], []
    # Instructions differing only in their semaphores share legality and cost: compute once.
    known: dict[tuple[Any, ...], tuple[int, int, tuple[int, ...], Any]] = {}
    sem_index = sems.index
    for instruction in stream:
        key = instruction.static_key()
        facts = known.get(key)
        if facts is None:
            instruction.check(spec)
            _check_hbm_operands(instruction, program)
            cost = instruction.cost(spec)
            plan = instruction.dma_plan(spec, dma.split) if instruction.IS_DMA else None  # type: ignore[attr-defined]
            facts = (
                cost.issue_ticks,
                max(cost.latency_ticks, cost.issue_ticks),
                _ports_used(instruction, config),
                plan,
            )
            known[key] = facts
        issue.append(facts[0])
        latency.append(facts[1])
        ports.append(facts[2])
        dmas.append(facts[3])
        waits.append(tuple((sem_index[name], value) for name, value in instruction.waits))
        signals.append(tuple((sem_index[name], amount) for name, amount in instruction.signals))
    return _Static(issue, latency, waits, signals, ports, dmas)


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


#: Shared access ports of NeuronCore-v2 (HARDWARE.md §1.4): index 0 = SBUF port shared by VectorE
#: and GpSimdE, index 1 = PSUM port shared by VectorE and ScalarE.
_SBUF_PORT, _PSUM_PORT = 0, 1


def _ports_used(instruction: Instruction, config: HardwareConfig) -> tuple[int, ...]:
    if instruction.IS_DMA:
        return ()
    memories = {ap.memory for ap in (*instruction.reads(), *instruction.writes())}
    used = []
    if (
        config.sbuf.vector_gpsimd_share_access
        and instruction.engine in ("vector", "gpsimd")
        and MemorySpace.SBUF in memories
    ):
        used.append(_SBUF_PORT)
    if (
        config.psum.vector_scalar_share_access
        and instruction.engine in ("vector", "scalar")
        and MemorySpace.PSUM in memories
    ):
        used.append(_PSUM_PORT)
    return tuple(used)


class _EngineRunner:
    """One engine's SimPy process and what it needs; holds no statistics (the trace does)."""

    def __init__(
        self,
        env: simpy.Environment,
        core: int,
        engine: str,
        stream: list[Instruction],
        static: _Static,
        sems: SemaphoreBank,
        dma: DmaSystem,
        state: CoreState,
        trace: Trace,
        numerics: bool,
        race: RaceChecker | None,
    ) -> None:
        self.env, self.core, self.engine, self.stream = env, core, engine, stream
        self.static, self.sems, self.dma, self.state = static, sems, dma, state
        self.trace, self.numerics, self.race = trace, numerics, race
        self.pc = 0
        self.blocked_on: tuple[int, int] | None = None
        self.port_free_tick = _shared_ports(state)

    def process(self):
        env, sems, static, core, engine = self.env, self.sems, self.static, self.core, self.engine
        records = self.trace.instructions
        ports = self.port_free_tick
        last_done = 0
        race = self.race
        for pc, instruction in enumerate(self.stream):
            self.pc = pc
            ready = int(env.now)
            for sem, value in static.waits[pc]:
                reach = sems.time_reaching(sem, value)
                if reach is None:
                    self.blocked_on = (sem, value)
                    reach = yield sems.wait_for(sem, value)
                    self.blocked_on = None
                if reach > env.now:
                    yield env.timeout(reach - env.now)
            issue = static.issue[pc]
            for port in static.ports[pc]:
                if ports[port] > env.now:
                    yield env.timeout(ports[port] - env.now)
            start = int(env.now)
            for port in static.ports[pc]:
                ports[port] = start + issue
            clock = (
                race.begin(core, engine, pc, instruction, static.waits[pc], sems) if race else None
            )
            if self.numerics:
                instruction.execute(self.state)
            done = max(start + static.latency[pc], last_done)
            last_done = done
            plan = static.dma[pc]
            if plan is None:
                for sem, amount in static.signals[pc]:
                    sems.schedule(sem, done, amount, (engine, pc), clock)
            else:  # a DMA trigger: its semaphores count completed transfers
                self._submit_dma(pc, instruction, plan, static.signals[pc], start, clock)
            records.append(
                InstructionRecord(core, engine, pc, instruction, ready, start, start + issue, done)
            )
            yield env.timeout(issue)
        self.pc = len(self.stream)

    def _submit_dma(
        self,
        pc: int,
        instruction: Instruction,
        plan: tuple[Any, ...],
        completion_signals: tuple[tuple[int, int], ...],
        start: int,
        clock: Any,
    ) -> None:
        queue, pieces, hbm_factor, bandwidth_scale = plan
        sems, engine = self.sems, self.engine
        race = self.race
        if race is not None:
            clock = race.dma_clock(self.core, queue, clock, instruction)

        def complete(tick: int) -> None:
            for sem, amount in completion_signals:
                sems.schedule(sem, tick, amount, ("dma", pc), clock)

        transfer = DmaTransfer(self.core, queue, engine, pc, hbm_factor, bandwidth_scale, complete)
        self.dma.submit(transfer, pieces, start)


def _shared_ports(state: CoreState) -> list[int]:
    """Per-core shared-port free ticks (one list per core, shared by its engines)."""
    ports: list[int] | None = getattr(state, "shared_port_free_tick", None)
    if ports is None:
        ports = [0, 0]
        state.shared_port_free_tick = ports  # type: ignore[attr-defined]
    return ports


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
