"""Lowerings by op family; importing this package fills ``bridge.registry.LOWERINGS``.

pointwise: activations and ALU ops with broadcasting (floats and integers), pow (scalar and
tensor exponents), clamp, min/max, floor/ceil/trunc/round, div with a rounding mode,
floor_divide; compare: comparisons, logical/bitwise ops, where; creation: full, scalar_tensor,
arange; matmul: mm/addmm/bmm; reduction: sum, mean, amax/amin, max/min, any/all,
softmax/log_softmax, _safe_softmax; norm: native_layer_norm, var/var_mean; scan: cumsum;
indexing: embedding, index, index_select; concat: cat, stack, repeat, split; views: metadata
views, clone; casts: _to_copy, copy;
attention: the fused CPU SDPA kernel eager mode sees; conv: convolution (implicit GEMM); pool:
max_pool2d_with_indices, _adaptive_avg_pool2d; batch_norm: native_batch_norm (eager),
_native_batch_norm_legit_no_training / _functional; pad: constant_pad_nd; scatter_gather:
gather, scatter, scatter_add, index_put; sort: topk, sort, argmax, argmin;
moe: histc, empty_permuted; arith: sign, log1p, fmod, remainder; slice_scatter: slice_scatter,
select_scatter; vector_norm: linalg_vector_norm; masks: tril, triu, isin; collectives:
_c10d_functional all_reduce, all_gather_into_tensor, reduce_scatter_tensor (and coalesced),
all_to_all_single, wait_tensor.
"""

from hwsim.bridge.lowerings import (
    arith,
    attention,
    batch_norm,
    casts,
    collectives,
    compare,
    concat,
    conv,
    creation,
    indexing,
    masks,
    matmul,
    moe,
    norm,
    pad,
    pointwise,
    pool,
    reduction,
    scan,
    scatter_gather,
    slice_scatter,
    sort,
    vector_norm,
    views,
)

__all__ = [
    "arith",
    "attention",
    "batch_norm",
    "casts",
    "collectives",
    "compare",
    "concat",
    "conv",
    "creation",
    "indexing",
    "masks",
    "matmul",
    "moe",
    "norm",
    "pad",
    "pointwise",
    "pool",
    "reduction",
    "scan",
    "scatter_gather",
    "slice_scatter",
    "sort",
    "vector_norm",
    "views",
]
