"""The simulated ISA: access patterns, the instruction contract and registry, and the instructions.

Importing this package registers every instruction in ``ISA`` (opcode -> class).
"""

from hwsim.isa import (  # noqa: F401  (register instructions)
    copy_ops,
    dma_ops,
    dynamic_copy_ops,
    fused_ops,
    gather_ops,
    gpsimd_ops,
    index_ops,
    multicore_ops,
    mx_ops,
    random_ops,
    reduce_ops,
    scalar_ops,
    scan_ops,
    search_ops,
    tensor_ops,
    vector_ops,
)
from hwsim.isa.ap import AccessPattern, MemorySpace, contiguous
from hwsim.isa.base import ISA, Instruction, MachineSpec, register

__all__ = [
    "ISA",
    "AccessPattern",
    "Instruction",
    "MachineSpec",
    "MemorySpace",
    "contiguous",
    "register",
]
