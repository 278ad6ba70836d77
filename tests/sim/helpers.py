"""Shared helpers of the simulator tests: run one instruction between DMAs, get outputs and trace.

``run_single`` builds the smallest real program around an instruction: every input goes HBM -> SBUF
by ``dma_copy`` (then SBUF -> PSUM by a VectorE ``tensor_copy`` when it must live in PSUM), the
instruction runs, and every output goes back to HBM the same way in reverse. The builder inserts
the semaphores, so the instruction starts when its inputs have landed and the output transfers
start when it completes: the ``consumers`` records are dependent instructions on another engine
(or on VectorE, for PSUM outputs) whose start tick pins the instruction's done tick.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from hwsim.builder import ProgramBuilder
from hwsim.config import HardwareConfig, load_config
from hwsim.dtypes import FP32, DType, cast
from hwsim.errors import IllegalInstructionError
from hwsim.isa import AccessPattern, Instruction, MachineSpec, MemorySpace, contiguous
from hwsim.isa.copy_ops import TensorCopy
from hwsim.isa.dma_ops import DmaCopy
from hwsim.machine.simulator import RunResult, run
from hwsim.trace.records import InstructionRecord

SBUF, PSUM = MemorySpace.SBUF, MemorySpace.PSUM
#: On-chip operands start at multiples of this many bytes (per partition).
ALIGN_BYTES = 64
#: trn2 VectorE's fixed cycles per instruction (trn3 carries trn2's): the part of the ~60-cycle
#: tensor access start [S1] that K2-v5's VectorE active time shows unhidden. A calibrated value
#: (bench/calibrate.py, docs/fidelity.md): the exact-tick tests take it from here, so a
#: recalibration changes this line and the presets, and nothing else.
V3_VECTOR_FIXED = 26


@dataclass(frozen=True)
class Tile:
    """An operand of the instruction under test: [P, *free] shape, dtype, memory, and for inputs
    the initial values (any float/int array; stored in HBM cast to ``dtype`` with RNE)."""

    shape: tuple[int, ...]
    dtype: DType
    memory: MemorySpace = SBUF
    values: np.ndarray | None = None


def inp(values: np.ndarray, dtype: DType, memory: MemorySpace = SBUF) -> Tile:
    """An input tile holding ``values`` (shape taken from them)."""
    values = np.asarray(values)
    return Tile(tuple(values.shape), dtype, memory, values)


def out(shape: tuple[int, ...], dtype: DType, memory: MemorySpace = SBUF) -> Tile:
    """An output tile of ``shape``."""
    return Tile(tuple(shape), dtype, memory)


@dataclass
class SingleRun:
    """What ``run_single`` returns.

    outputs:   output name -> array as stored in HBM (numpy dtype of the tile's DType).
    record:    the trace record of the instruction under test.
    consumers: output name -> record of the first instruction that read it afterwards.
    aps:       operand name -> the access pattern the instruction was given.
    """

    outputs: dict[str, np.ndarray]
    record: InstructionRecord
    consumers: dict[str, InstructionRecord]
    aps: dict[str, AccessPattern]
    result: RunResult
    instruction: Instruction = field(repr=False)

    @property
    def issue_ticks(self) -> int:
        return self.record.end_tick - self.record.start_tick

    @property
    def done_ticks(self) -> int:
        return self.record.done_tick - self.record.start_tick


@functools.cache
def _preset(name: str) -> HardwareConfig:
    return load_config(name)


def as_config(config: str | HardwareConfig) -> HardwareConfig:
    """A preset name or path (loaded once per test session) or a config object."""
    return _preset(config) if isinstance(config, str) else config


class _Allocator:
    """Bump allocation per on-chip memory; PSUM operands start on a bank boundary."""

    def __init__(self, config: HardwareConfig) -> None:
        self.next = {SBUF: 0, PSUM: 0}
        self.align = {SBUF: ALIGN_BYTES, PSUM: config.psum.bank_bytes}

    def take(self, tile: Tile, memory: MemorySpace | None = None) -> AccessPattern:
        memory = memory or tile.memory
        offset = self.next[memory]
        free = tile.shape[1:] or (1,)
        ap = contiguous(memory, tile.dtype, tile.shape[0], free, offset_bytes=offset)
        size = int(np.prod(free)) * tile.dtype.itemsize
        self.next[memory] = -(-(offset + size) // self.align[memory]) * self.align[memory]
        return ap


def run_single(
    factory: Callable[[dict[str, AccessPattern]], Instruction],
    inputs: Mapping[str, Tile],
    outputs: Mapping[str, Tile],
    *,
    config: str | HardwareConfig = "tiny",
    numerics: bool = True,
    race_check: bool = True,
    initcheck: bool | None = None,
) -> SingleRun:
    """Run ``factory(aps)`` between input and output DMAs; see the module docstring.

    A name in both ``inputs`` and ``outputs`` is one operand read and written in place (e.g. an
    accumulating matmul's PSUM dst). Outputs are returned only when ``numerics`` is on.
    """
    cfg = as_config(config)
    builder = ProgramBuilder()
    alloc = _Allocator(cfg)
    queues = cfg.dma.queues_per_engine
    dma_count = 0

    def dma(dst: AccessPattern, src: AccessPattern) -> Instruction:
        nonlocal dma_count
        dma_count += 1
        return builder.emit(DmaCopy(engine="sync", dst=dst, src=src, queue=dma_count % queues))

    aps: dict[str, AccessPattern] = {}
    for name, tile in {**outputs, **inputs}.items():
        aps[name] = alloc.take(tile)
    for name, tile in inputs.items():
        free = tile.shape[1:] or (1,)
        builder.program.add_tensor(f"in_{name}", tile.shape, tile.dtype, "input", tile.values)
        hbm = contiguous(MemorySpace.HBM, tile.dtype, tile.shape[0], free, tensor=f"in_{name}")
        if tile.memory is SBUF:
            dma(aps[name], hbm)
        else:
            staging = alloc.take(tile, SBUF)
            dma(staging, hbm)
            builder.emit(TensorCopy(engine="vector", dst=aps[name], src=staging))
    instruction = builder.emit(factory(aps))
    readers: dict[str, Instruction] = {}
    for name, tile in outputs.items():
        free = tile.shape[1:] or (1,)
        builder.program.add_tensor(f"out_{name}", tile.shape, tile.dtype, "output")
        hbm = contiguous(MemorySpace.HBM, tile.dtype, tile.shape[0], free, tensor=f"out_{name}")
        if tile.memory is SBUF:
            readers[name] = dma(hbm, aps[name])
        else:
            staging = alloc.take(tile, SBUF)
            readers[name] = builder.emit(TensorCopy(engine="vector", dst=staging, src=aps[name]))
            dma(hbm, staging)
    result = run(
        builder.build(),
        cfg,
        numerics=numerics,
        race_check=race_check,
        initcheck=initcheck,
        summarize=False,
    )
    by_instruction = {id(r.instruction): r for r in result.trace.instructions}
    return SingleRun(
        outputs={name: result.outputs[f"out_{name}"] for name in outputs} if numerics else {},
        record=by_instruction[id(instruction)],
        consumers={name: by_instruction[id(reader)] for name, reader in readers.items()},
        aps=aps,
        result=result,
        instruction=instruction,
    )


def assert_timing(run: SingleRun, issue_ticks: int, done_ticks: int) -> None:
    """Assert the instruction's exact issue and done ticks (from its start), and that the
    instructions reading its outputs waited for it: none starts before its done tick and the
    first starts exactly at it (one tick earlier would be a missed dependency)."""
    record = run.record
    assert run.issue_ticks == issue_ticks, f"issue {run.issue_ticks} ticks, expected {issue_ticks}"
    assert run.done_ticks == done_ticks, f"done after {run.done_ticks} ticks, expected {done_ticks}"
    consumers = sorted(run.consumers.values(), key=lambda r: r.start_tick)
    assert consumers, "no instruction reads the outputs"
    assert all(c.start_tick >= record.done_tick for c in consumers), consumers
    first = consumers[0]
    assert first.ready_tick < record.done_tick, "the consumer was not waiting for the result"
    assert first.start_tick == record.done_tick, (first.start_tick, record.done_tick)


def tile_ap(
    partitions: int,
    free: int | tuple[int, ...],
    memory: MemorySpace = SBUF,
    dtype: DType = FP32,
    offset_bytes: int = 0,
) -> AccessPattern:
    """A dense on-chip operand (for legality tests, which need no program around it)."""
    return contiguous(memory, dtype, partitions, free, offset_bytes=offset_bytes)


def rounded(values: np.ndarray, dtype: DType) -> np.ndarray:
    """``values`` as the machine holds them in ``dtype`` (RNE), widened to fp32 (or int64)."""
    stored = cast(np.asarray(values), dtype)
    return stored.astype(np.float32 if dtype.is_float else np.int64)


def check_illegal(
    instruction: Instruction, config: str | HardwareConfig = "tiny", *fragments: str
) -> str:
    """Assert ``instruction.check`` fails with a message naming it and holding every fragment."""
    spec = MachineSpec(as_config(config))
    try:
        instruction.check(spec)
    except IllegalInstructionError as err:
        message = str(err)
    else:
        raise AssertionError(f"{instruction.label()} passed its legality check")
    assert message.startswith(f"{instruction.OPCODE} on {instruction.engine}"), message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def _ordered_bits(values: np.ndarray, dtype: DType) -> np.ndarray:
    # Float bit patterns mapped to integers monotonic in the value, with -0 == +0.
    width = {1: np.int8, 2: np.int16, 4: np.int32}[dtype.itemsize]
    bits = np.ascontiguousarray(values, dtype=dtype.numpy).view(width).astype(np.int64)
    sign = np.int64(1) << (8 * dtype.itemsize - 1)
    return np.where(bits < 0, -(bits & (sign - 1)), bits)


def assert_ulps(actual: np.ndarray, expected: np.ndarray, dtype: DType, max_ulps: int = 0) -> None:
    """Assert ``actual`` (as stored in ``dtype``) is within ``max_ulps`` ulps of ``dtype`` of
    ``expected`` rounded to ``dtype`` (RNE); NaN matches NaN. Integer dtypes compare exactly."""
    expected_stored = cast(np.asarray(expected), dtype)
    actual = np.asarray(actual)
    assert actual.shape == expected_stored.shape, f"shape {actual.shape} vs {expected_stored.shape}"
    if not dtype.is_float:
        np.testing.assert_array_equal(actual.astype(np.int64), expected_stored.astype(np.int64))
        return
    a_nan = np.isnan(actual.astype(np.float32))
    e_nan = np.isnan(expected_stored.astype(np.float32))
    assert np.array_equal(a_nan, e_nan), "NaN positions differ"
    distance = np.abs(_ordered_bits(actual, dtype) - _ordered_bits(expected_stored, dtype))
    distance[a_nan] = 0
    worst = int(np.argmax(distance)) if distance.size else 0
    assert distance.size == 0 or distance.flat[worst] <= max_ulps, (
        f"{int(distance.flat[worst])} {dtype.name} ulps apart (max {max_ulps}) at flat index "
        f"{worst}: got {actual.flat[worst]!r}, expected {expected_stored.flat[worst]!r}"
    )


class SmallProgram:
    """A hand-built program for tests that need several instructions or tiles at chosen
    partitions: SBUF tiles 256 bytes apart, inputs loaded from HBM, outputs stored back."""

    def __init__(self) -> None:
        self.b = ProgramBuilder()
        self.next_byte = {SBUF: 0, PSUM: 0}
        self.queue = 0

    def tile(
        self,
        partitions: int,
        free: int | tuple[int, ...],
        dtype: DType,
        start: int = 0,
        memory: MemorySpace = SBUF,
    ) -> AccessPattern:
        ap = contiguous(
            memory,
            dtype,
            partitions,
            free,
            start_partition=start,
            offset_bytes=self.next_byte[memory],
        )
        self.next_byte[memory] += 256 if memory is SBUF else 2048
        return ap

    def load(self, name: str, values: np.ndarray, dtype: DType, start: int = 0) -> AccessPattern:
        values = np.asarray(values)
        tile = self.tile(values.shape[0], values.shape[1:], dtype, start)
        self.b.program.add_tensor(name, values.shape, dtype, "input", values)
        hbm = contiguous(MemorySpace.HBM, dtype, values.shape[0], values.shape[1:], tensor=name)
        self.queue += 1
        self.b.emit(DmaCopy(engine="sync", dst=tile, src=hbm, queue=self.queue % 4))
        return tile

    def store(self, name: str, tile: AccessPattern) -> None:
        self.b.program.add_tensor(name, tile.shape, tile.dtype, "output")
        hbm = contiguous(MemorySpace.HBM, tile.dtype, tile.partitions, tile.free_sizes, tensor=name)
        self.queue += 1
        if tile.memory is PSUM:
            staging = self.tile(tile.partitions, tile.free_sizes, tile.dtype)
            self.b.emit(TensorCopy(engine="vector", dst=staging, src=tile))
            tile = staging
        self.b.emit(DmaCopy(engine="sync", dst=hbm, src=tile, queue=self.queue % 4))

    def run(self, config: str | HardwareConfig = "tiny") -> RunResult:
        return run(self.b.build(), as_config(config), race_check=True)
