"""``CostModel``: what each instruction costs on one config, built once per config.

Everything that needs a cost asks it: the simulator's preparation (``model.of`` per distinct
instruction of a program), the list scheduler (``model.estimate``), trace statistics (the DMA
efficiency curve); a kernel's build asks ``hwsim.cost.planning`` (the same DMA plans and rules,
reading only the fields it needs). Nothing else computes one.

A config value reaches a cost in one place: ``CostModel.__init__`` turns the config into exact
per-engine and per-DMA rates once (``DmaCosts``, the time base, ``RuleConstants``); ``of`` looks
up the instruction's rule (``hwsim.cost.rules``, registered by instruction type) and turns its
``Cost`` into the ``InstructionCost`` the engine loop unpacks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any

from hwsim.config import HardwareConfig, config_hash
from hwsim.cost.collectives import CollectiveCosts
from hwsim.cost.constants import RuleConstants, rules_for
from hwsim.cost.dma import DmaCosts
from hwsim.cost.rules.registry import rule_for
from hwsim.cost.values import Cost, Estimate, InstructionCost
from hwsim.engines import engine_names, shared_ports
from hwsim.isa.base import STATIC_TWIN, Instruction, MachineSpec

#: Configs whose models stay built (a sweep moves on; a repeated run or a benchmark does not).
KEPT_MODELS = 8
#: Distinct instructions whose costs a model keeps; past it the memo starts again (a process
#: that builds many programs on one config must not keep every one's instructions alive).
KEPT_COSTS = 1 << 18
#: The descriptor-generation blocks a DMA trigger of each engine holds (hardware DGE, one per
#: triggering sequencer, HARDWARE.md §2.5 [S13]); they come after the memory ports.
DGE_PORTS = {"sync": "dge.sync", "scalar": "dge.scalar"}


class CostModel:
    """The costs of instructions on ``config`` (``for_config``: one per config and rules).

    config, spec:   the config, and what legality checks read of it (``MachineSpec``).
    timebase:       the integer time base (engine cycles as ticks).
    rules:          the documented rule constants of the config's generation (``RuleConstants``).
    dma:            DMA and HBM rates, and the transfer plans (``DmaCosts``).
    collectives:    collectives on the topology (``CollectiveCosts``), made at first use.
    port_names:     the shared ports a run has (``InstructionCost.ports`` index them).
    """

    def __init__(self, config: HardwareConfig, rules: RuleConstants | None = None) -> None:
        self.config = config
        self.spec = MachineSpec(config)
        self.timebase = self.spec.timebase
        self.rules = rules_for(config.chip.generation) if rules is None else rules
        #: Compute engines' config sections, by engine name (their cost rules' parameters).
        self.engine_configs = self.spec.engine_configs
        self.dma = DmaCosts(config, self.timebase)
        memory_ports = [port.name for port in shared_ports() if port.active(config)]
        self.port_names: tuple[str, ...] = (*memory_ports, *DGE_PORTS.values())
        self._port_index = {name: i for i, name in enumerate(self.port_names)}
        self._costs: dict[tuple[Any, ...], InstructionCost] = {}
        self._estimates: dict[tuple[Any, ...], Estimate] = {}

    @classmethod
    def for_config(cls, config: HardwareConfig, rules: RuleConstants | None = None) -> CostModel:
        """The model of ``config`` (and ``rules``, default: its generation's), built once: found
        by the config object first, then by its content hash, so equal configs share one."""
        found = _BY_OBJECT.get(id(config))
        if found is not None and found[0] is config and found[1] == rules:
            return found[2]
        key = (config_hash(config), rules, engine_names(), tuple(p.name for p in shared_ports()))
        model = _BY_KEY.get(key)
        if model is None:
            model = _BY_KEY[key] = cls(config, rules)
            while len(_BY_KEY) > KEPT_MODELS:
                _BY_KEY.popitem(last=False)
        else:
            _BY_KEY.move_to_end(key)
        if len(_BY_OBJECT) >= KEPT_MODELS:
            _BY_OBJECT.clear()
        _BY_OBJECT[id(config)] = (config, rules, model)
        return model

    @cached_property
    def collectives(self) -> CollectiveCosts:
        return CollectiveCosts(self.config)

    # ---- costs ---------------------------------------------------------------------------------
    def of(self, instruction: Instruction) -> InstructionCost:
        """What ``instruction`` costs on this config, worked out once per distinct instruction
        (``static_key``). Raises IllegalInstructionError if the config cannot run it."""
        key = instruction.static_key()
        found = self._costs.get(key)
        if found is None:
            found = self._work_out(instruction, key)
        return found

    def streams_costs(
        self,
        streams: Mapping[str, Sequence[Instruction]],
        first_seen: Callable[[Instruction], None] | None = None,
    ) -> dict[str, list[InstructionCost]]:
        """Per stream, the cost of each instruction. An instruction the builder names a static
        twin of (``STATIC_TWIN``) is found by the twin's identity, without hashing its operands;
        ``first_seen`` is called once for each distinct instruction, in stream order."""
        by_twin: dict[int, InstructionCost] = {}  # the twins live as long as the streams
        seen: set[tuple[Any, ...]] = set()

        def first(instruction: Instruction) -> InstructionCost:
            key = instruction.static_key()
            cost = self._costs.get(key) or self._work_out(instruction, key)
            if key not in seen:
                seen.add(key)
                if first_seen is not None:
                    first_seen(instruction)
            return cost

        found: dict[str, list[InstructionCost]] = {}
        for engine, stream in streams.items():
            costs = found[engine] = []
            for instruction in stream:
                twin = instruction.__dict__.get(STATIC_TWIN)
                if twin is None:
                    costs.append(first(instruction))
                    continue
                cost = by_twin.get(id(twin))
                if cost is None:
                    cost = by_twin[id(twin)] = first(instruction)
                costs.append(cost)
        return found

    def estimate(self, instruction: Instruction) -> Estimate:
        """The list scheduler's uncontended view of ``instruction`` (``Estimate``): a DMA's
        latency runs until its transfer is done on idle DMA engines."""
        key = instruction.static_key()
        found = self._estimates.get(key)
        if found is None:
            cost = self.of(instruction)
            plan = cost.transfer
            if plan is None:
                found = Estimate(cost.issue_ticks, cost.latency_ticks, cost.chain_ticks)
            else:
                delay = cost.submit_ticks + self.dma.start_latency_ticks
                transfer = self.dma.uncontended_ticks(plan)
                issue = cost.issue_ticks
                found = Estimate(issue, max(issue, delay + transfer), issue, delay, transfer)
            if len(self._estimates) >= KEPT_COSTS:
                self._estimates.clear()
            self._estimates[key] = found
        return found

    def _work_out(self, instruction: Instruction, key: tuple[Any, ...]) -> InstructionCost:
        """Legality, then the instruction's rule, as the engine loop takes it (kept by ``key``,
        its static key)."""
        instruction.check(self.spec)
        cost = rule_for(type(instruction))(self, instruction)
        issue, hold = cost.issue_ticks, cost.hold_ticks
        latency = max(cost.latency_ticks, issue)
        chain = latency if cost.chain_ticks is None else min(latency, cost.chain_ticks)
        ports = self._ports_used(instruction)
        if hold:
            ports = (*ports, self._port_index[DGE_PORTS.get(instruction.engine, "dge.sync")])
        found = InstructionCost(
            issue, latency, chain, ports, hold or issue, cost.transfer, cost.submit_ticks
        )
        if len(self._costs) >= KEPT_COSTS:
            self._costs.clear()
        self._costs[key] = found
        return found

    def _ports_used(self, instruction: Instruction) -> tuple[int, ...]:
        """The shared memory ports an instruction holds: those of its engine on a memory it
        touches (NeuronCore-v2 restrictions, ``hwsim.engines.SharedPort``)."""
        if instruction.IS_DMA:
            return ()
        memories = {ap.memory for ap in (*instruction.reads(), *instruction.writes())}
        return tuple(
            self._port_index[port.name]
            for port in shared_ports()
            if port.name in self._port_index
            and instruction.engine in port.engines
            and port.memory in memories
        )

    # ---- what rules build on -------------------------------------------------------------------
    def cycles(self, engine: str, cycles: int) -> int:
        """Engine cycles as ticks (each engine's clock: ``EngineSpec.clock_section``)."""
        return cycles * self.timebase.ticks_per_cycle[engine]

    def compute(
        self,
        engine: str,
        work_cycles: int,
        *,
        floor: bool = True,
        extra_cycles: int = 0,
        fixed: bool = True,
    ) -> Cost:
        """The VectorE/ScalarE/GpSimdE rule: fixed + max(MIN_II, work) (+ extra), plus latency.

        ``floor=False`` drops the MIN_II floor, ``fixed=False`` the engine's fixed start cost
        (for a documented formula that gives the whole cost, such as ``topk``'s).

        Latency (HARDWARE.md §2.2 [S1][S10]): results are visible to other engines
        ``pipeline_latency_cycles`` after the issue interval. A dependent instruction on the same
        engine streams behind its producer: it reads element i after the producer wrote it, so it
        may start ``min_ii + pipeline_latency`` cycles after the producer (the pipeline fill), or
        when the producer's issue interval ends if that is later. A chain of tiny dependent
        instructions then runs at MIN_II + L each (ScalarE: 64 + 200 = 264 cycles, as measured
        [S10]); long dependent instructions run back to back at ~N cycles each, as [S1]'s
        per-instruction rules say.
        """
        eng = self.engine_configs[engine]
        busy = (eng.fixed_overhead_cycles if fixed else 0) + (
            max(eng.min_ii_cycles, work_cycles) if floor else work_cycles
        )
        busy += extra_cycles
        issue = self.cycles(engine, busy)
        latency = self.cycles(engine, eng.pipeline_latency_cycles)
        fill = self.cycles(engine, eng.min_ii_cycles) + latency
        return Cost(issue, issue + latency, max(issue, fill))


_BY_KEY: OrderedDict[tuple[Any, ...], CostModel] = OrderedDict()
_BY_OBJECT: dict[int, tuple[HardwareConfig, RuleConstants | None, CostModel]] = {}
