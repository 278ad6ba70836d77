"""Memory state of the machine: SBUF and PSUM per core, HBM as named tensors shared by the chip.

On-chip memories are byte arrays ``[partitions x bytes_per_partition]``; operands are strided
views onto them, so an instruction reads and writes exactly the bytes its access pattern names.
New on-chip memory is filled with 0xFF bytes (NaN for every float dtype), like the NKI simulator's
sentinels, so a read of never-written memory shows up in results instead of passing silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from hwsim.dtypes import DType, cast, to_compute
from hwsim.errors import MemoryAccessError
from hwsim.isa.ap import AccessPattern, MemorySpace

UNINITIALISED_BYTE = 0xFF


@dataclass
class HbmTensor:
    """A named tensor in HBM: a flat byte buffer with the shape and dtype it was declared with."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    data: np.ndarray  # uint8, flat
    stack: int = 0

    @property
    def nbytes(self) -> int:
        return int(self.data.size)

    def as_array(self) -> np.ndarray:
        """The tensor's contents with its declared shape and dtype (a view)."""
        return self.data.view(self.dtype.numpy).reshape(self.shape)


class Hbm:
    """All HBM tensors of a chip, with per-stack capacity accounting."""

    def __init__(self, stacks: int, capacity_bytes_per_stack: int) -> None:
        self.tensors: dict[str, HbmTensor] = {}
        self.capacity_bytes_per_stack = capacity_bytes_per_stack
        self.used_bytes = [0] * stacks

    def add(
        self,
        name: str,
        shape: tuple[int, ...],
        dtype: DType,
        values: np.ndarray | None = None,
        stack: int = 0,
        *,
        planned: bool = False,
    ) -> HbmTensor:
        """Declare a tensor; a ``planned`` one lives in the scratch arena (``reserve_arena``),
        whose bytes are counted once, not per tensor."""
        if name in self.tensors:
            raise MemoryAccessError(f"HBM tensor '{name}' is declared twice")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if not planned:
            self._reserve(f"HBM tensor '{name}'", nbytes, stack)
        data = np.zeros(nbytes, dtype=np.uint8)
        tensor = HbmTensor(name, tuple(shape), dtype, data, stack)
        if values is not None:
            tensor.as_array()[...] = cast(np.asarray(values).reshape(shape), dtype)
        self.tensors[name] = tensor
        return tensor

    def reserve_arena(self, nbytes: int, stack: int = 0) -> None:
        """Count the scratch arena of a memory-planned program (see ``HbmTensorDecl``)."""
        self._reserve("the planned scratch arena", nbytes, stack)

    def _reserve(self, what: str, nbytes: int, stack: int) -> None:
        if self.used_bytes[stack] + nbytes > self.capacity_bytes_per_stack:
            raise MemoryAccessError(
                f"{what} ({nbytes} B) does not fit: stack {stack} has "
                f"{self.capacity_bytes_per_stack - self.used_bytes[stack]} B free"
            )
        self.used_bytes[stack] += nbytes


class CoreState:
    """SBUF and PSUM of one NeuronCore, plus access to the chip's HBM."""

    def __init__(
        self,
        sbuf_geometry: tuple[int, int],
        psum_geometry: tuple[int, int],
        hbm: Hbm,
        core: int = 0,
    ) -> None:
        self.core = core
        self.sbuf_geometry = sbuf_geometry
        self.psum_geometry = psum_geometry
        self.hbm = hbm
        #: Tick at which each shared access port of the core is free again (NeuronCore-v2:
        #: [0] SBUF port of VectorE+GpSimdE, [1] PSUM port of VectorE+ScalarE; see simulator).
        #: When each shared port is next free (the simulator sizes it: ``_port_indices``).
        self.shared_port_free_tick: list[int] = []

    # Made at first use: a timing-only run never touches them (and filling 24 MiB of SBUF per
    # core would cost it as much as simulating thousands of instructions).
    @cached_property
    def sbuf(self) -> np.ndarray:
        return np.full(self.sbuf_geometry, UNINITIALISED_BYTE, dtype=np.uint8)

    @cached_property
    def psum(self) -> np.ndarray:
        return np.full(self.psum_geometry, UNINITIALISED_BYTE, dtype=np.uint8)

    def view(self, ap: AccessPattern) -> np.ndarray:
        """A writable strided view of the operand's elements, shaped ``ap.shape``."""
        size = ap.dtype.itemsize
        strides_bytes = tuple([s * size for s in ap.free_strides])
        if ap.memory is MemorySpace.HBM:
            try:
                buffer = self.hbm.tensors[ap.tensor].data
            except KeyError:
                raise MemoryAccessError(f"no HBM tensor named '{ap.tensor}'") from None
            first, last = ap.byte_span()
            if first < 0 or last > buffer.size:
                raise MemoryAccessError(
                    f"HBM access [{first}, {last}) outside tensor '{ap.tensor}' "
                    f"({buffer.size} bytes)"
                )
            return _strided(
                buffer,
                ap.offset_bytes,
                ap.dtype,
                ap.shape,
                (ap.partition_stride * size, *strides_bytes),
            )
        memory = self.sbuf if ap.memory is MemorySpace.SBUF else self.psum
        row = memory.strides[0]
        return _strided(
            memory,
            ap.start_partition * row + ap.offset_bytes,
            ap.dtype,
            ap.shape,
            (row, *strides_bytes),
        )

    def read(self, ap: AccessPattern) -> np.ndarray:
        """The operand's values as engines compute on them (fp32 for floats), a fresh array."""
        view = self.view(ap)
        values = to_compute(view)
        # A widening conversion already made a fresh array; copy only what is still the view.
        return np.array(values, copy=True) if values is view else values

    def write(self, ap: AccessPattern, values: np.ndarray) -> None:
        """Store values into the operand, casting to its dtype with hardware rounding."""
        target = self.view(ap)
        if not (isinstance(values, np.ndarray) and values.shape == target.shape):
            values = np.broadcast_to(values, target.shape)
        target[...] = cast(values, ap.dtype)


def _strided(
    buffer: np.ndarray,
    offset_bytes: int,
    dtype: DType,
    shape: tuple[int, ...],
    strides_bytes: tuple[int, ...],
) -> np.ndarray:
    """A view of ``dtype`` elements into a contiguous uint8 buffer: numpy's own constructor, which
    is several times cheaper than ``as_strided`` and refuses a view reaching outside the buffer
    (legality checks keep every operand inside its memory before it runs)."""
    return np.ndarray(shape, dtype.numpy, buffer, offset_bytes, strides_bytes)
