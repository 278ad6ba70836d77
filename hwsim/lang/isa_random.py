"""Kernel-language calls of the random, fused-activation and MX instructions, named like
``nki.isa``.

rng, rand2, dropout, set_rng_seed, rand_set_state, rand_get_state (``hwsim.isa.random_ops``);
exponential, activate2 (``hwsim.isa.fused_ops``); quantize_mx, nc_matmul_mx
(``hwsim.isa.mx_ops``). Re-exported by ``hwsim.lang.isa``; the calls are made from the
instructions (``hwsim.lang.calls``).
"""

from __future__ import annotations

from hwsim.isa.fused_ops import Activate2, Exponential
from hwsim.isa.mx_ops import NcMatmulMx, QuantizeMx
from hwsim.isa.random_ops import Dropout, Rand2, RandGetState, RandSetState, Rng, SetRngSeed
from hwsim.lang.calls import isa_call

rng = isa_call(Rng, "dst = 32 random bits per element, truncated to dst's integer dtype.")
rand2 = isa_call(
    Rand2, "dst = uniform random values in [min, max] (immediates or [P, 1] tiles; v4 VectorE)."
)
dropout = isa_call(
    Dropout, "dst = data with elements replaced by 0 with probability prob (immediate or [P, 1])."
)
set_rng_seed = isa_call(SetRngSeed, "Seed VectorE's generators from a [1, 1] 32-bit tile.")
rand_set_state = isa_call(
    RandSetState,
    "Load the generators of src_seeds' lanes ([P, 6] GpSimdE, [P, 24] VectorE; uint32).",
)
rand_get_state = isa_call(
    RandGetState,
    "Store the generators of dst's lanes into dst (the layout rand_set_state loads).",
)
exponential = isa_call(
    Exponential,
    """dst = exp(src - max_value); the sum folds into VectorE's accumulators per reduce_cmd
    (v4 VectorE).""",
)
activate2 = isa_call(
    Activate2,
    """dst = op((data op0 imm0) op1 imm1), reduced by reduce_op (default add) into ScalarE's
    accumulators per reduce_cmd (v4 ScalarE).""",
)
quantize_mx = isa_call(
    QuantizeMx, "Quantize fp16/bf16 src to MXFP8 x4 dst and uint8 dst_scale (v4 VectorE)."
)
nc_matmul_mx = isa_call(
    NcMatmulMx,
    "dst[M, N] (+)= MX stationary[4P, M].T @ MX moving[4P, N] with their scales (v4 TensorE).",
)
