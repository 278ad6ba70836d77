"""Run a program on a hardware config: engines as SimPy processes, <= 1 event per instruction.

Each engine runs its in-order stream: wait until its semaphores reach their values, take a shared
access port if the config has one (NeuronCore-v2 sharing rules), start, occupy the engine for the
issue interval, and schedule its semaphore increments at start + latency. Everything static (costs,
semaphore indices, port use, DMA splits) is computed once per program before the clock starts.
A process that would sleep until a tick before which no other event is due moves the clock there
itself instead (``_advance_to``): same ticks, same order, one SimPy event fewer. Otherwise it
sleeps on one reused event (``_Wakeup``) queued as ``env.timeout`` would queue a new one.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from dataclasses import dataclass, field
from fractions import Fraction
from heapq import heappush
from typing import Any

import numpy as np
import simpy
from simpy.events import NORMAL

from hwsim.config import HardwareConfig, config_hash, load_config
from hwsim.errors import (
    ConfigError,
    DeadlockError,
    HwsimError,
    IllegalInstructionError,
)
from hwsim.isa.ap import MemorySpace
from hwsim.isa.base import Instruction, MachineSpec
from hwsim.machine.dma import DmaSystem, DmaTransfer
from hwsim.machine.dma_plan import TransferPlan
from hwsim.machine.initcheck import InitChecker, size_mirrors
from hwsim.machine.initcheck import enabled as initcheck_enabled
from hwsim.machine.prepare import (
    Durations,
    Facts,
    PreparedCore,
    Static,
    facts_of_core,
    port_indices,
    prepare_core,
)
from hwsim.machine.race import RaceChecker
from hwsim.machine.semaphores import SemaphoreBank
from hwsim.machine.state import CoreState, Hbm
from hwsim.program import Program
from hwsim.trace.columns import InstructionColumns, SemaphoreColumns, concatenated
from hwsim.trace.gc_pause import cyclic_gc_paused
from hwsim.trace.records import Trace
from hwsim.trace.summary import RunSummary

#: Last tick a trace can hold: its analyses keep ticks in int64 arrays. The config's bounds keep
#: real runs far below; a run of thousands of worst-case instructions on the slowest clock with
#: the largest time base could still pass it, and is refused rather than overflowing.
MAX_TRACE_TICK = (1 << 63) - 1


@dataclass
class RunResult:
    """Outputs (HBM tensors declared as outputs, as numpy arrays), the trace, and its summary."""

    outputs: dict[str, np.ndarray]
    trace: Trace
    #: All defaults (an empty summary) when run with summarize=False.
    summary: RunSummary = field(default_factory=RunSummary)


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
    with cyclic_gc_paused():
        try:
            runners, banks = _simulate(env, spec, program, hbm, trace, numerics, race, init)
        except HwsimError as error:  # uninitialised reads before it may be what went wrong
            if init is not None:
                init.raise_if_findings(stopped_by=error)
            raise
        except _TickOverflow as stop:  # stopped at the first tick the int64 logs cannot hold
            raise ConfigError(_past_int64(config, spec, stop.tick, stopped=True)) from None
        except OverflowError:  # the same, met by a DMA completion
            raise ConfigError(_past_int64(config, spec, int(env.now), stopped=True)) from None
        if env.now > MAX_TRACE_TICK:
            raise ConfigError(_past_int64(config, spec, int(env.now)))
        blocked = [runner for runner in runners if runner.proc is not None and runner.proc.is_alive]
        if blocked:
            raise DeadlockError(_deadlock_message(blocked))
        if race is not None:
            race.raise_if_races()
        if init is not None:
            init.check_outputs(hbm, [d.name for d in program.hbm.values() if d.kind == "output"])
            init.raise_if_findings()
        # Runners are in (core, engine) order and each records in pc order: the trace's order.
        trace.instructions = _instruction_columns(runners)
        trace.semaphore_updates = concatenated(SemaphoreColumns, [s.records() for s in banks])
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


class _TickOverflow(Exception):
    """An engine reached a tick past int64 (``tick``), which its trace log cannot hold."""

    def __init__(self, tick: int) -> None:
        super().__init__(tick)
        self.tick = tick


def _past_int64(config: HardwareConfig, spec: MachineSpec, tick: int, stopped: bool = False) -> str:
    at = " (stopped there)" if stopped else ""
    return (
        f"{config.chip.name}: the run lasted {tick} ticks of {spec.timebase.base_mhz} MHz, "
        f"past the int64 ticks of a trace{at}; use clocks with a smaller LCM or shorter latencies"
    )


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
    dma = _make_dma_system(env, spec, len(program.cores))
    runners: list[_EngineRunner] = []
    banks: list[SemaphoreBank] = []
    ports = port_indices(spec)
    for core in range(len(program.cores)):
        prepared = prepare_core(program, core)
        facts = facts_of_core(program, prepared, spec, ports)
        state = CoreState(
            spec.memory_capacity(MemorySpace.SBUF),
            spec.memory_capacity(MemorySpace.PSUM),
            hbm,
            core,
        )
        state.shared_port_free_tick = [0] * len(ports)
        core_program = program.cores[core]
        if init is not None:
            size_mirrors(state, core_program.streams)
        sems = SemaphoreBank(env, prepared.semaphore_names, core=core, clocks=race is not None)
        banks.append(sems)
        for engine, static in prepared.static.items():
            runner = _EngineRunner(
                env, core, engine, core_program.streams[engine], static, facts.facts[engine],
                sems, dma, state, numerics, race, init,
            )  # fmt: skip
            runner.durations, runner.prepared = facts.durations[engine], prepared
            runner.proc = env.process(runner.process())
            runners.append(runner)
    env.run()
    trace.dma = dma.records()
    return runners, banks


def _make_dma_system(env: simpy.Environment, spec: MachineSpec, cores: int) -> DmaSystem:
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
    )


def _instruction_columns(runners: list[_EngineRunner]) -> InstructionColumns:
    """The instruction records of every runner (all done: the run ended without a deadlock),
    from the one tick each recorded per instruction (``_EngineRunner.chain_ready``) and the
    stream's durations: start = chain ready - chain ticks, end = start + issue, done = the
    running maximum of start + latency (completions stay in order), ready = the previous end.
    Filled in place, each runner's ticks freed once read: a 1M-instruction run's peak memory."""
    total = sum(len(runner.stream) for runner in runners)
    names = ("core", "engine", "pc", "ready_tick", "start_tick", "end_tick", "done_tick", "fact")
    cols = {name: np.empty(total, np.int64) for name in names}
    engines: dict[str, int] = {}
    instructions: list[Instruction] = []
    fact_index: dict[Any, int] = {}
    fact_first: list[Any] = []
    at = 0
    for runner in runners:
        count = len(runner.stream)
        here = slice(at, at + count)
        durations: Durations = runner.durations
        start = cols["start_tick"][here]
        np.subtract(np.frombuffer(runner.chain_ready, np.int64), durations.chain, out=start)
        runner.chain_ready = array("q")
        end = cols["end_tick"][here]
        np.add(start, durations.issue, out=end)
        ready = cols["ready_tick"][here]
        ready[:1] = 0  # a process starts at tick 0; then each reaches the next at the last's end
        ready[1:] = end[:-1]
        np.maximum.accumulate(start + durations.latency, out=cols["done_tick"][here])
        cols["core"][here] = runner.core
        cols["engine"][here] = engines.setdefault(runner.engine, len(engines))
        cols["pc"][here] = np.arange(count)
        instructions.extend(runner.stream)
        ids, keys, first = runner.prepared.summary_keys[runner.engine]
        remap = []
        for key, instruction in zip(keys, first, strict=True):
            if key not in fact_index:  # first met in this stream: the trace's next distinct key
                fact_index[key] = len(fact_first)
                fact_first.append(instruction)
            remap.append(fact_index[key])
        cols["fact"][here] = np.array(remap, np.int64)[ids] if count else ids
        at += count
    engine, fact = cols.pop("engine"), cols.pop("fact")
    return InstructionColumns(
        cols,
        {"engine": (engine, list(engines))},
        {"instruction": instructions},
        fact_keys=(fact, fact_first),
    )


class _EngineRunner:
    """One engine's SimPy process and what it needs; holds no statistics (the trace does)."""

    def __init__(
        self,
        env: simpy.Environment,
        core: int,
        engine: str,
        stream: list[Instruction],
        static: list[Static],
        facts: list[Facts],
        sems: SemaphoreBank,
        dma: DmaSystem,
        state: CoreState,
        numerics: bool,
        race: RaceChecker | None,
        init: InitChecker | None,
    ) -> None:
        self.env, self.core, self.engine, self.stream = env, core, engine, stream
        self.static, self.facts = static, facts
        self.sems, self.dma, self.state = sems, dma, state
        self.numerics, self.race, self.init = numerics, race, init
        self.blocked_on: tuple[int, int] | None = None
        self.port_free_tick = state.shared_port_free_tick
        #: Per pc started: when a dependent instruction of this engine may start (its start plus
        #: its chain ticks). The one tick recorded per instruction: the trace's columns are
        #: derived from it and the stream's durations when the run ends.
        self.chain_ready = array("q")
        self.durations: Durations
        self.prepared: PreparedCore
        self.proc: simpy.Process | None = None

    @property
    def pc(self) -> int:
        """The instruction the engine is at: the first not yet started."""
        return len(self.chain_ready)

    def process(self):
        env, sems, engine = self.env, self.sems, self.engine
        wakeup = _Wakeup(env)
        schedule, source = sems.schedule, sems.source_code(engine)
        ticks_of, totals_of = sems.tick_lists(), sems.total_lists()
        lowest_waiting, log_extend = sems.lowest_waiting, sems.log.extend
        inline = not sems.keep_clocks
        ports = self.port_free_tick
        state = self.state if self.numerics else None
        race, init = self.race, self.init
        chain_ready = self.chain_ready
        chain_append = chain_ready.append
        last_done = 0
        end = 0  # the previous instruction's end: when the engine reaches the next (a process
        #          starts at tick 0, and each instruction resumes it exactly at its end)
        clock = None
        # Sleeping until ``t`` when no event is due at or before ``t`` would wake this process
        # next, with nothing else run in between: so it advances the clock itself instead (see
        # ``_advance_to``), which is what makes one SimPy event per instruction an upper bound.
        # Otherwise it sleeps on its one ``_Wakeup``, scheduled as ``env.timeout`` would be.
        try:
            for pc, (
                (instruction, waits, chain, signals),
                (issue, latency, chain_ticks, ports_used, hold, plan, submit),
            ) in enumerate(zip(self.static, self.facts, strict=True)):
                now = end
                if chain >= 0 and chain_ready[chain] > now:  # streams behind its producer
                    now = chain_ready[chain]
                    if wakeup.sleeps_until(now):
                        yield wakeup
                for sem, value in waits:
                    totals = totals_of[sem]  # time_reaching, inlined: once per wait of a program
                    if value <= 0:
                        continue
                    if totals and totals[-1] >= value:
                        reach = ticks_of[sem][bisect_left(totals, value)]
                    else:
                        self.blocked_on = (sem, value)
                        reach = yield sems.wait_for(sem, value)
                        self.blocked_on = None
                        now = int(env._now)
                    if reach > now:
                        now = reach
                        if wakeup.sleeps_until(now):
                            yield wakeup
                if ports_used:
                    for port in ports_used:
                        if ports[port] > now:
                            now = ports[port]
                            if wakeup.sleeps_until(now):
                                yield wakeup
                    for port in ports_used:
                        ports[port] = now + hold
                start = now
                chain_append(start + chain_ticks)
                if race is not None:
                    clock = race.begin(self.core, engine, pc, instruction, waits, sems)
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
                        ticks = ticks_of[sem]
                        if inline and (not ticks or done >= ticks[-1]):
                            # SemaphoreBank.schedule's common case, inlined (once per instruction):
                            # an increment in tick order, no clocks kept
                            totals = totals_of[sem]
                            value = (totals[-1] if totals else 0) + amount
                            ticks.append(done)
                            totals.append(value)
                            log_extend((done, sem, value, pc, source))
                            lowest = lowest_waiting[sem]
                            if lowest and value >= lowest:
                                sems.wake(sem)
                        else:
                            schedule(sem, done, amount, source, pc, clock)
                else:  # a DMA trigger: its semaphores count completed transfers
                    self._submit_dma(pc, instruction, plan, signals, start + submit, clock)
                end = start + issue
                if wakeup.sleeps_until(end):
                    yield wakeup
        except OverflowError:  # a tick past int64: the trace's logs hold int64 ticks
            raise _TickOverflow(max(now + latency, last_done)) from None  # the tick it met

    def _submit_dma(
        self,
        pc: int,
        instruction: Instruction,
        plan: TransferPlan,
        completion_signals: tuple[tuple[int, int], ...],
        start: int,
        clock: Any,
    ) -> None:
        schedule, dma = self.sems.schedule, self.sems.source_code("dma")
        if self.race is not None:
            clock = self.race.dma_clock(self.core, plan.queue, clock, instruction)

        def complete(tick: int) -> None:
            for sem, amount in completion_signals:
                schedule(sem, tick, amount, dma, pc, clock)

        transfer = DmaTransfer(self.core, plan.queue, self.engine, pc, complete)
        self.dma.submit(transfer, plan, start)


class _Wakeup(simpy.Event):
    """The one event an engine process sleeps on, scheduled again each time it sleeps.

    In place of a new ``env.timeout(delay)`` per sleep: the process pushes this event on SimPy's
    heap with the entry ``Environment.schedule`` would make for that timeout (``(now + delay,
    NORMAL, next event id, event)``), so it is processed at the same tick in the same order and
    resumes the process with None, as the timeout would. It is reused only once it has been
    processed (the process sleeps on it again after it resumed the process), so one is never
    queued twice; ``callbacks`` is renewed before each push, as a new event's would be.
    """

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self._ok, self._value = True, None  # triggered, with a timeout's value
        # SimPy's event heap of (tick, priority, id, event), and its event ids (as
        # ``Environment.schedule`` uses them).
        self._queue, self._eid = env._queue, env._eid

    def sleeps_until(self, tick: int) -> bool:
        """Reach ``tick``: True when the process must yield this event (queued for ``tick``,
        since another event is due at or before it), False when the clock was moved there
        instead (``_advance_to``: nothing else would run in between)."""
        queue = self._queue
        if queue and queue[0][0] <= tick:
            self.callbacks = []
            heappush(queue, (tick, NORMAL, next(self._eid), self))
            return True
        self.env._now = tick  # _advance_to, inlined
        return False


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
