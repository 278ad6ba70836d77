"""Lowerings by op family; importing this package fills ``bridge.registry.LOWERINGS``.

pointwise: activations and ALU ops with broadcasting (floats and integers), pow, clamp, min/max;
compare: comparisons, logical/bitwise ops, where; creation: full, scalar_tensor, arange;
matmul: mm/addmm/bmm; reduction: sum, mean, amax/amin, any/all, softmax/log_softmax;
norm: native_layer_norm, var/var_mean; scan: cumsum; indexing: embedding, index, index_select;
concat: cat, split; views: metadata views, clone; casts: _to_copy, copy; attention: the fused
CPU SDPA kernel eager mode sees; conv: convolution (implicit GEMM); pool: max_pool2d_with_indices,
_adaptive_avg_pool2d; batch_norm: _native_batch_norm_legit_no_training / _functional.
"""

from bridge.lowerings import (
    attention,
    batch_norm,
    casts,
    compare,
    concat,
    conv,
    creation,
    indexing,
    matmul,
    norm,
    pointwise,
    pool,
    reduction,
    scan,
    views,
)

__all__ = [
    "attention",
    "batch_norm",
    "casts",
    "compare",
    "concat",
    "conv",
    "creation",
    "indexing",
    "matmul",
    "norm",
    "pointwise",
    "pool",
    "reduction",
    "scan",
    "views",
]
