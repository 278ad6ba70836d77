"""Row softmax: out[r, :] = exp(x[r, :] - max(x[r, :])) / sum(exp(x[r, :] - max(x[r, :]))).

Rows go on partitions (up to 128 rows per tile), the reduced axis on the free dimension, so
every reduction is a per-partition free-axis reduction:

- VectorE ``tensor_reduce(max, negate=True)`` gives -max per row;
- ScalarE ``activation_reduce(exp, bias=-max)`` writes exp(x - max) and its row sum in one pass;
- VectorE ``reciprocal`` of the [rows, 1] sums, then ``tensor_scalar(multiply)`` by it.

Tiles are multi-buffered (loads of the next row tile overlap the current one), loads are
triggered by the Sync engine and stores by GpSimdE on its own queue.
"""

from __future__ import annotations

from hwsim import lang
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing, DmaQueues, chunks, limits, require, row_buffers


@lang.kernel
def softmax(x):
    """out[R, C] = softmax of x[R, C] over its last axis (fp32, bf16 or fp16), in x's dtype.

    Any R; C up to what fits three-quarters of SBUF double-buffered (C * 2 * (2 * itemsize + 4)
    bytes: 7,168 fp32 or 10,752 bf16 columns on trn2, 6,144 / 9,216 on trn1); three row tiles
    are in flight when they fit. Statistics are computed in fp32.
    """
    require(x.ndim == 2, "softmax", f"x must be 2-D [rows, columns], got shape {x.shape}")
    require(x.dtype.is_float, "softmax", f"x must be a float tensor, not {x.dtype.name}")
    rows, cols = x.shape
    lim = limits()
    # per row tile: x, exp(x - max) in fp32, the output
    buffers = row_buffers("softmax", cols, 2 * x.dtype.itemsize + 4)
    out = lang.ndarray((rows, cols), x.dtype, buffer=lang.hbm, name="out")
    queues = DmaQueues()
    x_ring, e_ring, o_ring = BufferRing(buffers), BufferRing(buffers), BufferRing(buffers)
    stats = BufferRing(buffers)
    for r0, p in chunks(rows, lim.pmax):
        xt = x_ring((p, cols), x.dtype, lang.sbuf)
        queues.load(xt, x[r0 : r0 + p, :])
        neg_max = stats((p, 3), lang.float32, lang.sbuf)  # -max, sum, 1/sum
        nisa.tensor_reduce(neg_max[:, 0:1], lang.ReduceOp.max, xt, negate=True)
        e = e_ring((p, cols), lang.float32, lang.sbuf)
        nisa.activation_reduce(
            e, lang.ActivationFunction.exp, xt, bias=neg_max[:, 0:1], reduce_res=neg_max[:, 1:2]
        )
        nisa.reciprocal(neg_max[:, 2:3], neg_max[:, 1:2])
        o = o_ring((p, cols), x.dtype, lang.sbuf)
        nisa.tensor_scalar(o, e, lang.AluOp.multiply, neg_max[:, 2:3])
        queues.store(out[r0 : r0 + p, :], o)
    return out
