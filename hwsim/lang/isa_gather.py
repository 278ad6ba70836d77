"""Kernel-language calls of the on-chip gathers and shuffles, named like ``nki.isa``.

local_gather, nc_n_gather (GpSimdE), nc_stream_shuffle (VectorE), tensor_copy_dynamic_src/dst
(older nki.isa API; any compute engine). Re-exported by ``hwsim.lang.isa``; semantics and costs
are the instructions' (``hwsim.isa.gather_ops``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hwsim.errors import IllegalInstructionError
from hwsim.isa.base import Instruction
from hwsim.lang.calls import isa_call
from hwsim.lang.emit import emit, vector_engine
from hwsim.lang.kernel import source_location

local_gather = isa_call(
    "local_gather",
    """Per 16-partition GpSimd core: gather num_elem_per_idx elements at each of the core's
    (uint16) indices from each partition's own row of src_buffer into dst.""",
)
nc_n_gather = isa_call(
    "nc_n_gather",
    "dst[p, i] = data[p, indices[p, i]] (uint32 indices into each partition's flat row).",
)
nc_stream_shuffle = isa_call(
    "nc_stream_shuffle",
    """In each 32-partition quadrant, dst partition i = src partition shuffle_mask[i] (255:
    unmodified).""",
)


def _dynamic_copy(opcode: str, doc: str) -> Callable[..., Instruction]:
    """A copy whose window along ``axis`` (1 = the first free dim) starts at the value of
    ``offset`` (a [1, 1] int32/uint32 SBUF tile) at run time."""

    def call(
        dst: Any, src: Any, offset: Any, *, axis: int = 1, engine: str = vector_engine
    ) -> Instruction:
        if int(axis) < 1:
            raise IllegalInstructionError(
                f"{source_location()}: {opcode}(axis={axis}): the dynamic axis is a free dim, "
                "1 or more (axis 0 is the partition dim)"
            )
        free_axis = int(axis) - 1
        return emit(opcode, engine, dst=dst, src=src, offset=offset, free_axis=free_axis)

    call.__name__ = call.__qualname__ = opcode
    call.__doc__ = doc
    return call


tensor_copy_dynamic_src = _dynamic_copy(
    "tensor_copy_dynamic_src",
    """dst = src[..., k : k + w, ...] along ``axis`` (1 = the first free dim), k the value of
    ``offset`` (a [1, 1] int32/uint32 SBUF tile) at run time, w dst's size along it: src is the
    whole range the window may take (NKI: ``src[ix, idx_tile[0, b] + iy]``).""",
)
tensor_copy_dynamic_dst = _dynamic_copy(
    "tensor_copy_dynamic_dst",
    """dst[..., k : k + w, ...] = src along ``axis``, k read from ``offset`` at run time, w src's
    size along it: dst is the whole range the window may take.""",
)
