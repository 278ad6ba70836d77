"""Initcheck's value flow: which written elements hold values computed from never-written bytes.

A read of never-written bytes is harmless when its values never reach anything the kernel
returns: a matmul over a whole [K, 512] tile whose last columns a masked load left unwritten
computes garbage only in the result columns a masked store then leaves out, as on the hardware.
So for the instructions whose reads only flow into the values they write (``FLOWING``), the
initcheck defers such a read and marks the elements it taints "undefined" (``UNDEFINED``); a
later read of undefined elements is deferred in turn, and the deferred reads become findings
only if undefined values reach an output tensor (``InitChecker.check_outputs``), like
valgrind's memcheck. Every other instruction (indices, predicates, addresses, DMAs, anything
that steers what is read or written) reports such a read at once, as before.

The taint is exact where the instruction's element mapping is simple and conservative (the
whole operand written) everywhere else, so it can report more than the data flow has, never less:
- ``nc_matmul``: ``dst[m, n]`` is undefined when column ``m`` of ``stationary`` or column ``n``
  of ``moving`` holds an undefined element (any of the K contraction rows), or, accumulating,
  when it was undefined before;
- elementwise instructions: an undefined element taints the same element of an operand of the
  same shape, and a broadcast operand (a [P, 1] scale or bias) taints the whole output;
- ``dma_copy``: element i of ``src`` taints element i of ``dst`` (it copies in order).
"""

from __future__ import annotations

import numpy as np

from hwsim.isa.ap import AccessPattern
from hwsim.isa.base import Instruction
from hwsim.isa.copy_ops import TensorCopy
from hwsim.isa.dma_ops import DmaCopy
from hwsim.isa.scalar_ops import Activation, ActivationReduce
from hwsim.isa.tensor_ops import NcMatmul
from hwsim.isa.vector_ops import Reciprocal, ScalarTensorTensor, TensorScalar, TensorTensor

#: A mirror byte whose data byte was written with a value computed from never-written bytes
#: (never-written is 0, written is ``WRITTEN_BYTE``).
UNDEFINED_BYTE = 0x5A

#: Instructions whose element-for-element operands map each read element to the written one
#: (exact types: a subclass may steer its writes by what it reads).
ELEMENTWISE: frozenset[type[Instruction]] = frozenset(
    (
        TensorCopy,
        TensorTensor,
        TensorScalar,
        ScalarTensorTensor,
        Reciprocal,
        Activation,
        ActivationReduce,  # its reduced column has another shape: all of it
    )
)
#: Instructions whose reads only flow into the values they write: their reads of never-written
#: bytes are deferred (the module docstring). A ``dma_copy`` moves its elements in order.
FLOWING: frozenset[type[Instruction]] = frozenset((NcMatmul, DmaCopy, *ELEMENTWISE))


def undefined_value(itemsize: int) -> int:
    """A mirror element (unsigned, ``itemsize`` bytes) whose bytes are all undefined."""
    return int.from_bytes(bytes([UNDEFINED_BYTE]) * itemsize, "little")


def taints(
    instruction: Instruction,
    writes: tuple[tuple[AccessPattern, object], ...],
    undefined: list[tuple[AccessPattern, np.ndarray]],
) -> list[np.ndarray]:
    """For each written operand, a boolean array shaped like it: the elements whose values
    come from the ``undefined`` reads ((operand, its undefined elements) pairs)."""
    kind = type(instruction)
    if kind is NcMatmul:
        return [_matmul_taint(instruction, ap, undefined) for ap, _ in writes]  # type: ignore[arg-type]
    result = []
    for ap, _ in writes:
        taint = np.zeros(ap.shape, dtype=bool)
        for read, elements in undefined:
            if kind in ELEMENTWISE and read.shape == ap.shape:
                taint |= elements
            elif kind is DmaCopy:  # element i of src goes to element i of dst
                taint |= elements.reshape(ap.shape)
            else:
                taint[...] = True
        result.append(taint)
    return result


def _matmul_taint(
    matmul: NcMatmul, dst: AccessPattern, undefined: list[tuple[AccessPattern, np.ndarray]]
) -> np.ndarray:
    """``dst``'s undefined elements: rows from ``stationary``'s undefined columns, columns from
    ``moving``'s (any contraction row, in double-row mode either packed row)."""
    _, m, n = matmul.dims()
    rows, columns = np.zeros(m, dtype=bool), np.zeros(n, dtype=bool)
    before = np.zeros(dst.shape, dtype=bool)
    for read, elements in undefined:
        if read is matmul.stationary:
            rows |= elements.reshape(read.partitions * matmul.packing(), m).any(axis=0)
        elif read is matmul.moving:
            columns |= elements.reshape(read.partitions * matmul.packing(), n).any(axis=0)
        elif read is matmul.dst:  # accumulating onto undefined elements
            before |= elements
        else:  # not an operand it multiplies: all of it (conservative)
            return np.ones(dst.shape, dtype=bool)
    return (rows[:, None] | columns[None, :]).reshape(dst.shape) | before
