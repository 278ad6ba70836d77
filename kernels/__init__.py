"""Numerics of every simulated instruction: Numba-jitted kernels, each with a NumPy ``*_ref`` twin.

Operands arrive as fp32 (float dtypes) or int64 (integer dtypes) arrays flattened to ``[P, N]``
(P = partitions); results are fp32/int64 and hwsim casts them to the destination dtype. This
package imports only numpy, numba (with llvmlite, numba's code generator) and the standard
library. Call ``warm_up()`` once before timing anything so that JIT compilation (or loading the
on-disk cache) is not counted as simulation time.
"""

from __future__ import annotations

import numpy as np

from ._jit_cache import announce_if_uncompiled, invalidate_stale_cache
from .activations import ACTIVATION_REF
from .elementwise import (
    activation,
    activation_reduce,
    activation_reduce_ref,
    activation_ref,
    reciprocal,
    reciprocal_ref,
    scalar_tensor_tensor,
    scalar_tensor_tensor_ref,
    select,
    select_ref,
    tensor_scalar,
    tensor_scalar_ref,
    tensor_tensor,
    tensor_tensor_ref,
)
from .gather import (
    GPSIMD_GROUP,
    gather_rows,
    gather_rows_ref,
    local_gather,
    local_gather_ref,
    n_gather,
    n_gather_ref,
    nonzero_with_count,
    nonzero_with_count_ref,
    sequence_bounds,
    sequence_bounds_ref,
    topk,
    topk_ref,
)
from .index import MAX_FREE_DIMS, affine_select, affine_select_ref, iota, iota_ref
from .integer import (
    tensor_scalar_int,
    tensor_scalar_int_ref,
    tensor_tensor_int,
    tensor_tensor_int_ref,
)
from .matmul import matmul_accumulate, matmul_accumulate_ref, transpose, transpose_ref
from .mx import (
    FORMATS,
    MX_GROUP_PARTITIONS,
    MX_LANES,
    dequantize_mx,
    dequantize_mx_ref,
    quantize_mx,
    quantize_mx_ref,
)
from .ops import (
    AFFINE_SELECT_CMP_OPS,
    BOOLEAN_RESULT_OPS,
    COMPARISON_OPS,
    EXACT_ACTIVATIONS,
    FLOAT_EXACT_OPS,
    INTEGER_ONLY_OPS,
    INTEGER_ONLY_REDUCE_OPS,
    LOGICAL_OPS,
    UNARY_ALU_OPS,
    ActivationFunction,
    AluOp,
    ReduceOp,
)
from .prng import (
    XORWOW_WORDS,
    dropout,
    dropout_ref,
    uniform,
    uniform_ref,
    xorwow_draw,
    xorwow_draw_ref,
    xorwow_seed,
    xorwow_seed_ref,
)
from .reduce import (
    BN_GROUP_WIDTH,
    BN_STATS_WIDTH,
    bn_aggr,
    bn_aggr_ref,
    bn_stats,
    bn_stats_ref,
    tensor_partition_reduce,
    tensor_partition_reduce_ref,
    tensor_reduce,
    tensor_reduce_ref,
)
from .scan import (
    SCAN_REDUCE_OPS,
    tensor_scalar_cumulative,
    tensor_scalar_cumulative_ref,
    tensor_scalar_reduce,
    tensor_scalar_reduce_ref,
    tensor_tensor_scan,
    tensor_tensor_scan_ref,
)
from .search import (
    ACCUMULATE_IDENTITY,
    ACCUMULATE_OPS,
    NOT_FOUND,
    TOP8,
    accumulate,
    accumulate_ref,
    copy_predicated,
    copy_predicated_ref,
    find_index8,
    find_index8_ref,
    match_replace8,
    match_replace8_ref,
    max8,
    max8_ref,
    range_select,
    range_select_ref,
    select_reduce,
    select_reduce_ref,
)

__all__ = [
    "ACCUMULATE_IDENTITY",
    "ACCUMULATE_OPS",
    "ACTIVATION_REF",
    "AFFINE_SELECT_CMP_OPS",
    "BN_GROUP_WIDTH",
    "BN_STATS_WIDTH",
    "BOOLEAN_RESULT_OPS",
    "COMPARISON_OPS",
    "EXACT_ACTIVATIONS",
    "FLOAT_EXACT_OPS",
    "FORMATS",
    "GPSIMD_GROUP",
    "INTEGER_ONLY_OPS",
    "INTEGER_ONLY_REDUCE_OPS",
    "LOGICAL_OPS",
    "MAX_FREE_DIMS",
    "MX_GROUP_PARTITIONS",
    "MX_LANES",
    "NOT_FOUND",
    "SCAN_REDUCE_OPS",
    "TOP8",
    "UNARY_ALU_OPS",
    "XORWOW_WORDS",
    "ActivationFunction",
    "AluOp",
    "ReduceOp",
    "accumulate",
    "accumulate_ref",
    "activation",
    "activation_reduce",
    "activation_reduce_ref",
    "activation_ref",
    "affine_select",
    "affine_select_ref",
    "bn_aggr",
    "bn_aggr_ref",
    "bn_stats",
    "bn_stats_ref",
    "copy_predicated",
    "copy_predicated_ref",
    "dequantize_mx",
    "dequantize_mx_ref",
    "dropout",
    "dropout_ref",
    "find_index8",
    "find_index8_ref",
    "gather_rows",
    "gather_rows_ref",
    "iota",
    "iota_ref",
    "local_gather",
    "local_gather_ref",
    "match_replace8",
    "match_replace8_ref",
    "matmul_accumulate",
    "matmul_accumulate_ref",
    "max8",
    "max8_ref",
    "n_gather",
    "n_gather_ref",
    "nonzero_with_count",
    "nonzero_with_count_ref",
    "quantize_mx",
    "quantize_mx_ref",
    "range_select",
    "range_select_ref",
    "reciprocal",
    "reciprocal_ref",
    "scalar_tensor_tensor",
    "scalar_tensor_tensor_ref",
    "select",
    "select_reduce",
    "select_reduce_ref",
    "select_ref",
    "sequence_bounds",
    "sequence_bounds_ref",
    "tensor_partition_reduce",
    "tensor_partition_reduce_ref",
    "tensor_reduce",
    "tensor_reduce_ref",
    "tensor_scalar",
    "tensor_scalar_cumulative",
    "tensor_scalar_cumulative_ref",
    "tensor_scalar_int",
    "tensor_scalar_int_ref",
    "tensor_scalar_reduce",
    "tensor_scalar_reduce_ref",
    "tensor_scalar_ref",
    "tensor_tensor",
    "tensor_tensor_int",
    "tensor_tensor_int_ref",
    "tensor_tensor_ref",
    "tensor_tensor_scan",
    "tensor_tensor_scan_ref",
    "topk",
    "topk_ref",
    "transpose",
    "transpose_ref",
    "uniform",
    "uniform_ref",
    "warm_up",
    "xorwow_draw",
    "xorwow_draw_ref",
    "xorwow_seed",
    "xorwow_seed_ref",
]

# Numba reads its disk cache at a kernel's first call, so clearing stale entries now (after the
# imports, before any call) is in time.
invalidate_stale_cache()
announce_if_uncompiled()


def warm_up() -> None:
    """Compile (or load from the on-disk cache) every jitted kernel once, on tiny inputs.

    The public wrappers always hand the jitted cores the same argument types (C-contiguous,
    writable fp32/int64 arrays, plain ints and bools), so one call per kernel and dtype covers
    every later call.
    """
    x = np.ones((2, 3), np.float32)
    xi = np.ones((2, 3), np.int64)
    activation(x, ActivationFunction.exp)
    activation_reduce(x, ActivationFunction.exp)
    tensor_tensor(x, x, AluOp.add)
    tensor_tensor_int(xi, xi, AluOp.add)
    tensor_scalar(x, AluOp.add, 1.0, False, AluOp.multiply, 2.0, True)
    tensor_scalar_int(xi, AluOp.add, 1, False, AluOp.bitwise_and, 3, True)
    scalar_tensor_tensor(x, AluOp.add, 1.0, AluOp.multiply, x)
    reciprocal(x)
    select(x, x, x)
    select(xi, x, x)
    tensor_reduce(x.reshape(2, 1, 3), ReduceOp.add)
    tensor_tensor_scan(x, x, 0.0, AluOp.multiply, AluOp.add)
    tensor_scalar_cumulative(x, AluOp.multiply, 2.0, AluOp.add, 0.0)
    tensor_scalar_reduce(x, AluOp.multiply, 2.0, False, ReduceOp.add)
    tensor_reduce(xi.reshape(2, 1, 3), ReduceOp.add)
    tensor_partition_reduce(x, ReduceOp.max)
    tensor_partition_reduce(xi, ReduceOp.bitwise_or)
    bn_aggr(bn_stats(x))
    iota((2, 3), 0, 1, (1,))
    affine_select(x, 0, 1, (-1,), AluOp.is_ge, -np.inf)
    matmul_accumulate(np.zeros((3, 3), np.float32), x, x, True)
    _warm_up_wave2(x, xi)


def _warm_up_wave2(x: np.ndarray, xi: np.ndarray) -> None:
    """The search/select, gather, PRNG and MX kernels (``warm_up``'s second half)."""
    x16 = np.ones((16, 8), np.float32)
    x32 = np.ones((32, 8), np.float32)
    idx = np.zeros((16, 1), np.int64)
    max8(x16)
    find_index8(x16, x16)
    match_replace8(x16, x16, 0.0)
    range_select(x, np.zeros(2, np.float32), np.ones(2, np.float32), 12, 15, 0, -1.0)
    select_reduce(xi, x, 0.0)
    copy_predicated(xi, xi, xi)
    accumulate(x, AluOp.add, 0.0)
    gather_rows(xi, np.zeros(1, np.int64))
    local_gather(x16.astype(np.int64), idx, 1, 1)
    n_gather(xi, xi * 0)
    topk(x16, 8, 1)
    nonzero_with_count(x, 0, -1)
    nonzero_with_count(xi, 0, -1)
    sequence_bounds(xi[0])
    sequence_bounds(x[0])
    state = xorwow_seed(0, 2, 4)
    bits, _ = xorwow_draw(state, 3)
    uniform(bits, 0.0, 1.0)
    dropout(x, bits, 0.5)
    dropout(xi, bits, 0.5)
    packed, scales = quantize_mx(x32, "e4m3fn")
    dequantize_mx(packed, scales, "e4m3fn")
    quantize_mx(x32, "e5m2")


if __name__ == "kernels":  # the folder by its own name, shadowing an installed "kernels": see there
    from ._shadow import hand_over

    hand_over(__name__, __file__)
