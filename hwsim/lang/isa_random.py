"""Kernel-language calls of the random, fused-activation and MX instructions, named like
``nki.isa``.

rng, rand2, dropout, set_rng_seed, rand_set_state, rand_get_state (``hwsim.isa.random_ops``);
exponential, activate2 (``hwsim.isa.fused_ops``); quantize_mx, nc_matmul_mx
(``hwsim.isa.mx_ops``). Re-exported by ``hwsim.lang.isa``.
"""

from __future__ import annotations

from typing import Any

from hwsim.isa.base import Instruction
from hwsim.isa.engine_state import ReduceCmd
from hwsim.kernels.ops import ActivationFunction, AluOp
from hwsim.lang.emit import (
    emit,
    enum_arg,
    gpsimd_engine,
    scalar_engine,
    scalar_operand,
    tensor_engine,
    vector_engine,
)


def rng(dst: Any, engine: str = vector_engine) -> Instruction:
    """dst = 32 random bits per element, truncated to dst's integer dtype."""
    return emit("rng", engine, dst=dst)


def rand2(dst: Any, min: Any, max: Any) -> Instruction:
    """dst = uniform random values in [min, max] (immediates or [P, 1] tiles; v4 VectorE)."""
    return emit("rand2", vector_engine, dst=dst, min=scalar_operand(min), max=scalar_operand(max))


def dropout(dst: Any, data: Any, prob: Any) -> Instruction:
    """dst = data with elements replaced by 0 with probability prob (immediate or [P, 1])."""
    return emit("dropout", vector_engine, dst=dst, data=data, prob=scalar_operand(prob))


def set_rng_seed(src_seeds: Any) -> Instruction:
    """Seed VectorE's generators from a [1, 1] 32-bit tile."""
    return emit("set_rng_seed", vector_engine, src_seeds=src_seeds)


def rand_set_state(src_seeds: Any, engine: str = gpsimd_engine) -> Instruction:
    """Load the generators of src_seeds' lanes ([P, 6] GpSimdE, [P, 24] VectorE; uint32)."""
    return emit("rand_set_state", engine, src_seeds=src_seeds)


def rand_get_state(dst: Any, engine: str = gpsimd_engine) -> Instruction:
    """Store the generators of dst's lanes into dst (the layout rand_set_state loads)."""
    return emit("rand_get_state", engine, dst=dst)


def exponential(
    dst: Any,
    src: Any,
    max_value: Any = 0.0,
    reduce_res: Any = None,
    reduce_cmd: ReduceCmd | str = ReduceCmd.idle,
    reduce_init: Any = 0.0,
) -> Instruction:
    """dst = exp(src - max_value); the sum folds into VectorE's accumulators per reduce_cmd
    (v4 VectorE)."""
    return emit(
        "exponential",
        vector_engine,
        dst=dst,
        src=src,
        max_value=scalar_operand(max_value),
        reduce_res=reduce_res,
        reduce_cmd=enum_arg(ReduceCmd, reduce_cmd, "exponential", "reduce_cmd"),
        reduce_init=scalar_operand(reduce_init),
    )


def activate2(
    dst: Any,
    op: ActivationFunction,
    data: Any,
    imm0: Any,
    imm1: Any,
    op0: AluOp,
    op1: AluOp,
    relu_param: float = 0.0,
    reverse0: bool = False,
    reverse1: bool = False,
    reduce_op: AluOp | None = None,
    reduce_res: Any = None,
    reduce_cmd: ReduceCmd | str = ReduceCmd.idle,
) -> Instruction:
    """dst = op((data op0 imm0) op1 imm1), reduced by reduce_op (default add) into ScalarE's
    accumulators per reduce_cmd (v4 ScalarE)."""
    return emit(
        "activate2",
        scalar_engine,
        dst=dst,
        src=data,
        func=ActivationFunction(op),
        imm0=scalar_operand(imm0),
        imm1=scalar_operand(imm1),
        op0=AluOp(op0),
        op1=AluOp(op1),
        relu_param=float(relu_param),
        reverse0=bool(reverse0),
        reverse1=bool(reverse1),
        reduce_op=AluOp.add if reduce_op is None else AluOp(reduce_op),
        reduce_res=reduce_res,
        reduce_cmd=enum_arg(ReduceCmd, reduce_cmd, "activate2", "reduce_cmd"),
    )


def quantize_mx(dst: Any, src: Any, dst_scale: Any) -> Instruction:
    """Quantize fp16/bf16 src to MXFP8 x4 dst and uint8 dst_scale (v4 VectorE)."""
    return emit("quantize_mx", vector_engine, dst=dst, src=src, dst_scale=dst_scale)


def nc_matmul_mx(
    dst: Any,
    stationary: Any,
    moving: Any,
    stationary_scale: Any,
    moving_scale: Any,
    *,
    accumulate: bool = False,
) -> Instruction:
    """dst[M, N] (+)= MX stationary[4P, M].T @ MX moving[4P, N] with their scales (v4 TensorE)."""
    return emit(
        "nc_matmul_mx",
        tensor_engine,
        dst=dst,
        stationary=stationary,
        moving=moving,
        stationary_scale=stationary_scale,
        moving_scale=moving_scale,
        accumulate=bool(accumulate),
    )
