"""Run a program on a hardware config: engines as SimPy processes, <= 1 event per instruction.

Each engine runs its in-order stream: wait until its semaphores reach their values, take a shared
access port if the config has one (NeuronCore-v2 sharing rules), start, occupy the engine for the
issue interval, and schedule its semaphore increments at start + latency. Everything static (costs,
semaphore indices, port use, DMA splits) is computed once per program before the clock starts.
How an engine sits on SimPy (its own clock ahead of SimPy's while nothing else is due, one
reused wake-up event, its loop resumed by SimPy's loop directly) is ``hwsim.machine.process``.
"""

from __future__ import annotations

import dataclasses
import struct
from array import array
from bisect import bisect_left
from collections.abc import Collection, Generator, Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import Any

import numpy as np
import simpy
from simpy.events import NORMAL

from hwsim.config import HardwareConfig, config_hash, load_config
from hwsim.cost import CostModel, InstructionCost, RuleConstants
from hwsim.cost.dma import TransferPlan
from hwsim.engines import engine_spec
from hwsim.errors import (
    ConfigError,
    DeadlockError,
    HwsimError,
    IllegalInstructionError,
)
from hwsim.isa.ap import MemorySpace
from hwsim.isa.base import Instruction, MachineSpec
from hwsim.isa.multicore_ops import SendRecv, parse_remote
from hwsim.machine.collectives import CollectiveRunner, Fabric, LocalFabric
from hwsim.machine.dma import DmaSystem, DmaTransfer
from hwsim.machine.initcheck import InitChecker, size_mirrors
from hwsim.machine.initcheck import enabled as initcheck_enabled
from hwsim.machine.lnc import LncExchange
from hwsim.machine.prepare import (
    Durations,
    PreparedCore,
    StaticSteps,
    costs_of_core,
    prepare_core,
)
from hwsim.machine.process import EngineLoop, Wakeup
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
    rules: RuleConstants | None = None,
    fabric: Fabric | None = None,
    core_ids: Sequence[int] | None = None,
    inputs_read_in_place: Collection[str] = (),
    hbm_held: Sequence[tuple[int, int, int]] = (),
) -> RunResult:
    """Simulate ``program`` on ``config``.

    Program core k is physical core ``core_ids[k]`` (default k): cores are numbered chip by chip
    (``hwsim.config.topology_schema``), and a run may span the chips of an instance. A
    collective's group names physical cores; its ranks meet in ``fabric`` (default: the cores of
    this run; ``torch.distributed`` ranks pass one joining ranks simulated elsewhere).

    numerics=False is timing-only mode (no values computed; outputs are not returned).
    race_check=True reports unordered conflicting accesses by different engines (RaceError).
    initcheck=True reports every read of never-written memory (InitCheckError, at the end of
    the run; ``hwsim.machine.initcheck``); None takes it from ``HWSIM_INITCHECK`` (0 or 1).
    rules: the cost rule constants (``hwsim.cost.parameters``); default: the config generation's.
    inputs_read_in_place: HBM inputs whose values the run reads where they are instead of
    copying them (``Hbm.add``'s ``read_in_place``): arrays nothing else writes, such as weights
    the caller prepared for this run; the program must not write them.
    hbm_held: (program core, tick, bytes) that work beside the run (a rank's collectives between
    its graphs) takes of that core's HBM stack from that tick on, reserved as a DMA piece
    reserves it (``DmaSystem.reserve``): the run's DMAs starting after it wait for it.
    """
    if isinstance(config, str):
        config = load_config(config)
    model = CostModel.for_config(config, rules)
    spec = model.spec
    ids = _core_ids(program, config, core_ids)
    env = simpy.Environment()
    trace = Trace(base_mhz=spec.timebase.base_mhz, config=config)
    trace.meta.update(program.meta)
    trace.meta["config_name"] = config.chip.name
    trace.meta["config_hash"] = config_hash(config)
    trace.memory_allocations = [
        (a.core, a.memory, a.name, a.start_partition, a.partitions, a.offset_bytes, a.size_bytes)
        for a in program.allocations
    ]
    chips = 1 + max(ids) // config.chip.cores_per_chip
    hbm = Hbm(config.hbm.stacks * chips, config.hbm.capacity_bytes_per_stack)
    owners = program.meta.get("tensor_cores", {})  # ``hwsim.chip.TENSOR_CORES``
    hbm.reserve_arena(program.scratch_arena_bytes)
    for decl in program.hbm.values():
        values = decl.values if numerics else None
        planned = decl.address_bytes is not None
        written = decl.kind == "input" or values is not None  # what initcheck counts as written
        owner = owners.get(decl.name)
        stack = 0 if owner is None else _stack_of(config, ids[owner])
        hbm.add(
            decl.name,
            decl.shape,
            decl.dtype,
            values,
            stack,
            planned=planned,
            initialised=written,
            read_in_place=decl.name in inputs_read_in_place,
        )
    race = RaceChecker() if race_check else None
    init = InitChecker() if initcheck_enabled(initcheck, numerics) else None
    with cyclic_gc_paused():
        try:
            runners, banks = _simulate(
                env, model, program, hbm, trace, numerics, race, init, fabric, ids, hbm_held
            )
        except HwsimError as error:  # uninitialised reads before it may be what went wrong
            if init is not None:
                init.raise_if_findings(stopped_by=error)
            raise
        except _TickOverflow as stop:  # stopped at the first tick the int64 logs cannot hold
            raise ConfigError(_past_int64(config, spec, stop.tick, stopped=True)) from None
        except OverflowError:  # the same, met by a DMA completion
            raise ConfigError(_past_int64(config, spec, int(env.now), stopped=True)) from None
        last_tick = max([int(env.now), *(runner.end_tick for runner in runners)])
        if last_tick > MAX_TRACE_TICK:
            raise ConfigError(_past_int64(config, spec, last_tick))
        blocked = [runner for runner in runners if not runner.finished]
        if blocked:
            raise DeadlockError(_deadlock_message(blocked))
        trace.collectives = [
            record
            for runner in runners
            if isinstance(runner, CollectiveRunner)
            for record in runner.records
        ]
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
        if trace.collectives:  # compute, communication and exposed communication per core
            from hwsim.trace.communication import communication_report

            extras = {**result.summary.extras, "communication": communication_report(trace)}
            result.summary = dataclasses.replace(result.summary, extras=extras)
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
    model: CostModel,
    program: Program,
    hbm: Hbm,
    trace: Trace,
    numerics: bool,
    race: RaceChecker | None,
    init: InitChecker | None,
    fabric: Fabric | None,
    core_ids: list[int],
    hbm_held: Sequence[tuple[int, int, int]] = (),
) -> tuple[list[Any], list[SemaphoreBank]]:
    """Prepare every engine's stream, run the clock until nothing is left to do."""
    spec = model.spec
    dma = _make_dma_system(env, model, [_stack_of(model.config, core) for core in core_ids])
    for core, tick, nbytes in hbm_held:
        dma.reserve_at(core, tick, nbytes)
    runners: list[Any] = []
    banks: list[SemaphoreBank] = []
    states: list[CoreState] = []
    prepared_cores = [prepare_core(program, core) for core in range(len(program.cores))]
    for core, prepared in enumerate(prepared_cores):
        state = CoreState(
            spec.memory_capacity(MemorySpace.SBUF),
            spec.memory_capacity(MemorySpace.PSUM),
            hbm,
            core,
        )
        state.shared_port_free_tick = [0] * len(model.port_names)
        if init is not None:
            size_mirrors(state, program.cores[core].streams)
        states.append(state)
        names = prepared.semaphore_names
        banks.append(SemaphoreBank(env, names, core=core, clocks=race is not None))
    _link_remote_semaphores(banks)
    handshake = model.timebase.ns_to_ticks(model.config.topology.remote_semaphore_ns)
    exchange = LncExchange(dma, states, numerics, handshake)
    local = LocalFabric()
    for core, prepared in enumerate(prepared_cores):
        costs = costs_of_core(program, prepared, model)
        core_program, sems, state = program.cores[core], banks[core], states[core]
        for engine, static in prepared.static.items():
            runner: Any
            if engine_spec(engine).kind == "collective":
                runner = CollectiveRunner(
                    env, core, core_ids[core], engine, core_program.streams[engine],  # type: ignore[arg-type]
                    static,
                    costs.costs[engine], sems, state, numerics, fabric or local, model, init,
                    dma,
                )  # fmt: skip
            else:
                runner = _EngineRunner(
                    env, core, engine, core_program.streams[engine], static,
                    costs.costs[engine], sems, dma, state, numerics, race, init,
                )  # fmt: skip
                runner.durations = costs.durations[engine]
                runner.exchange = exchange
            runner.prepared = prepared
            runner.start()
            runners.append(runner)
    env.run()
    trace.dma = dma.records()
    return runners, banks


def _link_remote_semaphores(banks: list[SemaphoreBank]) -> None:
    """Point each remote semaphore name a core signals (``@<core>:<name>``) at that core's
    semaphore."""
    for bank in banks:
        for index, name in enumerate(list(bank.names)):
            remote = parse_remote(name)
            if remote is None:
                continue
            core, own = remote
            if not 0 <= core < len(banks) or core == bank.core:
                raise IllegalInstructionError(
                    f"core {bank.core} signals semaphore '{own}' of core {core}: the program's "
                    f"other cores are {[b.core for b in banks if b is not bank]}"
                )
            peer = banks[core]
            bank.link_remote(index, peer, peer.index[own])


def _core_ids(program: Program, config: HardwareConfig, given: Sequence[int] | None) -> list[int]:
    """The physical core of each program core, checked."""
    cores = len(program.cores)
    ids = list(range(cores)) if given is None else [int(c) for c in given]
    limit = config.chip.cores_per_chip * config.topology.chips_per_instance
    if len(ids) != cores or len(set(ids)) != cores or min(ids, default=0) < 0:
        raise IllegalInstructionError(
            f"core_ids {ids}: one distinct physical core per program core ({cores})"
        )
    if given is None and cores > limit:
        raise IllegalInstructionError(
            f"program uses {cores} cores; one run of {config.chip.name} holds at most "
            f"{limit} ({config.chip.cores_per_chip} per chip x "
            f"{config.topology.chips_per_instance} chips of an instance)"
        )
    return ids


def _stack_of(config: HardwareConfig, core_id: int) -> int:
    """The HBM stack (numbered chip by chip) of physical core ``core_id``."""
    chip, core = divmod(core_id, config.chip.cores_per_chip)
    return chip * config.hbm.stacks + core // config.hbm.cores_per_stack


def _make_dma_system(
    env: simpy.Environment, model: CostModel, stack_of_core: list[int]
) -> DmaSystem:
    return DmaSystem(
        env,
        cores=len(stack_of_core),
        engines=model.dma.engines,
        start_latency_ticks=model.dma.start_latency_ticks,
        hbm_denominator=model.dma.hbm_ticks_per_byte.denominator,
        cores_per_stack=model.config.hbm.cores_per_stack,
        stack_of_core=stack_of_core,
        hbm_units_per_byte=model.dma.hbm_ticks_per_byte.numerator,
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


class _EngineRunner(EngineLoop):
    """One engine's SimPy process and what it needs; holds no statistics (the trace does)."""

    def __init__(
        self,
        env: simpy.Environment,
        core: int,
        engine: str,
        stream: list[Instruction],
        static: StaticSteps,
        costs: list[InstructionCost],
        sems: SemaphoreBank,
        dma: DmaSystem,
        state: CoreState,
        numerics: bool,
        race: RaceChecker | None,
        init: InitChecker | None,
    ) -> None:
        self.env, self.core, self.engine, self.stream = env, core, engine, stream
        self.static, self.costs = static, costs
        self.sems, self.dma, self.state = sems, dma, state
        self.numerics, self.race, self.init = numerics, race, init
        self.blocked_on: tuple[int, int] | None = None
        self.blocked_reason = ""
        self.exchange: LncExchange
        self.port_free_tick = state.shared_port_free_tick
        #: Per pc started: when a dependent instruction of this engine may start (its start plus
        #: its chain ticks). The one tick recorded per instruction: the trace's columns are
        #: derived from it and the stream's durations when the run ends.
        self.chain_ready = array("q")
        self.durations: Durations
        self.prepared: PreparedCore
        self.wakeup: Wakeup
        #: Whether the loop ran to its end, and the last tick it reached.
        self.finished = False
        self.end_tick = 0

    def steps(self) -> Generator[None, Any, None]:
        """The engine's loop, started and resumed by its ``Wakeup`` (``hwsim.machine.process``):
        it keeps its own clock (``now``) ahead of SimPy's (``base``, the tick it was last
        resumed at), and yields only once it has scheduled the wake-up or handed it to a
        semaphore, whenever another event is due (``due``) at or before the tick it goes to."""
        env, sems, static, wakeup = self.env, self.sems, self.static, self.wakeup
        resumes, schedule_event, peek = wakeup.resumes, env.schedule, env.peek
        schedule, source = sems.schedule, sems.source_code(self.engine)
        ticks_of, totals_of = sems.tick_lists(), sems.total_lists()
        lowest_waiting, log_add, entry = sems.lowest_waiting, sems.log.frombytes, LOG_ENTRY.pack
        inline = not sems.keep_clocks and not sems.remote  # remote updates go via schedule
        ports = self.port_free_tick
        begins = self.numerics or self.race is not None  # an instruction starts with _begin
        chain_ready, chain_append = self.chain_ready, self.chain_ready.append
        last_done = end = 0  # end: the previous instruction's end, when the engine reaches the
        #                      next (it starts at tick 0; each instruction resumes it at its end)
        base, due = 0, peek()  # SimPy's clock, and when its next event is due (refreshed
        #                        whenever the loop may have added one, or was resumed)
        clock = None
        try:
            for pc, waits, chain, signals, (
                issue, latency, chain_ticks, ports_used, hold, plan, submit,
            ) in zip(count(), static.waits, static.chains, static.signals, self.costs):  # fmt: skip
                now = end
                if chain >= 0 and chain_ready[chain] > now:  # streams behind its producer
                    now = chain_ready[chain]
                    if due <= now:  # sleep until now
                        wakeup.callbacks = resumes
                        schedule_event(wakeup, NORMAL, now - base)
                        yield
                        base, due = now, peek()
                for sem, value in waits:
                    totals = totals_of[sem]  # time_reaching, inlined: once per wait of a program
                    if totals[-1] >= value:
                        reach = ticks_of[sem][bisect_left(totals, value)]
                    else:  # not scheduled yet: sleep until it is
                        reach, now = yield from self._blocked(sem, value)
                        base, due = now, peek()
                    if reach > now:
                        now = reach
                        if due <= now:  # sleep until now
                            wakeup.callbacks = resumes
                            schedule_event(wakeup, NORMAL, now - base)
                            yield
                            base, due = now, peek()
                if ports_used:
                    for port in ports_used:
                        if ports[port] > now:
                            now = ports[port]
                            if due <= now:  # sleep until now
                                wakeup.callbacks = resumes
                                schedule_event(wakeup, NORMAL, now - base)
                                yield
                                base, due = now, peek()
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
                                due = base  # the woken loops resume at SimPy's clock
                        else:
                            schedule(sem, done, amount, source, pc, clock)
                            due = peek()
                else:  # a DMA trigger: its semaphores count completed transfers
                    self._submit_dma(pc, plan, signals, start + submit, start, clock)
                    due = peek()
                end = start + issue
                if due <= end:  # sleep until the instruction's end
                    wakeup.callbacks = resumes
                    schedule_event(wakeup, NORMAL, end - base)
                    yield
                    base, due = end, peek()
        except (OverflowError, struct.error):  # a tick past int64: the logs hold int64 ticks
            env.event().fail(_TickOverflow(max(now + latency, last_done)))  # the tick it met
        except Exception as error:
            env.event().fail(error)  # SimPy raises it from env.run
        else:
            self.finished = True
            self.end_tick = max(end, last_done)
        wakeup.let_go()
        yield  # for good: nothing schedules the wake-up again, so SimPy never resumes it

    def _blocked(self, sem: int, value: int) -> Generator[None, Any, tuple[int, int]]:
        """Sleep until increments of ``sem`` reaching ``value`` are scheduled (``SemaphoreBank.
        wake``); (the tick they reach it, SimPy's clock when woken)."""
        self.blocked_on = (sem, value)
        self.sems.wait_for(sem, value, self.wakeup)
        yield
        self.blocked_on = None
        return self.wakeup.reached, int(self.env.now)

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
        submit: int,
        now: int,
        clock: Any,
    ) -> None:
        schedule, dma = self.sems.schedule, self.sems.source_code("dma")
        instruction = self.stream[pc]
        if self.race is not None:
            clock = self.race.dma_clock(self.core, plan.queue, clock, instruction)

        def complete(tick: int) -> None:
            for sem, amount in completion_signals:
                schedule(sem, tick, amount, dma, pc, clock)

        if isinstance(instruction, SendRecv):  # paired with its peers' (``hwsim.machine.lnc``)
            self.exchange.arrive(
                self.core, pc, self.engine, instruction, plan, submit, now, complete
            )
            return
        transfer = DmaTransfer(self.core, plan.queue, self.engine, pc, complete)
        self.dma.submit(transfer, plan, submit, now)


def _deadlock_message(blocked: list[Any]) -> str:
    lines = []
    for runner in blocked:
        instruction = runner.stream[runner.pc]
        where = f"core {runner.core} {runner.engine}[{runner.pc}] {instruction.label()}"
        if runner.blocked_on is None:
            lines.append(f"{where}: {runner.blocked_reason or 'blocked'}")
            continue
        sem, needed = runner.blocked_on
        name = runner.sems.names[sem]
        have = runner.sems.scheduled_total(sem)
        lines.append(f"{where} waits for semaphore {name} >= {needed} (value {have})")
    return "deadlock: the run ended with instructions still waiting: " + "; ".join(lines)
