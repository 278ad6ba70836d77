"""A program: HBM tensors plus, per NeuronCore, one in-order instruction stream per engine.

A program is plain data, independent of any hardware config, so one program can be simulated
against many configs (sweeps). Semaphores are named per core; an instruction waits for
``semaphore >= value`` and increments semaphores when it completes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from hwsim.dtypes import DType
from hwsim.engines import engine_names
from hwsim.errors import IllegalInstructionError
from hwsim.isa.base import Instruction

TensorKind = Literal["input", "output", "scratch"]


@dataclass
class HbmTensorDecl:
    """An HBM tensor the program uses. Inputs carry their initial values.

    ``address_bytes``: where a memory plan placed a scratch tensor in the program's scratch
    arena (tensors whose lifetimes do not overlap share bytes; ``ProgramBuilder.place_hbm``
    orders their accesses, and capacity counts the arena once). None: bytes of its own. The
    simulator still keeps each tensor's values apart, so a plan changes timing and capacity,
    never numerics.
    """

    name: str
    shape: tuple[int, ...]
    dtype: DType
    kind: TensorKind = "scratch"
    values: np.ndarray | None = None
    address_bytes: int | None = None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass(frozen=True)
class Allocation:
    """A named SBUF/PSUM buffer, for occupancy statistics (bytes per partition x partitions)."""

    core: int
    memory: str
    name: str
    start_partition: int
    partitions: int
    offset_bytes: int
    size_bytes: int  # per partition


@dataclass
class CoreProgram:
    """The instruction streams of one NeuronCore, keyed by engine name.

    Instructions are frozen values, and one object may stand at several positions of a stream
    (a block ``lang.repeat`` copied, where those positions have the same waits): read them,
    and make a changed one with ``dataclasses.replace``, never by setting an attribute."""

    streams: dict[str, list[Instruction]] = field(
        default_factory=lambda: {engine: [] for engine in engine_names()}
    )

    def instructions(self) -> Iterator[tuple[str, int, Instruction]]:
        for engine, stream in self.streams.items():
            for pc, instruction in enumerate(stream):
                yield engine, pc, instruction

    @property
    def instruction_count(self) -> int:
        return sum(len(s) for s in self.streams.values())


@dataclass
class Program:
    """HBM tensors + per-core instruction streams + named allocations + free-form metadata."""

    hbm: dict[str, HbmTensorDecl] = field(default_factory=dict)
    cores: list[CoreProgram] = field(default_factory=lambda: [CoreProgram()])
    allocations: list[Allocation] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    #: What the simulator worked out for this program's last runs (``hwsim.machine.prepare``):
    #: not part of the program (not copied by ``dataclasses.replace``, not compared or saved).
    run_cache: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def add_tensor(
        self,
        name: str,
        shape: tuple[int, ...],
        dtype: DType,
        kind: TensorKind = "scratch",
        values: np.ndarray | None = None,
    ) -> HbmTensorDecl:
        if name in self.hbm:
            raise IllegalInstructionError(f"HBM tensor '{name}' is declared twice")
        shape = integer_shape(shape, f"HBM tensor '{name}'")
        if values is not None and tuple(np.shape(values)) != tuple(shape):
            raise IllegalInstructionError(
                f"HBM tensor '{name}': values have shape {np.shape(values)}, declared {shape}"
            )
        decl = HbmTensorDecl(name, tuple(shape), dtype, kind, values)
        self.hbm[name] = decl
        return decl

    @property
    def instruction_count(self) -> int:
        return sum(core.instruction_count for core in self.cores)

    @property
    def scratch_arena_bytes(self) -> int:
        """Bytes of the planned scratch arena: the end of its highest placed tensor."""
        placed = [d for d in self.hbm.values() if d.address_bytes is not None]
        return max((d.address_bytes + d.nbytes for d in placed), default=0)  # type: ignore[operator]


def integer_shape(shape: Any, what: str, minimum: int = 0) -> tuple[int, ...]:
    """``shape`` as a tuple of Python ints, each at least ``minimum``; a float (``32.0``), a bool
    or anything else is an ``IllegalInstructionError`` naming ``what`` (a float shape would
    otherwise be truncated, or read as bytes, somewhere far from where it was written)."""
    try:
        dims = tuple(shape)
    except TypeError:
        raise IllegalInstructionError(f"{what}: shape {shape!r} is not a sequence") from None
    for n in dims:
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < minimum:
            raise IllegalInstructionError(
                f"{what}: shape {dims} must be whole numbers >= {minimum}; {n!r} "
                f"({type(n).__name__}) is not"
            )
    return tuple(int(n) for n in dims)
