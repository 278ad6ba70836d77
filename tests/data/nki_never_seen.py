"""A kernel written to the public NKI docs, as a user would: unmodified NKI imports.

out = relu(x * scale + bias[None, :]) over rows of x [R, C]; the last row tile is masked.
"""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np


@nki.jit
def scale_bias_relu(x, bias):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    b = nl.load(bias)  # [1, C]
    b_all = nl.broadcast_to(b, (nl.tile_size.pmax, cols))
    i_p = nl.arange(nl.tile_size.pmax)[:, None]
    i_f = nl.arange(cols)[None, :]
    for t in nl.affine_range((rows + nl.tile_size.pmax - 1) // nl.tile_size.pmax):
        r = t * nl.tile_size.pmax + i_p
        tile = nl.load(x[r, i_f], mask=(r < rows))
        scaled = nl.ndarray((nl.tile_size.pmax, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=scaled, data=tile, op0=nl.multiply, operand0=0.5, mask=(r < rows))
        summed = nl.add(scaled, b_all, mask=(r < rows))
        nl.store(out[r, i_f], value=nl.relu(summed, mask=(r < rows)), mask=(r < rows))
    return out


def scale_bias_relu_inputs():
    rng = np.random.default_rng(3)
    return (
        rng.standard_normal((200, 256)).astype(np.float32),
        rng.standard_normal((1, 256)).astype(np.float32),
    )


def scale_bias_relu_reference(x, bias):
    return np.maximum(x * 0.5 + bias, 0.0)
