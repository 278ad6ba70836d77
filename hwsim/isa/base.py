"""The instruction contract and the ISA registry.

An instruction is a frozen value that owns, in one place: the engines that may run it, its operands
(access patterns), what it reads and writes, its legality check against the hardware, and its
semantics (a call into ``kernels``). What it costs is its rule in ``hwsim.cost`` (registered by
instruction type). The registry maps opcode names to classes, so new instructions plug in without
touching the simulator.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from hwsim.config.schema import ComputeEngineConfig, HardwareConfig
from hwsim.config.timebase import TimeBase
from hwsim.engines import engine_names, engine_spec
from hwsim.errors import IllegalInstructionError, MemoryAccessError
from hwsim.isa.ap import MAX_FREE_DIMS, AccessPattern, MemorySpace
from hwsim.isa.operands import derive_operand_methods, written_fields

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState


#: Instance attribute (outside the dataclass fields, so equality, hashing, repr and replace()
#: ignore it) naming an earlier emitted instruction with the same ``static_key()``: the first one.
#: The builder sets it; the cost model finds a program's costs by the twin's identity.
STATIC_TWIN = "_static_twin"


class MachineSpec:
    """What legality checks need from the config, derived once per config (not per
    instruction)."""

    def __init__(self, config: HardwareConfig) -> None:
        self.config = config
        self.timebase = TimeBase.from_config(config)
        #: Compute engines' config sections, by engine name.
        self.engine_configs: dict[str, ComputeEngineConfig] = {
            name: getattr(config, spec.cost_section)
            for name in engine_names()
            if (spec := engine_spec(name)).cost_section is not None
        }
        self.psum_bank_bytes = config.psum.bytes_per_partition // config.psum.banks

    def memory_capacity(self, memory: MemorySpace) -> tuple[int, int]:
        """(partitions, bytes per partition) of an on-chip memory."""
        if memory is MemorySpace.SBUF:
            return self.config.sbuf.partitions, self.config.sbuf.bytes_per_partition
        if memory is MemorySpace.PSUM:
            return self.config.psum.partitions, self.config.psum.bytes_per_partition
        raise ValueError("HBM has no fixed partition geometry")


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
    #: Engine-internal state the instruction reads or writes besides its operands ("prng": the
    #: random number generators, "accumulators": the reduce registers; ``isa.engine_state``).
    #: Instructions naming the same state on one engine must keep their program order: no
    #: operand dependency orders them.
    ENGINE_STATE: ClassVar[str] = ""
    #: The parameters of its kernel-language call (``hwsim.lang.calls``) by their nki.isa names,
    #: in nki.isa's order ("*": keyword-only from there on), when not the default order (fields
    #: without a default first, then keyword-only those with one).
    NKI_ARGS: ClassVar[str] = ""

    engine: str
    waits: tuple[tuple[str, int], ...] = ()
    signals: tuple[tuple[str, int], ...] = ()
    tag: str = ""
    name: str = field(default="", compare=False)

    # ---- operands -----------------------------------------------------------------------------
    def static_key(self) -> tuple[Any, ...]:
        """Everything but synchronisation and labels: equal keys have equal legality and cost."""
        getter = _STATIC_GETTERS.get(type(self))
        if getter is None:
            getter = _STATIC_GETTERS[type(self)] = _static_getter(type(self))
        return getter(self)

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

    def initcheck_writes(self, state: CoreState) -> tuple[tuple[AccessPattern, Any], ...]:
        """What this execution writes, for initcheck, taken before it runs: (operand, mask)
        pairs, the mask a boolean array shaped like the operand, or None for all of it.
        ``writes()`` unless some elements are kept (a predicated copy, a dynamic offset)."""
        return tuple((ap, None) for ap in self.writes())

    def require_generation(self, spec: MachineSpec, *generations: str) -> None:
        """Fail unless the config's NeuronCore generation is one of ``generations``."""
        generation = spec.config.chip.generation
        if generation not in generations:
            names = "/".join(f"NeuronCore-{g}" for g in generations)
            self.fail(
                f"available on {names} only; this config is NeuronCore-{generation} "
                "(chip.generation)"
            )

    def operand_names(self) -> dict[str, AccessPattern]:
        """Operands by field name, for messages and traces."""
        return {
            name: value
            for name in _field_names(type(self))
            if isinstance(value := getattr(self, name), AccessPattern)
        }

    # ---- legality -----------------------------------------------------------------------------
    @classmethod
    def allowed_engines(cls) -> tuple[str, ...]:
        """The engines whose streams may hold it (``ENGINES``; DMA triggers: every engine)."""
        return cls.ENGINES

    def check(self, spec: MachineSpec) -> None:
        """Raise IllegalInstructionError naming this instruction and the operand if illegal."""
        allowed = self.allowed_engines()
        if self.engine not in allowed:
            self.fail(f"cannot run on engine '{self.engine}'; it runs on {', '.join(allowed)}")
        written = written_fields(type(self))
        for name, ap in self.operand_names().items():
            self.check_operand(spec, name, ap, is_write=name in written)

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
            engine = engine_spec(self.engine)
            allowed = engine.writes if is_write else engine.reads
            engine_config = spec.engine_configs.get(self.engine)
            if engine_config is not None and not engine_config.can_access_psum:
                allowed = allowed - {MemorySpace.PSUM}
            if ap.memory not in allowed:
                verb = "write" if is_write else "read"
                may = ", ".join(sorted(str(m) for m in allowed)) or "nothing"
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

    # ---- work, semantics ----------------------------------------------------------------------
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


#: Per instruction class: a function giving its class and the values of its fields outside
#: synchronisation and labels, as one tuple (``operator.attrgetter``: one C call, not a
#: generator per field; ``__class__`` is its first attribute).
_STATIC_GETTERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}
_NOT_STATIC = ("waits", "signals", "tag", "name")


def _static_getter(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    names = [f for f in _field_names(cls) if f not in _NOT_STATIC]
    return operator.attrgetter("__class__", *names)


InstructionT = TypeVar("InstructionT", bound=type[Instruction])

#: opcode -> instruction class
ISA: dict[str, type[Instruction]] = {}


def register(
    opcode: str, *, engines: tuple[str, ...] | None = None, profiler: str = ""
) -> Callable[[InstructionT], InstructionT]:
    """Class decorator adding an instruction to the ISA registry as ``opcode``, on ``engines``
    (default: the class's ``ENGINES``), named ``profiler`` in hardware profiles (default: the
    class's ``PROFILER_OPCODE``), with its ``reads``/``writes`` from its operand fields' roles
    (``hwsim.isa.operands``); a duplicate opcode is an error."""

    def decorate(cls: InstructionT) -> InstructionT:
        cls.OPCODE = opcode
        if engines is not None:
            cls.ENGINES = engines
        if profiler:
            cls.PROFILER_OPCODE = profiler
        if not cls.ENGINES:
            raise TypeError(f"{cls.__name__} must name its ENGINES")
        if opcode in ISA:
            raise ValueError(f"opcode '{opcode}' is already registered by {ISA[opcode].__name__}")
        ISA[opcode] = cls
        derive_operand_methods(cls)
        _fill_dict_init(cls)
        return cls

    return decorate


def _fill_dict_init(cls: type) -> None:
    """Give ``cls`` an ``__init__`` that stores the fields straight into the instance dict.

    The frozen dataclass ``__init__`` stores each field with ``object.__setattr__``, about 2x the
    time of this one (1.6 vs 0.8 us for ``nc_matmul``'s twelve fields), and a kernel makes one
    instruction per ISA call. Same signature, defaults and ``__post_init__``; only the plain
    case is replaced (every field a keyword-only init argument without a default factory, the
    dataclass's own generated ``__init__``, no slots), any other class keeps its own."""
    if not dataclasses.is_dataclass(cls) or hasattr(cls, "__slots__"):
        return
    init = cls.__dict__.get("__init__")
    if init is None or getattr(init, "__code__", None) is None:
        return
    if init.__code__.co_filename != "<string>":  # written by hand, not made by @dataclass
        return
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    plain = all(f.init and f.kw_only and f.default_factory is dataclasses.MISSING for f in fields)
    if not plain or "instance_dict" in names or any(n.startswith("_") for n in names):
        return
    defaults = {
        f"default_{f.name}": f.default for f in fields if f.default is not dataclasses.MISSING
    }
    params = [n if f"default_{n}" not in defaults else f"{n}=default_{n}" for n in names]
    lines = [f"def make({', '.join(defaults)}):"]
    lines.append(f"    def __init__(self, *, {', '.join(params)}):")
    lines.append("        instance_dict = self.__dict__")
    lines += [f"        instance_dict[{n!r}] = {n}" for n in names]
    if hasattr(cls, "__post_init__"):
        lines.append("        self.__post_init__()")
    lines.append("    return __init__")
    namespace: dict[str, Any] = {}
    exec("\n".join(lines), namespace)  # as @dataclass makes its own: from the field names
    fast = namespace["make"](**defaults)
    fast.__qualname__ = f"{cls.__qualname__}.__init__"
    fast.__doc__ = init.__doc__
    cls.__init__ = fast  # type: ignore[method-assign]


SemanticFn = Callable[..., Any]
