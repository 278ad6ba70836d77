"""Kernel-language calls of the random, fused-activation and MX instructions, named like
``nki.isa``.

rng, rand2, dropout, set_rng_seed, rand_set_state, rand_get_state (``hwsim.isa.random_ops``);
exponential, activate2 (``hwsim.isa.fused_ops``); quantize_mx, nc_matmul_mx
(``hwsim.isa.mx_ops``). Re-exported by ``hwsim.lang.isa``; the calls are made from the
instructions (``hwsim.lang.calls``).
"""

from __future__ import annotations

from hwsim.lang.calls import isa_call

rng = isa_call("rng", "dst = 32 random bits per element, truncated to dst's integer dtype.")
rand2 = isa_call(
    "rand2", "dst = uniform random values in [min, max] (immediates or [P, 1] tiles; v4 VectorE)."
)
dropout = isa_call(
    "dropout", "dst = data with elements replaced by 0 with probability prob (immediate or [P, 1])."
)
set_rng_seed = isa_call("set_rng_seed", "Seed VectorE's generators from a [1, 1] 32-bit tile.")
rand_set_state = isa_call(
    "rand_set_state",
    "Load the generators of src_seeds' lanes ([P, 6] GpSimdE, [P, 24] VectorE; uint32).",
)
rand_get_state = isa_call(
    "rand_get_state",
    "Store the generators of dst's lanes into dst (the layout rand_set_state loads).",
)
exponential = isa_call(
    "exponential",
    """dst = exp(src - max_value); the sum folds into VectorE's accumulators per reduce_cmd
    (v4 VectorE).""",
)
activate2 = isa_call(
    "activate2",
    """dst = op((data op0 imm0) op1 imm1), reduced by reduce_op (default add) into ScalarE's
    accumulators per reduce_cmd (v4 ScalarE).""",
)
quantize_mx = isa_call(
    "quantize_mx", "Quantize fp16/bf16 src to MXFP8 x4 dst and uint8 dst_scale (v4 VectorE)."
)
nc_matmul_mx = isa_call(
    "nc_matmul_mx",
    "dst[M, N] (+)= MX stationary[4P, M].T @ MX moving[4P, N] with their scales (v4 TensorE).",
)
