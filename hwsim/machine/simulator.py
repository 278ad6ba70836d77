"""Run a program on a hardware config: engines as SimPy processes, <= 1 event per instruction.

Each engine runs its in-order stream: wait until its semaphores reach their values, take a shared
access port if the config has one (NeuronCore-v2 sharing rules), start, occupy the engine for the
issue interval, and schedule its semaphore increments at start + latency. Everything static (costs,
semaphore indices, port use, DMA splits) is computed once per program before the clock starts.
A process that would sleep until a tick before which no other event is due moves the clock there
itself instead (``_advance_to``): same ticks, same order, one SimPy event fewer. Otherwise it
sleeps on one reused event (``_Wakeup``) queued as ``env.timeout`` would queue a new one, and
waits for a semaphore on it too; SimPy's loop resumes the process by calling its generator
directly (``_EngineProcess``).
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from fractions import Fraction
from heapq import heappush
from itertools import count
from typing import Any

import numpy as np
import simpy
from simpy.events import NORMAL, Initialize

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
    StaticSteps,
    facts_of_core,
    port_indices,
    prepare_core,
)
from hwsim.machine.race import RaceChecker
from hwsim.machine.semaphores import LOG_ENTRY, SemaphoreBank
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
            runner.proc = _EngineProcess(env, runner.steps)
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
        static: StaticSteps,
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
        self.proc: _EngineProcess | None = None

    @property
    def pc(self) -> int:
        """The instruction the engine is at: the first not yet started."""
        return len(self.chain_ready)

    def steps(self, process: _EngineProcess) -> Generator[None, _Wakeup | None, None]:
        """The engine's loop, run by ``process`` (``_EngineProcess``: it ends by telling the
        process, and yields only once it has queued its ``_Wakeup`` to be resumed by)."""
        env, sems, static = self.env, self.sems, self.static
        resumes, queue, eid = process.resumes, env._queue, env._eid  # as _Wakeup uses them
        wakeup = _Wakeup(env, resumes)
        schedule, source = sems.schedule, sems.source_code(self.engine)
        ticks_of, totals_of = sems.tick_lists(), sems.total_lists()
        lowest_waiting, log_add, entry = sems.lowest_waiting, sems.log.frombytes, LOG_ENTRY.pack
        inline = not sems.keep_clocks
        ports = self.port_free_tick
        begins = self.numerics or self.race is not None  # an instruction starts with _begin
        chain_ready, chain_append = self.chain_ready, self.chain_ready.append
        last_done = end = 0  # end: the previous instruction's end, when the engine reaches the
        #                      next (it starts at tick 0; each instruction resumes it at its end)
        clock = None
        try:
            for pc, waits, chain, signals, (
                issue, latency, chain_ticks, ports_used, hold, plan, submit,
            ) in zip(count(), static.waits, static.chains, static.signals, self.facts):  # fmt: skip
                now = end
                if chain >= 0 and chain_ready[chain] > now:  # streams behind its producer
                    now = chain_ready[chain]
                    if wakeup.sleeps_until(now):
                        yield
                for sem, value in waits:
                    totals = totals_of[sem]  # time_reaching, inlined: once per wait of a program
                    if totals[-1] >= value:
                        reach = ticks_of[sem][bisect_left(totals, value)]
                    else:  # not scheduled yet: sleep until it is
                        reach, now = yield from self._blocked(sem, value, wakeup)
                    if reach > now:
                        now = reach
                        if wakeup.sleeps_until(now):
                            yield
                if ports_used:
                    for port in ports_used:
                        if ports[port] > now:
                            now = ports[port]
                            if wakeup.sleeps_until(now):
                                yield
                    for port in ports_used:
                        ports[port] = now + hold
                start = now
                chain_append(start + chain_ticks)
                if begins:
                    clock = self._begin(pc, waits)
                done = start + latency
                if done < last_done:
                    done = last_done
                last_done = done
                if plan is None:
                    for sem, amount in signals:
                        ticks = ticks_of[sem]
                        if inline and done >= ticks[-1]:  # SemaphoreBank.schedule's usual case
                            totals = totals_of[sem]
                            value = totals[-1] + amount
                            ticks.append(done)
                            totals.append(value)
                            log_add(entry(done, sem, value, pc, source))
                            lowest = lowest_waiting[sem]
                            if lowest and value >= lowest:
                                sems.wake(sem)
                        else:
                            schedule(sem, done, amount, source, pc, clock)
                else:  # a DMA trigger: its semaphores count completed transfers
                    self._submit_dma(pc, plan, signals, start + submit, clock)
                end = start + issue
                if queue and queue[0][0] <= end:  # wakeup.sleeps_until(end), inlined
                    wakeup.callbacks = resumes
                    heappush(queue, (end, NORMAL, next(eid), wakeup))
                    yield
                else:
                    env._now = end
        except (OverflowError, struct.error):  # a tick past int64: the logs hold int64 ticks
            process.fail(_TickOverflow(max(now + latency, last_done)))  # the tick it met
        except Exception as error:
            process.fail(error)
        else:
            process.finish()
        yield  # for good: nothing queues the wake-up again, so SimPy's loop never resumes it

    def _blocked(
        self, sem: int, value: int, wakeup: _Wakeup
    ) -> Generator[None, Any, tuple[int, int]]:
        """Sleep until increments of ``sem`` reaching ``value`` are scheduled (``SemaphoreBank.
        wake``); (the tick they reach it, now)."""
        self.blocked_on = (sem, value)
        self.sems.wait_for(sem, value, wakeup)
        yield
        self.blocked_on = None
        return wakeup._value, int(self.env._now)  # the tick SemaphoreBank.wake gave succeed

    def _begin(self, pc: int, waits: tuple[tuple[int, int], ...]) -> Any:
        """What an instruction does as it starts when checking races or computing values: the
        race checker's clock of it (None when not checking), and its execution."""
        instruction = self.stream[pc]
        clock = None
        if self.race is not None:
            clock = self.race.begin(self.core, self.engine, pc, instruction, waits, self.sems)
        if self.numerics:
            if self.init is None:
                instruction.execute(self.state)
            else:  # initcheck: check the reads, execute, mark the writes
                self.init.execute(self.state, pc, instruction)
        return clock

    def _submit_dma(
        self,
        pc: int,
        plan: TransferPlan,
        completion_signals: tuple[tuple[int, int], ...],
        start: int,
        clock: Any,
    ) -> None:
        schedule, dma = self.sems.schedule, self.sems.source_code("dma")
        if self.race is not None:
            clock = self.race.dma_clock(self.core, plan.queue, clock, self.stream[pc])

        def complete(tick: int) -> None:
            for sem, amount in completion_signals:
                schedule(sem, tick, amount, dma, pc, clock)

        transfer = DmaTransfer(self.core, plan.queue, self.engine, pc, complete)
        self.dma.submit(transfer, plan, start)


class _EngineProcess(simpy.Process):
    """An engine's SimPy process, resumed by SimPy's loop calling its generator's ``send``.

    ``simpy.Process`` resumes its generator from its ``_resume``, which SimPy's loop calls for
    each event the generator yields: a Python call per event, and a new bound method appended to
    the event's callbacks. Here every event the engine loop sleeps on is queued with the one
    callbacks list ``resumes`` (``[generator.send]``), so a resumption is SimPy's loop calling
    ``send`` (SimPy's loop reads that list and sets the event's own attribute to None; it never
    changes the list, so one list serves every sleep). ``_resume`` is called once, by the
    ``Initialize`` event that starts the process, as SimPy starts any.

    What ``Process._resume`` does when its generator ends or raises, the loop does itself
    (``finish``, ``fail``): it never returns or raises into SimPy's loop (a StopIteration or an
    exception from a callback would leave ``env.run`` as is), and the failed process is raised
    from ``env.run`` as SimPy raises any. Then it drops the generator (``_let_go``). It is not
    interruptible (nothing interrupts engines).
    """

    def __init__(
        self,
        env: simpy.Environment,
        steps: Callable[[_EngineProcess], Generator[None, _Wakeup | None, None]],
    ) -> None:
        # simpy.Process.__init__, inlined as SimPy inlines Event.__init__
        self.env = env
        self.callbacks: list[Callable[[simpy.Event], None]] = []
        self._name = steps.__qualname__
        self._loop: Generator[None, _Wakeup | None, None] | None = steps(self)
        #: The callbacks of every event the loop sleeps on.
        self.resumes = [self._loop.send]
        self._target = Initialize(env, self)  # scheduled as ``env.process`` schedules its start

    @property
    def name(self) -> str:
        return self._name

    def _resume(self, event: simpy.Event) -> None:
        """Start the loop (the ``Initialize`` event's callback)."""
        assert self._loop is not None
        self._loop.send(None)

    def finish(self) -> None:
        """The loop is done: succeed, as ``Process._resume`` does at the generator's end."""
        self.succeed()
        self._let_go()

    def fail(self, exception: Exception) -> _EngineProcess:
        """The loop raised ``exception``: fail, as ``Process._resume`` does (SimPy's loop raises
        it from ``env.run`` when it processes this process)."""
        super().fail(exception)
        self._let_go()
        return self

    def _let_go(self) -> None:
        """Drop every reference to the generator but the ``send`` running now: once it returns
        to SimPy's loop the generator is closed (at its last yield) and its frame freed with the
        run's per-pc state it holds, instead of living on in a cycle until a collection."""
        self.resumes.clear()  # SimPy's loop is iterating it: it has called its one callback
        self._loop = None


class _Wakeup(simpy.Event):
    """The one event an engine process sleeps on, scheduled again each time it sleeps.

    In place of a new ``env.timeout(delay)`` per sleep: the process pushes this event on SimPy's
    heap with the entry ``Environment.schedule`` would make for that timeout (``(now + delay,
    NORMAL, next event id, event)``), so it is processed at the same tick in the same order, as
    the timeout would. It is also the event a wait for a semaphore sleeps on (``succeed``, in
    place of a new event per wait). It is reused only once it has been processed (the process
    sleeps on it again after it resumed the process), so one is never queued twice.

    ``resumes``: the callbacks list it is queued with (``_EngineProcess.resumes``); None for a
    process of ``env.process``, which adds its own callback to a new list each time.
    """

    def __init__(
        self, env: simpy.Environment, resumes: list[Callable[[Any], Any]] | None = None
    ) -> None:
        super().__init__(env)
        self._ok, self._value = True, None  # triggered, with a timeout's value
        self.resumes = resumes
        # SimPy's event heap of (tick, priority, id, event), and its event ids (as
        # ``Environment.schedule`` uses them).
        self._queue, self._eid = env._queue, env._eid

    def sleeps_until(self, tick: int) -> bool:
        """Reach ``tick``: True when the process must yield this event (queued for ``tick``,
        since another event is due at or before it), False when the clock was moved there
        instead (``_advance_to``: nothing else would run in between)."""
        queue = self._queue
        if queue and queue[0][0] <= tick:
            self.callbacks = self.resumes if self.resumes is not None else []
            heappush(queue, (tick, NORMAL, next(self._eid), self))
            return True
        self.env._now = tick  # _advance_to, inlined
        return False

    def succeed(self, value: Any = None) -> _Wakeup:
        """Resume the process now with ``value`` (a semaphore's reaching tick): queued as
        ``Event.succeed`` queues an event (``(now, NORMAL, next event id, event)``), without
        its check that the event was not triggered before (this one is, once per sleep)."""
        self._value = value
        self.callbacks = self.resumes if self.resumes is not None else []
        heappush(self._queue, (self.env._now, NORMAL, next(self._eid), self))
        return self


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
