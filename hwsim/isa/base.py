"""The instruction contract and the ISA registry.

An instruction is a frozen value that owns, in one place: the engines that may run it, its operands
(access patterns), what it reads and writes, its legality check against the hardware, its static
cost, and its semantics (a call into ``kernels``). The registry maps opcode names to classes, so new
instructions plug in without touching the simulator.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from hwsim.config.schema import ComputeEngineConfig, HardwareConfig
from hwsim.config.timebase import TimeBase
from hwsim.errors import IllegalInstructionError, MemoryAccessError
from hwsim.isa.ap import MAX_FREE_DIMS, AccessPattern, MemorySpace

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState

#: Engines that run instruction streams (sequencers), in hardware order.
ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")

#: Which memories each engine may read / write (HARDWARE.md §1.4 connectivity). PSUM access of the
#: compute engines is further gated by ``can_access_psum`` in the config. DMA transfers issued by
#: any engine move HBM <-> SBUF (their own rule, in the DMA instructions).
ENGINE_READS: dict[str, frozenset[MemorySpace]] = {
    "tensor": frozenset({MemorySpace.SBUF}),
    "vector": frozenset({MemorySpace.SBUF, MemorySpace.PSUM}),
    "scalar": frozenset({MemorySpace.SBUF, MemorySpace.PSUM}),
    "gpsimd": frozenset({MemorySpace.SBUF, MemorySpace.PSUM}),
    "sync": frozenset(),
}
ENGINE_WRITES: dict[str, frozenset[MemorySpace]] = {
    "tensor": frozenset({MemorySpace.PSUM}),
    "vector": frozenset({MemorySpace.SBUF, MemorySpace.PSUM}),
    "scalar": frozenset({MemorySpace.SBUF, MemorySpace.PSUM}),
    "gpsimd": frozenset({MemorySpace.SBUF, MemorySpace.PSUM}),
    "sync": frozenset(),
}


@dataclass(frozen=True, slots=True)
class Cost:
    """Static cost of one instruction, in ticks of the run's time base.

    issue_ticks: the engine is busy this long; the next instruction may issue after it.
    latency_ticks: from start until results are visible and completion semaphores update.
    """

    issue_ticks: int
    latency_ticks: int


class MachineSpec:
    """What instructions need from the config, derived once per config (not per instruction)."""

    def __init__(self, config: HardwareConfig) -> None:
        self.config = config
        self.timebase = TimeBase.from_config(config)
        self.engine_configs: dict[str, ComputeEngineConfig] = {
            "vector": config.vector_engine,
            "scalar": config.scalar_engine,
            "gpsimd": config.gpsimd_engine,
        }
        self.psum_bank_bytes = config.psum.bytes_per_partition // config.psum.banks

    def memory_capacity(self, memory: MemorySpace) -> tuple[int, int]:
        """(partitions, bytes per partition) of an on-chip memory."""
        if memory is MemorySpace.SBUF:
            return self.config.sbuf.partitions, self.config.sbuf.bytes_per_partition
        if memory is MemorySpace.PSUM:
            return self.config.psum.partitions, self.config.psum.bytes_per_partition
        raise ValueError("HBM has no fixed partition geometry")

    def cycles(self, engine: str, cycles: int) -> int:
        """Engine cycles as ticks (the sync engine is clocked like ScalarE)."""
        clock_engine = "scalar" if engine == "sync" else engine
        return cycles * self.timebase.ticks_per_cycle[clock_engine]

    def compute_cost(
        self,
        engine: str,
        work_cycles: int,
        *,
        floor: bool = True,
        extra_cycles: int = 0,
    ) -> Cost:
        """The VectorE/ScalarE/GpSimdE rule: fixed + max(MIN_II, work) (+ extra), plus latency."""
        eng = self.engine_configs[engine]
        busy = eng.fixed_overhead_cycles + (
            max(eng.min_ii_cycles, work_cycles) if floor else work_cycles
        )
        busy += extra_cycles
        issue = self.cycles(engine, busy)
        return Cost(issue, issue + self.cycles(engine, eng.pipeline_latency_cycles))


@dataclass(frozen=True, kw_only=True)
class Instruction:
    """Base of every instruction. Subclasses are frozen dataclasses registered with ``@register``.

    engine:  the engine whose stream holds it (must be one of the class's ``ENGINES``).
    waits:   (semaphore, value) pairs: start only when every semaphore >= value.
    signals: (semaphore, increment) pairs applied when the instruction completes.
    tag:     where it came from (kernel source line, torch op), carried into the trace.
    """

    OPCODE: ClassVar[str] = ""
    ENGINES: ClassVar[tuple[str, ...]] = ()
    #: Profiler opcode name (Neuron Explorer ``Instruction.opcode``), for comparing real profiles.
    PROFILER_OPCODE: ClassVar[str] = ""
    IS_DMA: ClassVar[bool] = False
    #: DMA only: the transfer reaches the DMA engines after the trigger's issue interval (software
    #: DGE writes the descriptors then), not when the trigger starts (which overlaps its latency).
    SUBMITS_AFTER_ISSUE: ClassVar[bool] = False

    engine: str
    waits: tuple[tuple[str, int], ...] = ()
    signals: tuple[tuple[str, int], ...] = ()
    tag: str = ""
    name: str = field(default="", compare=False)

    # ---- operands -----------------------------------------------------------------------------
    def static_key(self) -> tuple[Any, ...]:
        """Everything but synchronisation and labels: equal keys have equal legality and cost."""
        skip = ("waits", "signals", "tag", "name")
        return (type(self), *(getattr(self, f) for f in _field_names(type(self)) if f not in skip))

    def reads(self) -> tuple[AccessPattern, ...]:
        """Operands read, in a stable order."""
        return ()

    def writes(self) -> tuple[AccessPattern, ...]:
        """Operands written."""
        return ()

    def moved_reads(self) -> tuple[AccessPattern, ...]:
        """The bytes actually read, for traffic statistics: ``reads()`` unless that is a
        conservative region for dependencies (an indirect gather reads a few rows of a table
        whose every row it must wait for)."""
        return self.reads()

    def initcheck_reads(self, state: CoreState) -> tuple[AccessPattern, ...]:
        """The bytes this execution reads, for initcheck: ``reads()`` unless that is a
        conservative region (an indirect gather reads only the rows its indices pick)."""
        return self.reads()

    def operand_names(self) -> dict[str, AccessPattern]:
        """Operands by field name, for messages and traces."""
        return {
            name: value
            for name in _field_names(type(self))
            if isinstance(value := getattr(self, name), AccessPattern)
        }

    # ---- legality -----------------------------------------------------------------------------
    def check(self, spec: MachineSpec) -> None:
        """Raise IllegalInstructionError naming this instruction and the operand if illegal."""
        if self.engine not in self.ENGINES:
            self.fail(f"cannot run on engine '{self.engine}'; it runs on {', '.join(self.ENGINES)}")
        written = {id(ap) for ap in self.writes()}
        for name, ap in self.operand_names().items():
            self.check_operand(spec, name, ap, is_write=id(ap) in written)

    def check_operand(
        self, spec: MachineSpec, name: str, ap: AccessPattern, *, is_write: bool
    ) -> None:
        """Shape, alignment, bounds and engine-access rules common to all operands."""
        if not 1 <= len(ap.free_sizes) <= MAX_FREE_DIMS:
            self.fail(f"operand '{name}' has {len(ap.free_sizes)} free dims (1..4 allowed)")
        if ap.partitions < 1 or any(n < 1 for n in ap.free_sizes):
            self.fail(f"operand '{name}' has an empty dimension: shape {ap.shape}")
        if ap.offset_bytes % ap.dtype.itemsize:
            self.fail(
                f"operand '{name}' offset {ap.offset_bytes} B is not aligned to its "
                f"{ap.dtype.name} element size ({ap.dtype.itemsize} B)"
            )
        if not self.IS_DMA:
            allowed = ENGINE_WRITES[self.engine] if is_write else ENGINE_READS[self.engine]
            engine_config = spec.engine_configs.get(self.engine)
            if engine_config is not None and not engine_config.can_access_psum:
                allowed = allowed - {MemorySpace.PSUM}
            if ap.memory not in allowed:
                verb = "write" if is_write else "read"
                may = ", ".join(sorted(m.value for m in allowed)) or "nothing"
                self.fail(
                    f"operand '{name}': {self.engine} engine cannot {verb} {ap.memory.value} "
                    f"(it may {verb} {may})"
                )
        if ap.memory is not MemorySpace.HBM:
            self._check_on_chip_bounds(spec, name, ap)

    def _check_on_chip_bounds(self, spec: MachineSpec, name: str, ap: AccessPattern) -> None:
        partitions, capacity = spec.memory_capacity(ap.memory)
        if ap.start_partition < 0 or ap.end_partition > partitions:
            raise MemoryAccessError(
                f"{self.label()}: operand '{name}' partitions [{ap.start_partition}, "
                f"{ap.end_partition}) outside {ap.memory.value}'s 0..{partitions}"
            )
        first, last = ap.byte_span()
        if first < 0 or last > capacity:
            raise MemoryAccessError(
                f"{self.label()}: operand '{name}' bytes [{first}, {last}) outside "
                f"{ap.memory.value}'s {capacity} bytes per partition"
            )

    def fail(self, message: str) -> None:
        raise IllegalInstructionError(f"{self.label()}: {message}")

    def label(self) -> str:
        where = f" ({self.tag})" if self.tag else ""
        return f"{self.OPCODE} on {self.engine}{where}"

    # ---- cost, work, semantics ------------------------------------------------------------------
    def cost(self, spec: MachineSpec) -> Cost:
        raise NotImplementedError

    def flops(self) -> int:
        """Floating-point operations (a multiply-add counts 2), for MFU/HFU."""
        return 0

    def execute(self, state: CoreState) -> None:
        raise NotImplementedError

    def describe(self) -> str:
        """Operands in compact ISA syntax, for traces."""
        return " ".join(f"{n}={ap.describe()}" for n, ap in self.operand_names().items())

    def attributes(self) -> dict[str, Any]:
        """Non-operand fields (ops, flags), for traces."""
        skip = {"engine", "waits", "signals", "tag", "name"}
        return {
            k: getattr(self, k)
            for k in _field_names(type(self))
            if k not in skip and not isinstance(getattr(self, k), AccessPattern)
        }


#: Per instruction class: the names of its dataclass fields (class constants excluded).
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


InstructionT = TypeVar("InstructionT", bound=type[Instruction])

#: opcode -> instruction class
ISA: dict[str, type[Instruction]] = {}


def register(cls: InstructionT) -> InstructionT:
    """Class decorator adding an instruction to the ISA registry; duplicate opcodes are errors."""
    if not cls.OPCODE or not cls.ENGINES:
        raise TypeError(f"{cls.__name__} must set OPCODE and ENGINES")
    if cls.OPCODE in ISA:
        raise ValueError(
            f"opcode '{cls.OPCODE}' is already registered by {ISA[cls.OPCODE].__name__}"
        )
    ISA[cls.OPCODE] = cls
    return cls


def elements_cycles(spec: MachineSpec, engine: str, ap: AccessPattern, inputs: int = 1) -> int:
    """Cycles to stream ``inputs`` tensors shaped like ``ap`` through an engine's lanes.

    The rule of HARDWARE.md §2.2: N elements per partition take ~N cycles per input tensor, at the
    engine's per-dtype rate; partitions are processed in parallel by the lanes (more partitions
    than lanes take several passes); an innermost stride above the interface limit halves the
    SBUF/PSUM bandwidth [S1].
    """
    eng = spec.engine_configs[engine]
    rates = eng.elements_per_cycle_per_lane_by_dtype
    rate = rates.get(ap.dtype.name, rates["fp32"])  # type: ignore[call-overload]
    passes = -(-ap.partitions // eng.lanes)
    cycles = math.ceil(ap.free_elements / rate) * inputs * passes
    if ap.innermost_stride_bytes > eng.strided_access_stride_bytes and ap.free_sizes[-1] > 1:
        cycles *= 2
    return cycles


SemanticFn = Callable[..., Any]
