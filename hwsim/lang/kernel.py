"""The ``@kernel`` decorator and the build context of the kernel language.

A kernel is a Python function. Its array arguments become HBM input tensors (named after the
parameters); inside it, ``ndarray`` allocates tiles and ISA calls append instructions in program
order to a ``ProgramBuilder``, which places each on its engine's stream and inserts semaphores.
Python loops simply unroll while the function runs. The HBM tiles it returns are the outputs.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import inspect
import itertools
import sys
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any

import numpy as np

from hwsim.builder import ProgramBuilder
from hwsim.config import HardwareConfig, load_config
from hwsim.dtypes import DType
from hwsim.dtypes import dtype as lookup_dtype
from hwsim.errors import HwsimError, IllegalInstructionError, set_inside
from hwsim.isa.ap import MemorySpace
from hwsim.isa.base import Instruction
from hwsim.isa.origin import Origin
from hwsim.lang.allocator import SBUF_ALIGN_BYTES, Block, Pool
from hwsim.lang.blocks import ParDim, block_ndarray, split_block_dims
from hwsim.lang.deferral import allocate_block
from hwsim.lang.planner import MemoryPlanner
from hwsim.lang.replay import ReplayCache
from hwsim.lang.tiles import Buffer, Tile, hbm, sbuf
from hwsim.lang.watchdog import TraceLimits, Watchdog, current_limits
from hwsim.program import Program, integer_shape
from hwsim.schedule import InstructionStream, emit_scheduled, resolve_schedule
from hwsim.trace.gc_pause import full_gc_deferred

if TYPE_CHECKING:
    from hwsim.trace.summary import RunSummary

_CURRENT: contextvars.ContextVar[KernelContext | None] = contextvars.ContextVar(
    "hwsim_kernel", default=None
)
_LANG_DIR = __file__.rsplit("/", 1)[0] + "/"
_HWSIM_DIR = _LANG_DIR.rsplit("/", 2)[0] + "/"
_LIBRARY_DIR = _HWSIM_DIR + "library/"
#: The library's shared helpers: never a tag's line while a library kernel line calls them.
_LIBRARY_HELPERS = _LIBRARY_DIR + "common.py"
#: Where ``source_location`` looks past frames: the hwsim package, and front ends outside it
#: that add themselves with ``skip_frames_of``.
_SKIPPED_DIRS: tuple[str, ...] = (_HWSIM_DIR,)


def skip_frames_of(directory: str) -> None:
    """Make ``source_location`` look past frames of files under ``directory`` (a front end
    built on the kernel language, so errors and tags name the user's kernel line). Frames in
    the hwsim package are skipped already."""
    global _SKIPPED_DIRS
    prefix = directory.rstrip("/") + "/"
    if not prefix.startswith(_SKIPPED_DIRS):
        _SKIPPED_DIRS = (*_SKIPPED_DIRS, prefix)
        _FRAME_KINDS.clear()


#: Per code object, what ``source_location`` needs of its file: (skipped, outside the kernel
#: language, a library kernel line); worked out once per function, not once per frame walked.
_FRAME_KINDS: dict[int, tuple[CodeType, tuple[bool, bool, bool]]] = {}  # by id(code)


def _frame_kind(code: CodeType) -> tuple[bool, bool, bool]:
    name = code.co_filename
    kind = (
        name.startswith(_SKIPPED_DIRS),
        not name.startswith(_LANG_DIR),
        name.startswith(_LIBRARY_DIR) and name != _LIBRARY_HELPERS,
    )
    if len(_FRAME_KINDS) >= _MAX_LOCATIONS:
        _FRAME_KINDS.clear()
    _FRAME_KINDS[id(code)] = (code, kind)
    return kind


#: (code object, instruction offset) -> ``source_location``'s "file:line" text, and a bound on
#: how many it keeps (kernels generated at run time make new code objects).
_LOCATIONS: dict[tuple[int, int], tuple[CodeType, str]] = {}
_MAX_LOCATIONS = 1 << 14


#: DMA queues the builder rotates through when a call names none.
DEFAULT_DMA_QUEUES = 4


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of a kernel input when building without data (timing-only)."""

    shape: tuple[int, ...]
    dtype: str | DType = "fp32"


class KernelContext:
    """State while one kernel is being built."""

    def __init__(
        self,
        name: str,
        config: HardwareConfig,
        schedule: str = "program",
        kernel_code: CodeType | None = None,
    ) -> None:
        self.name = name
        #: The graph node the instructions emitted now are for (``tag_scope``; None: none).
        self.origin: Origin | None = None
        #: The kernel function's code: where ``source_location`` stops inside hwsim.
        self.kernel_code = kernel_code
        self.config = config
        self.builder = ProgramBuilder(deferred=True)
        #: Instructions emitted so far by what makes them: an equal one is a copy (``emit``).
        self.replays: ReplayCache | None = ReplayCache()
        #: Called before each ISA call makes its instruction (NKI writes out a pending copy).
        self.before_emit: list[Callable[[], None]] = []
        #: Steps that change the kernel's state other than by emitting (names, queue rotation,
        #: allocations, placements): a block that took one is not replayed (``lang.repeat``).
        self.state_changes = 0
        #: While ``lang.repeat`` records a block: the copy tokens of what it emits (None for an
        #: instruction that cannot be copied).
        self.recording: list[Any] | None = None
        #: Under a scheduling policy other than program order, instructions are recorded here
        #: and emitted into the builder in the scheduled order when the kernel returns.
        self.stream: InstructionStream | None = (
            None if schedule == "program" else InstructionStream()
        )
        self.pools = {
            MemorySpace.SBUF: Pool(
                "sbuf",
                config.sbuf.bytes_per_partition,
                SBUF_ALIGN_BYTES,
                partitions=config.sbuf.partitions,
            ),
            MemorySpace.PSUM: Pool(
                "psum",
                config.psum.bytes_per_partition,
                config.psum.bytes_per_partition // config.psum.banks,
            ),
        }
        self._names = itertools.count()
        self._queues = itertools.count()
        #: ``core_barrier`` calls so far: the k-th waits for its peers' k-th signals.
        self.barriers = 0
        #: Set by the first allocation that does not fit: the rest of the kernel is recorded
        #: and placed by the memory planner when the kernel function returns.
        self.planner: MemoryPlanner | None = None
        #: Holders of on-chip tiles kept only for speed (the bridge's residency): when a tile
        #: does not fit, each is asked in turn to give one up (``reclaim()`` returns False when
        #: it holds none) before the kernel is handed to the planner.
        self.reclaimers: list[Callable[[], bool]] = []
        self.finished = False
        #: The instruction ``hwsim.lang.emit`` has just made and nothing else holds: the
        #: builder may fill in its waits in place instead of copying it (``emit_placed``).
        self.fresh: Instruction | None = None
        #: Counts the ISA calls of the kernel function (``hwsim.lang.watchdog``); ``build``
        #: gives a bounded one, other users of a context (the bridge's lowering) none.
        self.watchdog = Watchdog(name, TraceLimits.unbounded(), source_location)

    def fresh_name(self, prefix: str) -> str:
        self.state_changes += 1
        return f"{prefix}{next(self._names)}"

    def next_queue(self, engine: str) -> int:
        """The queue for a DMA call that names none: one rotation shared by all trigger engines,
        since queue FIFOs and completion semaphores are per queue ID, not per trigger engine."""
        self.state_changes += 1
        return next(self._queues) % min(DEFAULT_DMA_QUEUES, self.config.dma.queues_per_engine)

    def emits_to_builder(self) -> bool:
        """Whether an ISA call goes straight to the builder: no memory planner records it, no
        scheduler reorders it, and no hook replaced ``emit`` (so the builder may append copies
        of earlier instructions: ``hwsim.lang.replay``, ``lang.repeat``)."""
        return self.planner is None and self.stream is None and "emit" not in self.__dict__

    def emit(
        self, instruction: Instruction, operands: Sequence[tuple[str, Tile]] = ()
    ) -> Instruction:
        """Append an instruction; ``operands`` names its fields made from on-chip tiles (the
        memory planner moves them if it moves the tile). Returns the instruction with its
        waits, or, once the kernel is deferred (``planner``), as recorded."""
        if self.planner is None:
            return self.emit_placed(instruction)
        self.fresh = None  # recorded: the planner holds it
        blocks = [(name, t.block) for name, t in operands if t.block is not None]
        self.planner.record_emit(instruction, blocks)
        return instruction

    def emit_placed(self, instruction: Instruction) -> Instruction:
        """Append an instruction whose addresses are final (as written, or as the memory
        planner placed it, spill DMAs included): the one way into the builder, so a pass after
        placement (an instruction scheduler) hooks here."""
        owned = instruction is self.fresh
        self.fresh = None
        if self.stream is not None:
            self.stream.add(instruction)
            return instruction
        return self.builder.emit(instruction, owned=owned)

    def place_hbm_placed(self, name: str, address_bytes: int, earlier: list[str]) -> None:
        """Place an HBM tensor at its final place in the program: recorded in the scheduler's
        stream (its position relative to the accesses matters) or applied to the builder."""
        self.state_changes += 1
        if self.stream is not None:
            self.stream.place_hbm(name, address_bytes, earlier)
        else:
            self.builder.place_hbm(name, address_bytes, earlier)

    def call_in_order(self, fn: Callable[[], None]) -> None:
        """Run a builder step now, or at its place in the program once the kernel is deferred
        (steps that depend on the accesses emitted before them, like ``place_hbm``)."""
        self.state_changes += 1
        if self.planner is None:
            fn()
        else:
            self.planner.record_call(fn)

    def release(self, memory: MemorySpace, block: Block) -> None:
        """A tile's Python object died: free its block now, or record it for the planner."""
        self.state_changes += 1
        if self.finished:
            return
        if self.planner is None:
            self.pools[memory].free(block)
        else:
            self.planner.record_free(block)

    def finish(self) -> None:
        """The kernel function returned: place a deferred kernel's tiles."""
        self.finished = True
        if self.planner is not None:
            self.planner.run()


def current() -> KernelContext:
    return set_inside(
        _CURRENT,
        "kernel-language calls must run inside a function decorated with @hwsim.lang.kernel "
        "(while it is being built or run)",
    )


@contextlib.contextmanager
def tag_scope(name: str | Origin) -> Iterator[None]:
    """Tag the instructions emitted inside the block ``name:<source line>`` instead of the
    kernel's name, so traces attribute each instruction (and its DMA transfers) to it. Given an
    ``Origin`` (the graph node a front end is lowering), the scope is its ``label`` and every
    tag carries it as ``Tag.origin`` (``hwsim.isa.origin``)."""
    context = current()
    saved = context.name, context.origin
    if isinstance(name, Origin):
        context.name, context.origin = name.label, name
    else:
        context.name, context.origin = name, None
    try:
        yield
    finally:
        context.name, context.origin = saved


def source_location() -> str:
    """``file:line`` of the kernel author's line: the innermost caller outside the hwsim package
    (a line of a kernel in the author's own file, or their line that called a library kernel).

    A kernel of ``hwsim.library`` built on its own has no such caller below its own frame (the
    walk stops there: past it is only the one ``build`` call every instruction shares), so its
    tag is the innermost line of library kernel code: a line of ``hwsim/library`` outside the
    shared helpers of ``common.py``. Outside any kernel: the innermost caller outside the
    kernel-language package.
    """
    context = _CURRENT.get()
    kernel_code = context.kernel_code if context is not None else None
    frame: FrameType | None = sys._getframe(1)
    library: FrameType | None = None  # innermost library kernel line
    outside_lang: FrameType | None = None
    kinds = _FRAME_KINDS
    while frame is not None:
        code = frame.f_code
        # By id (a code object hashes its whole content); the entry holds the code object,
        # so the id is not reused while it is cached.
        known = kinds.get(id(code))
        kind = known[1] if known is not None and known[0] is code else _frame_kind(code)
        if not kind[0]:
            break
        if outside_lang is None and kind[1]:
            outside_lang = frame
        if library is None and kind[2]:
            library = frame
        if code is kernel_code:  # a library kernel: nothing of the author's lies below
            frame = library or frame
            break
        frame = frame.f_back
    frame = frame or outside_lang
    if frame is None:
        return "?"
    # ``f_lineno`` scans the code's line table, so the text is kept per instruction offset.
    code = frame.f_code
    key = (id(code), frame.f_lasti)
    cached = _LOCATIONS.get(key)
    if cached is not None and cached[0] is code:
        return cached[1]
    if len(_LOCATIONS) >= _MAX_LOCATIONS:
        _LOCATIONS.clear()
    text = f"{code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}"
    _LOCATIONS[key] = (code, text)
    return text


def ndarray(
    shape: tuple[int, ...] | list[int],
    dtype: str | DType,
    buffer: Buffer = sbuf,
    *,
    name: str | None = None,
    offset: int | None = None,
    defer: bool = True,
) -> Tile:
    """Allocate a tile (NKI ``nl.ndarray``): on chip, shape is [partitions, *free], or
    [*blocks, par_dim(partitions), *free]: a ``BlockTile``, one tile per block (``blocks``).

    offset: explicit byte placement within each partition (SBUF/PSUM) instead of the pool.
    defer: when the tile does not fit, let the memory planner free dead tiles and spill
    (``hwsim.lang.planner``); False raises OutOfMemoryError now instead (for a caller with its
    own fallback, e.g. reusing a buffer of its own; a kernel already deferred stays so).
    """
    context = current()
    context.state_changes += 1
    dt = lookup_dtype(dtype)
    where = source_location()
    plain = [n for n in shape if not isinstance(n, ParDim)]  # checked before int() reads 32.0
    integer_shape(plain, f"{where}: ndarray", minimum=1)
    block_dims, shape = split_block_dims(tuple(shape), where)
    if block_dims and buffer.memory is not MemorySpace.HBM:
        base = name or context.fresh_name(buffer.memory.value)
        return block_ndarray(block_dims, shape, dt, buffer, base)
    shape = (*block_dims, *shape)
    if not shape:
        raise IllegalInstructionError(f"{where}: ndarray shape () must be non-empty")
    if buffer is hbm or buffer.memory is MemorySpace.HBM:
        tensor_name = name or context.fresh_name("hbm")
        context.builder.program.add_tensor(tensor_name, shape, dt, "scratch")
        return Tile(tensor_name, shape, dt, hbm)
    memory = buffer.memory
    partitions = (
        context.config.sbuf.partitions
        if memory is MemorySpace.SBUF
        else context.config.psum.partitions
    )
    if shape[0] > partitions:
        raise IllegalInstructionError(
            f"{where}: {memory.value} tile shape {shape} has {shape[0]} partitions; the first "
            f"dimension is the partition dimension and must be <= {partitions}"
        )
    tile_name = name or context.fresh_name(memory.value)
    block = allocate_block(context, memory, tile_name, shape, dt, where, offset, defer)
    tile = Tile(
        tile_name,
        shape,
        dt,
        buffer,
        start_partition=block.start_partition,
        offset_bytes=block.offset,
        block=block,
    )
    weakref.finalize(tile, context.release, memory, block)
    return tile


def place_hbm(tile: Tile, address_bytes: int, earlier: Sequence[Tile]) -> None:
    """Memory planning: HBM scratch ``tile`` sits at ``address_bytes`` of the program's scratch
    arena, over bytes the ``earlier`` tiles held; its accesses wait for theirs
    (``ProgramBuilder.place_hbm``)."""
    if tile.buffer is not hbm:
        raise IllegalInstructionError(f"place_hbm: {tile.name} is not an HBM tensor")
    context = current()
    names = [t.name for t in earlier]
    context.call_in_order(lambda: context.place_hbm_placed(tile.name, address_bytes, names))


@dataclass
class BuiltKernel:
    """A kernel lowered to a program, plus which HBM tensors are its outputs (in order)."""

    program: Program
    outputs: list[str]
    config: HardwareConfig
    sbuf_peak_bytes: int = 0
    psum_peak_bytes: int = 0
    #: What the memory planner did (``hwsim.lang.planner.SpillStats``); empty for a kernel
    #: that fitted as written.
    spill: dict[str, int] = field(default_factory=dict)
    #: The same per tile (``name (kernel line)``: bytes stored, reloaded, re-read; refills;
    #: deferred loads), only the counts that are not zero.
    spill_by_tile: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass
class KernelResult:
    """What running a kernel gives: output arrays, the trace, the summary and the program."""

    outputs: tuple[np.ndarray, ...]
    trace: Any
    summary: RunSummary
    program: Program | None = None

    @property
    def output(self) -> np.ndarray:
        """The single output of a one-output kernel."""
        if len(self.outputs) != 1:
            raise HwsimError(f"kernel has {len(self.outputs)} outputs; use .outputs")
        return self.outputs[0]


class Kernel:
    """A kernel-language function. ``build(...)`` lowers it; calling it builds and runs it."""

    def __init__(self, fn: Callable[..., Any], default_schedule: str = "program") -> None:
        self.fn = fn
        self.name = fn.__name__
        self.signature = inspect.signature(fn)
        self.__doc__ = fn.__doc__
        #: The policy of a build that names none and finds no ``$HWSIM_SCHEDULE``
        #: (``hwsim.schedule.COMPILER_SCHEDULE`` for an NKI kernel).
        self.default_schedule = default_schedule

    def build(
        self,
        *args: Any,
        config: str | HardwareConfig = "trn2",
        schedule: str | None = None,
        trace_limits: TraceLimits | None = None,
        **kwargs: Any,
    ) -> BuiltKernel:
        """Lower the kernel to a program. schedule: the order instructions are emitted in
        (``hwsim.schedule.SCHEDULES``: ``program`` order; ``list`` scheduled by the cost
        model; ``best``, the fastest candidate when simulated); None takes
        ``$HWSIM_SCHEDULE``, else the kernel's ``default_schedule`` (``program``; an NKI
        kernel's is the compiler's, ``best``). trace_limits: how far running the kernel's
        Python may go (``hwsim.lang.watchdog``; None: the process's limits)."""
        hw = load_config(config) if isinstance(config, str) else config
        policy = resolve_schedule(schedule, self.default_schedule)
        context = KernelContext(self.name, hw, policy, self.fn.__code__)
        watchdog = Watchdog(self.name, trace_limits or current_limits(), source_location)
        context.watchdog = watchdog
        bound = self.signature.bind(*args, **kwargs)
        call_args = {}
        for param, value in bound.arguments.items():
            call_args[param] = self._input(context, param, value)
        with full_gc_deferred():  # the build only adds to what it keeps: see there
            token = _CURRENT.set(context)
            try:
                with watchdog:
                    returned = self.fn(**call_args)
            finally:
                _CURRENT.reset(token)
            context.finish()  # memory placement first: the scheduler orders final addresses
            if context.stream is not None:  # before outputs are marked: placements need scratch
                context.builder = emit_scheduled(context.builder, context.stream, hw, policy)
        outputs = self._outputs(context, returned)
        program = context.builder.build()
        program.meta.setdefault("workload", self.name)
        if policy != "program":
            program.meta["schedule"] = policy
        return BuiltKernel(
            program,
            outputs,
            hw,
            context.pools[MemorySpace.SBUF].peak_bytes,
            context.pools[MemorySpace.PSUM].peak_bytes,
            context.planner.stats.as_dict() if context.planner is not None else {},
            context.planner.stats.tiles_dict() if context.planner is not None else {},
        )

    def _input(self, context: KernelContext, param: str, value: Any) -> Any:
        if isinstance(value, TensorSpec):
            dt = lookup_dtype(value.dtype)
            context.builder.program.add_tensor(param, tuple(value.shape), dt, "input")
            return Tile(param, tuple(value.shape), dt, hbm)
        if isinstance(value, np.ndarray):
            dt = _dtype_of_array(value)
            context.builder.program.add_tensor(param, value.shape, dt, "input", value)
            return Tile(param, value.shape, dt, hbm)
        return value  # a Python value (scalar, flag, tile size): the kernel specialises on it

    def _outputs(self, context: KernelContext, returned: Any) -> list[str]:
        items = returned if isinstance(returned, (tuple, list)) else [returned]
        if returned is None:
            items = []
        names = []
        for item in items:
            if not isinstance(item, Tile) or item.memory is not MemorySpace.HBM:
                raise HwsimError(
                    f"kernel {self.name} must return HBM tiles (ndarray(..., buffer=hbm)), "
                    f"got {item!r}"
                )
            decl = context.builder.program.hbm[item.name]
            if decl.kind == "input":
                raise HwsimError(f"kernel {self.name} returns its input '{item.name}' unchanged")
            decl.kind = "output"
            names.append(item.name)
        return names

    def __call__(
        self,
        *args: Any,
        config: str | HardwareConfig = "trn2",
        numerics: bool = True,
        race_check: bool = False,
        initcheck: bool | None = None,
        schedule: str | None = None,
        **kwargs: Any,
    ) -> KernelResult:
        """Build and simulate; returns outputs (as numpy arrays), trace and summary.

        race_check=True raises RaceError on unordered conflicting accesses; initcheck (on by
        default with numerics; off with False or ``HWSIM_INITCHECK=0``) raises InitCheckError on
        reads of never-written memory; schedule: as for ``build``."""
        from hwsim.kernels import warm_up
        from hwsim.machine.initcheck import front_door
        from hwsim.machine.simulator import run

        warm_up()
        built = self.build(*args, config=config, schedule=schedule, **kwargs)
        result = run(
            built.program,
            built.config,
            numerics=numerics,
            race_check=race_check,
            initcheck=front_door(initcheck, numerics),
        )
        outputs = tuple(result.outputs[name] for name in built.outputs) if numerics else ()
        summary = result.summary
        if built.spill:
            summary = dataclasses.replace(
                summary, sbuf_spill=built.spill, sbuf_spill_by_tile=built.spill_by_tile
            )
        return KernelResult(outputs, result.trace, summary, built.program)


def kernel(fn: Callable[..., Any]) -> Kernel:
    """Decorator: make ``fn`` a kernel-language kernel."""
    return Kernel(fn)


def _dtype_of_array(value: np.ndarray) -> DType:
    name = {
        "float32": "fp32",
        "float16": "fp16",
        "bfloat16": "bf16",
        "float8_e4m3": "fp8_e4m3",
        "float8_e5m2": "fp8_e5m2",
    }.get(value.dtype.name, value.dtype.name)
    try:
        return lookup_dtype(name)
    except IllegalInstructionError:
        raise HwsimError(
            f"kernel input of numpy dtype {value.dtype} has no hardware dtype; use float32, "
            "bfloat16 (ml_dtypes), float16, float8 or an int/uint type"
        ) from None
