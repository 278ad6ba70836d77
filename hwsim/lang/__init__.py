"""The kernel language: write NKI-style kernels against the simulated NeuronCore.

    from hwsim import lang
    from hwsim.lang import isa as nisa

    @lang.kernel
    def double(x):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
        tile = lang.load(x)
        nisa.tensor_scalar(tile, tile, nisa.AluOp.multiply, 2.0)
        lang.store(out, tile)
        return out

    result = double(np.ones((128, 512), np.float32), config="trn2")
    result.output, result.summary.total_ns

See docs/kernel-language.md for a walk-through.
"""

from hwsim.kernels.ops import ActivationFunction, AluOp, ReduceOp
from hwsim.lang import isa
from hwsim.lang.allocator import OutOfMemoryError
from hwsim.lang.blocks import BlockTile, ParDim, par_dim
from hwsim.lang.kernel import (
    BuiltKernel,
    Kernel,
    KernelResult,
    TensorSpec,
    current,
    kernel,
    ndarray,
    place_hbm,
    tag_scope,
)
from hwsim.lang.language import (
    bfloat16,
    config,
    float4_e2m1fn_x4,
    float8_e4m3,
    float8_e4m3fn_x4,
    float8_e5m2,
    float8_e5m2_x4,
    float16,
    float32,
    int8,
    int16,
    int32,
    load,
    store,
    tile_size,
    uint8,
    uint16,
    uint32,
)
from hwsim.lang.repeat import repeat
from hwsim.lang.scheduling import no_reorder, schedule_barrier, schedule_edge, sequential_range
from hwsim.lang.tiles import Buffer, IndexingError, Tile, View, broadcast_to, hbm, psum, sbuf
from hwsim.lang.watchdog import TraceLimitError, TraceLimits

__all__ = [
    "ActivationFunction",
    "AluOp",
    "BlockTile",
    "Buffer",
    "BuiltKernel",
    "IndexingError",
    "Kernel",
    "KernelResult",
    "OutOfMemoryError",
    "ParDim",
    "ReduceOp",
    "TensorSpec",
    "Tile",
    "TraceLimitError",
    "TraceLimits",
    "View",
    "bfloat16",
    "broadcast_to",
    "config",
    "current",
    "float4_e2m1fn_x4",
    "float8_e4m3",
    "float8_e4m3fn_x4",
    "float8_e5m2",
    "float8_e5m2_x4",
    "float16",
    "float32",
    "hbm",
    "int8",
    "int16",
    "int32",
    "isa",
    "kernel",
    "load",
    "ndarray",
    "no_reorder",
    "par_dim",
    "place_hbm",
    "psum",
    "repeat",
    "sbuf",
    "schedule_barrier",
    "schedule_edge",
    "sequential_range",
    "store",
    "tag_scope",
    "tile_size",
    "uint8",
    "uint16",
    "uint32",
]
