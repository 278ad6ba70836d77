"""Memory state of the machine: SBUF and PSUM per core, HBM as named tensors shared by the chip.

On-chip memories are byte arrays ``[partitions x bytes_per_partition]``; operands are strided
views onto them, so an instruction reads and writes exactly the bytes its access pattern names.
New on-chip memory is filled with 0xFF bytes (NaN for every float dtype), like the NKI simulator's
sentinels, so a read of never-written memory shows up in results instead of passing silently.

For ``initcheck`` runs each memory also has a "written" mirror: one byte per data byte, 0 until
something writes it, then 0xFF (and PSUM a second one for its accumulation groups). A mirror is
viewed through an operand's access pattern exactly like the data, as unsigned integers of the
operand's element size, so an element counts as written only if all of its bytes are (its mirror
value is then the dtype's maximum): marking and checking an operand is one vectorised numpy
operation (``hwsim.machine.initcheck``). Mirrors are made at first use, so other runs never pay.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from hwsim.dtypes import DType, cast, to_compute
from hwsim.errors import MemoryAccessError
from hwsim.isa.ap import AccessPattern, MemorySpace

UNINITIALISED_BYTE = 0xFF
#: A mirror byte whose data byte has been written (never-written mirror bytes are 0).
WRITTEN_BYTE = 0xFF
#: The unsigned dtype an operand's mirror is viewed as, by element size in bytes.
MIRROR_DTYPES: dict[int, np.dtype[np.unsignedinteger[Any]]] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.uint16),
    4: np.dtype(np.uint32),
    8: np.dtype(np.uint64),
}

#: Which byte array of a memory a view is made on (``CoreState.view``, ``CoreState.mirror``).
DATA, WRITTEN, PSUM_GROUP = 0, 1, 2


@dataclass
class HbmTensor:
    """A named tensor in HBM: a flat byte buffer with the shape and dtype it was declared with.

    The buffer is made at first use: a timing-only run never reads or writes tensor bytes, so it
    allocates none (a 1M-instruction program's tensors are gigabytes).
    """

    name: str
    shape: tuple[int, ...]
    dtype: DType
    nbytes: int
    stack: int = 0
    #: Whether every byte counts as written from the start (inputs, tensors given values).
    initialised: bool = False

    @cached_property
    def data(self) -> np.ndarray:
        """The tensor's bytes (uint8, flat), zeros until written."""
        return np.zeros(self.nbytes, dtype=np.uint8)

    @property
    def allocated(self) -> bool:
        """Whether the byte buffer exists yet (tests of timing-only runs check it does not)."""
        return "data" in self.__dict__

    @cached_property
    def written(self) -> np.ndarray:
        """The initcheck mirror of ``data`` (see the module docstring)."""
        return np.full(self.nbytes, WRITTEN_BYTE if self.initialised else 0, dtype=np.uint8)

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
        initialised: bool | None = None,
        read_in_place: bool = False,
    ) -> HbmTensor:
        """Declare a tensor; a ``planned`` one lives in the scratch arena (``reserve_arena``),
        whose bytes are counted once, not per tensor. ``initialised``: whether initcheck counts
        its bytes as written from the start (default: when ``values`` are given).
        ``read_in_place``: ``values`` (a contiguous array of exactly the tensor's dtype and
        size, which nothing writes) become the tensor's bytes, read-only, instead of being
        copied in; a write to the tensor then raises. Copying hundreds of MB of weights into
        fresh memory costs a first run most of a second in page faults."""
        if name in self.tensors:
            raise MemoryAccessError(f"HBM tensor '{name}' is declared twice")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if not planned:
            self._reserve(f"HBM tensor '{name}'", nbytes, stack)
        if initialised is None:
            initialised = values is not None
        tensor = HbmTensor(name, tuple(shape), dtype, nbytes, stack, initialised)
        if values is not None and read_in_place and _readable_in_place(values, dtype, nbytes):
            data = values.reshape(-1).view(np.uint8)
            data.flags.writeable = False  # a view of its own: the caller's array is unchanged
            tensor.__dict__["data"] = data  # (the cached property's slot)
        elif values is not None:
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


def _readable_in_place(values: np.ndarray, dtype: DType, nbytes: int) -> bool:
    """Whether ``values`` can be an HBM tensor's bytes as they are (``Hbm.add``)."""
    return (
        isinstance(values, np.ndarray)
        and values.dtype == dtype.numpy
        and values.flags.c_contiguous
        and values.nbytes == nbytes
    )


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
        #: When each shared port is next free (the simulator sizes it: ``CostModel.port_names``).
        self.shared_port_free_tick: list[int] = []
        #: Bytes per partition the initcheck mirrors of (SBUF, PSUM) cover: no operand reaches
        #: further (``initcheck.size_mirrors``), and a small program should not pay for 24 MiB.
        self.mirror_bytes_per_partition = (sbuf_geometry[1], psum_geometry[1])

    @cached_property
    def engine_registers(self) -> dict[str, Any]:
        """Engine-internal state of the instructions that keep it (random number generators,
        reduce accumulators), by key; ``hwsim.isa.engine_state`` owns what is in it."""
        return {}

    # Made at first use: a timing-only run never touches them (and filling 24 MiB of SBUF per
    # core would cost it as much as simulating thousands of instructions).
    @cached_property
    def sbuf(self) -> np.ndarray:
        return np.full(self.sbuf_geometry, UNINITIALISED_BYTE, dtype=np.uint8)

    @cached_property
    def psum(self) -> np.ndarray:
        return np.full(self.psum_geometry, UNINITIALISED_BYTE, dtype=np.uint8)

    # Mirrors are filled (np.full) like the data, not np.zeros: zeros maps its pages lazily,
    # so the first write to a tile would take a page fault per partition row it touches. Their
    # row pitch may be shorter than the data's: views take each array's own pitch.
    @cached_property
    def sbuf_written(self) -> np.ndarray:
        shape = (self.sbuf_geometry[0], self.mirror_bytes_per_partition[0])
        return np.full(shape, 0, dtype=np.uint8)

    @cached_property
    def psum_written(self) -> np.ndarray:
        shape = (self.psum_geometry[0], self.mirror_bytes_per_partition[1])
        return np.full(shape, 0, dtype=np.uint8)

    @cached_property
    def psum_group(self) -> np.ndarray:
        """Initcheck: PSUM bytes inside an accumulation group (last written by TensorE)."""
        shape = (self.psum_geometry[0], self.mirror_bytes_per_partition[1])
        return np.full(shape, 0, dtype=np.uint8)

    def view(self, ap: AccessPattern) -> np.ndarray:
        """A writable strided view of the operand's elements, shaped ``ap.shape``."""
        buffer, offset_bytes, strides_bytes = self._layout(ap, DATA)
        return np.ndarray(ap.shape, ap.dtype.numpy, buffer, offset_bytes, strides_bytes)

    def mirror(self, ap: AccessPattern, which: int = WRITTEN) -> np.ndarray:
        """The operand's initcheck mirror (``WRITTEN``, or ``PSUM_GROUP`` for a PSUM operand),
        viewed like ``view(ap)`` but as unsigned integers of the operand's element size."""
        buffer, offset_bytes, strides_bytes = self._layout(ap, which)
        dtype = MIRROR_DTYPES[ap.dtype.itemsize]
        return np.ndarray(ap.shape, dtype, buffer, offset_bytes, strides_bytes)

    def mirror_bytes(self, ap: AccessPattern, which: int = WRITTEN) -> tuple[np.ndarray, int, int]:
        """For reports: the operand's mirror byte by byte, shaped ``(*ap.shape, itemsize)``
        (uint8), the offset of its first byte in the memory's byte array, and the memory's row
        pitch in bytes (bytes per partition; 0 for HBM, a flat byte space)."""
        buffer, offset_bytes, strides_bytes = self._layout(ap, which)
        shape = (*ap.shape, ap.dtype.itemsize)
        view = np.ndarray(shape, np.uint8, buffer, offset_bytes, (*strides_bytes, 1))
        return view, offset_bytes, (0 if ap.memory is MemorySpace.HBM else buffer.strides[0])

    def _layout(self, ap: AccessPattern, which: int) -> tuple[np.ndarray, int, tuple[int, ...]]:
        """(byte array, offset of the first element, strides in bytes) of an operand, on the
        memory's data (``DATA``) or on one of its initcheck mirrors.

        Views are made with numpy's own constructor, several times cheaper than ``as_strided``
        and refusing a view that reaches outside the buffer (legality checks keep every operand
        inside its memory before it runs)."""
        size = ap.dtype.itemsize
        strides_bytes = tuple([s * size for s in ap.free_strides])
        if ap.memory is MemorySpace.HBM:
            try:
                tensor = self.hbm.tensors[ap.tensor]
            except KeyError:
                raise MemoryAccessError(f"no HBM tensor named '{ap.tensor}'") from None
            first, last = ap.byte_span()
            if first < 0 or last > tensor.nbytes:
                raise MemoryAccessError(
                    f"HBM access [{first}, {last}) outside tensor '{ap.tensor}' "
                    f"({tensor.nbytes} bytes)"
                )
            buffer = tensor.data if which == DATA else tensor.written
            return buffer, ap.offset_bytes, (ap.partition_stride * size, *strides_bytes)
        if ap.memory is MemorySpace.SBUF:
            memory = self.sbuf if which == DATA else self.sbuf_written
        elif which == DATA:
            memory = self.psum
        else:
            memory = self.psum_written if which == WRITTEN else self.psum_group
        row = memory.strides[0]
        return memory, ap.start_partition * row + ap.offset_bytes, (row, *strides_bytes)

    def read(self, ap: AccessPattern) -> np.ndarray:
        """The operand's values as engines compute on them (fp32 for floats), a fresh array."""
        view = self.view(ap)
        values = to_compute(view)
        # A widening conversion already made a fresh array; copy only what is still the view.
        return np.array(values, copy=True) if values is view else values

    def write(self, ap: AccessPattern, values: np.ndarray) -> None:
        """Store values into the operand, casting to its dtype with hardware rounding."""
        target = self.view(ap)
        if not target.flags.writeable:  # only an HBM input read in place is (``Hbm.add``)
            raise MemoryAccessError(
                f"HBM tensor '{ap.tensor}' is an input the run reads in place, from its "
                "caller's memory: the program must not write it (run it without "
                "inputs_read_in_place to let it write a copy)"
            )
        if not (isinstance(values, np.ndarray) and values.shape == target.shape):
            values = np.broadcast_to(values, target.shape)
        target[...] = cast(values, ap.dtype)
