"""ISA calls of the kernel language, named and ordered like ``nki.isa`` so NKI kernels port easily.

Each call converts tiles/views to access patterns, builds the registered instruction, tags it with
the kernel's source line, and appends it in program order (the builder adds the semaphores).
Where several engines can run an op, ``engine=`` names one (``vector``, ``scalar``, ``gpsimd``…).
"""

from __future__ import annotations

from typing import Any

from hwsim.errors import IllegalInstructionError
from hwsim.isa.base import Instruction
from hwsim.isa.dma_ops import DgeMode, dge_trigger_engines
from hwsim.isa.engine_state import ReduceCmd
from hwsim.isa.search_ops import FP32_MIN
from hwsim.isa.tensor_ops import MatmulPerfMode
from hwsim.kernels.ops import ActivationFunction, AluOp, ReduceOp
from hwsim.lang.emit import (
    emit,
    enum_arg,
    gpsimd_engine,
    scalar_engine,
    scalar_operand,
    sync_engine,
    tensor_engine,
    vector_engine,
)
from hwsim.lang.isa_gather import (
    local_gather,
    nc_n_gather,
    nc_stream_shuffle,
    tensor_copy_dynamic_dst,
    tensor_copy_dynamic_src,
)
from hwsim.lang.isa_random import (
    activate2,
    dropout,
    exponential,
    nc_matmul_mx,
    quantize_mx,
    rand2,
    rand_get_state,
    rand_set_state,
    rng,
    set_rng_seed,
)
from hwsim.lang.isa_select import (
    max8,
    nc_find_index8,
    nc_match_replace8,
    nonzero_with_count,
    range_select,
    select_reduce,
    sequence_bounds,
    tensor_copy_predicated,
    topk,
)
from hwsim.lang.kernel import current, source_location

#: FP32_MIN, range_select's on_false_value (NKI: ``nl.fp32.min``).
fp32_min = FP32_MIN

#: Accumulator start commands (NKI: ``nki.isa.reduce_cmd``).
reduce_cmd = ReduceCmd


# ---- TensorE ---------------------------------------------------------------------------------
def nc_matmul(
    dst: Any,
    stationary: Any,
    moving: Any,
    is_stationary_onezero: bool = False,
    is_moving_onezero: bool = False,
    *,
    accumulate: bool = False,
    perf_mode: str = "none",
) -> Instruction:
    """dst[M, N] (+)= stationary[K, M].T @ moving[K, N] in PSUM (fp32 accumulation).

    is_stationary_onezero / is_moving_onezero: that operand holds only 0s and 1s, so an fp32
    matmul runs at 2x its speed; a flagged operand with another value is an error at run time.
    perf_mode="double_row" (v3+, fp8): K = 2 x partitions, stationary [K/2, 2, M] and moving
    [K/2, 2, N], at the time of a K/2-row BF16 matmul (``nki.isa.matmul_perf_mode``).
    """
    return emit(
        "nc_matmul",
        tensor_engine,
        dst=dst,
        stationary=stationary,
        moving=moving,
        accumulate=accumulate,
        is_stationary_onezero=is_stationary_onezero,
        is_moving_onezero=is_moving_onezero,
        perf_mode=enum_arg(MatmulPerfMode, perf_mode, "nc_matmul", "perf_mode"),
    )


def nc_transpose(dst: Any, data: Any, *, engine: str = tensor_engine) -> Instruction:
    """dst[F, P] = data[P, F] on TensorE (<= 128x128, into PSUM) or VectorE (<= 32x32)."""
    return emit("nc_transpose", engine, dst=dst, src=data)


# ---- ScalarE ---------------------------------------------------------------------------------
def activation(
    dst: Any, op: ActivationFunction, data: Any, *, bias: Any = None, scale: Any = 1.0
) -> Instruction:
    """dst = op(data * scale + bias); scale an immediate or [P, 1] tile, bias a [P, 1] tile."""
    return emit(
        "activation",
        scalar_engine,
        dst=dst,
        src=data,
        func=ActivationFunction(op),
        bias=bias,
        scale=scalar_operand(scale),
    )


def activation_reduce(
    dst: Any,
    op: ActivationFunction,
    data: Any,
    *,
    reduce_res: Any,
    bias: Any = None,
    scale: Any = 1.0,
) -> Instruction:
    """activation, plus reduce_res[P, 1] = sum over the free axis of the result."""
    return emit(
        "activation_reduce",
        scalar_engine,
        dst=dst,
        src=data,
        func=ActivationFunction(op),
        bias=bias,
        scale=scalar_operand(scale),
        reduce_dst=reduce_res,
    )


# ---- VectorE / GpSimdE ------------------------------------------------------------------------
def tensor_tensor(
    dst: Any, data1: Any, data2: Any, op: AluOp, *, engine: str = vector_engine
) -> Instruction:
    """dst = data1 op data2, elementwise."""
    return emit("tensor_tensor", engine, dst=dst, src0=data1, src1=data2, op=AluOp(op))


def tensor_scalar(
    dst: Any,
    data: Any,
    op0: AluOp,
    operand0: Any,
    *,
    reverse0: bool = False,
    op1: AluOp | None = None,
    operand1: Any = 0.0,
    reverse1: bool = False,
    engine: str = vector_engine,
) -> Instruction:
    """dst = (data op0 operand0) op1 operand1; operands immediates or [P, 1] tiles."""
    return emit(
        "tensor_scalar",
        engine,
        dst=dst,
        src=data,
        op0=AluOp(op0),
        scalar0=scalar_operand(operand0),
        reverse0=reverse0,
        op1=AluOp.bypass if op1 is None else AluOp(op1),
        scalar1=scalar_operand(operand1),
        reverse1=reverse1,
    )


def scalar_tensor_tensor(
    dst: Any,
    data: Any,
    op0: AluOp,
    operand0: Any,
    op1: AluOp,
    operand1: Any,
    *,
    reverse0: bool = False,
    reverse1: bool = False,
) -> Instruction:
    """dst = (data op0 operand0) op1 operand1, with operand1 a tile shaped like data."""
    return emit(
        "scalar_tensor_tensor",
        vector_engine,
        dst=dst,
        src0=data,
        op0=AluOp(op0),
        scalar0=scalar_operand(operand0),
        op1=AluOp(op1),
        src1=operand1,
        reverse0=reverse0,
        reverse1=reverse1,
    )


def tensor_tensor_scan(
    dst: Any,
    data0: Any,
    data1: Any,
    initial: Any,
    op0: AluOp,
    op1: AluOp,
    reverse0: bool = False,
    reverse1: bool = False,
) -> Instruction:
    """Per partition: dst[i] = op1(op0(data0[i], dst[i-1]), data1[i]), dst[-1] = initial (an
    immediate or a [P, 1] tile); reverse0/reverse1 swap op0's/op1's operands."""
    return emit(
        "tensor_tensor_scan",
        vector_engine,
        dst=dst,
        src0=data0,
        src1=data1,
        initial=scalar_operand(initial),
        op0=AluOp(op0),
        op1=AluOp(op1),
        reverse0=reverse0,
        reverse1=reverse1,
    )


def tensor_scalar_reduce(
    dst: Any,
    data: Any,
    op0: AluOp,
    operand0: Any,
    reduce_op: ReduceOp,
    reduce_res: Any,
    reverse0: bool = False,
) -> Instruction:
    """dst = data op0 operand0, and reduce_res[P, 1] = reduce_op over each partition's result."""
    return emit(
        "tensor_scalar_reduce",
        vector_engine,
        dst=dst,
        src=data,
        op0=AluOp(op0),
        scalar0=scalar_operand(operand0),
        reduce_op=ReduceOp(reduce_op),
        reduce_dst=reduce_res,
        reverse0=reverse0,
    )


def tensor_scalar_cumulative(
    dst: Any,
    src: Any,
    op0: AluOp,
    op1: AluOp,
    imm0: Any,
    imm1: Any = None,
    reduce_cmd: ReduceCmd = ReduceCmd.reset_reduce,
) -> Instruction:
    """Per partition: reg = op1(op0(src[i], imm0), reg), dst[i] = reg; reg starts at op1's
    identity (reset_reduce) or at imm1 (load_reduce)."""
    return emit(
        "tensor_scalar_cumulative",
        vector_engine,
        dst=dst,
        src=src,
        op0=AluOp(op0),
        op1=AluOp(op1),
        imm0=scalar_operand(imm0),
        imm1=None if imm1 is None else scalar_operand(imm1),
        reduce_cmd=ReduceCmd(reduce_cmd),
    )


def tensor_reduce(
    dst: Any, op: ReduceOp, data: Any, *, axes: int = 1, negate: bool = False
) -> Instruction:
    """dst = reduce(data) over its ``axes`` innermost free dimensions."""
    return emit(
        "tensor_reduce", vector_engine, dst=dst, src=data, op=ReduceOp(op), axes=axes, negate=negate
    )


def tensor_copy(dst: Any, src: Any, *, engine: str = vector_engine) -> Instruction:
    """dst = src, converting dtype with round-to-nearest-even."""
    return emit("tensor_copy", engine, dst=dst, src=src)


def reciprocal(dst: Any, data: Any) -> Instruction:
    return emit("reciprocal", vector_engine, dst=dst, src=data)


def memset(dst: Any, value: float, *, engine: str = vector_engine) -> Instruction:
    return emit("memset", engine, dst=dst, value=float(value))


def select(dst: Any, predicate: Any, on_true: Any, on_false: Any) -> Instruction:
    """dst = on_true where predicate != 0 else on_false."""
    return emit(
        "select", vector_engine, dst=dst, pred=predicate, on_true=on_true, on_false=on_false
    )


def bn_stats(dst: Any, data: Any) -> Instruction:
    """Per-partition statistics of data (<= 512 elements) for bn_aggr."""
    return emit("bn_stats", vector_engine, dst=dst, src=data)


def bn_aggr(dst: Any, data: Any) -> Instruction:
    """dst[P, 2] = (mean, variance) from concatenated bn_stats results."""
    return emit("bn_aggr", vector_engine, dst=dst, src=data)


# ---- GpSimdE --------------------------------------------------------------------------------
def iota(
    dst: Any, *, steps: tuple[int, ...] = (), offset: int = 0, channel_multiplier: int = 0
) -> Instruction:
    """dst[p, i...] = offset + p * channel_multiplier + sum(i_k * steps[k])."""
    return emit(
        "iota",
        gpsimd_engine,
        dst=dst,
        offset=offset,
        channel_multiplier=channel_multiplier,
        steps=tuple(steps),
    )


def affine_select(
    dst: Any,
    on_true_tile: Any,
    on_false_value: float,
    cmp_op: AluOp,
    *,
    steps: tuple[int, ...] = (),
    offset: int = 0,
    channel_multiplier: int = 0,
) -> Instruction:
    """Keep on_true_tile where (offset + p * channel_multiplier + sum(i_k * steps[k])) cmp_op 0
    holds, else on_false_value — how causal masks are built."""
    return emit(
        "affine_select",
        gpsimd_engine,
        dst=dst,
        src=on_true_tile,
        cmp_op=AluOp(cmp_op),
        on_false=float(on_false_value),
        offset=offset,
        channel_multiplier=channel_multiplier,
        steps=tuple(steps),
    )


def tensor_partition_reduce(dst: Any, op: ReduceOp, data: Any) -> Instruction:
    """dst[1, N] = reduce over the partitions of data[P, N]."""
    return emit("tensor_partition_reduce", gpsimd_engine, dst=dst, src=data, op=ReduceOp(op))


# ---- DMA -------------------------------------------------------------------------------------
#: The engine that triggers a transfer of each DGE mode when the call names none [S13].
_DGE_DEFAULT_ENGINE = {"none": sync_engine, "swdge": gpsimd_engine, "hwdge": sync_engine}
DGE_MODES = ("unknown", "none", "swdge", "hwdge")


def _dge(engine: str | None, dge_mode: str) -> tuple[str, str]:
    """(trigger engine, concrete DGE mode) of a DMA call, choosing for ``unknown`` as the
    compiler does (HARDWARE.md §2.5 [S13]): the config's ``dma.default_dge_mode`` when the call
    names no engine or one that can trigger it, else host-built descriptors (``none``), which
    any engine can trigger. A concrete mode keeps the engine given, or takes its default."""
    if dge_mode not in DGE_MODES:
        raise IllegalInstructionError(
            f"{source_location()}: dge_mode={dge_mode!r}; valid: {', '.join(DGE_MODES)}"
        )
    mode = dge_mode
    if mode == "unknown":
        default = current().config.dma.default_dge_mode
        if engine is None or engine in dge_trigger_engines(DgeMode(default)):
            mode = default
        else:
            mode = "none"
    return engine or _DGE_DEFAULT_ENGINE[mode], mode


def dma_copy(
    dst: Any,
    src: Any,
    *,
    engine: str | None = None,
    queue: int | None = None,
    dge_mode: str = "unknown",
) -> Instruction:
    """Copy HBM/SBUF -> HBM/SBUF (with dtype conversion), triggered by ``engine`` on ``queue``;
    ``dge_mode`` is who builds the descriptors (``unknown``: the compiler's choice, ``_dge``)."""
    trigger, mode = _dge(engine, dge_mode)
    chosen = current().next_queue(trigger) if queue is None else queue
    return emit("dma_copy", trigger, dst=dst, src=src, queue=chosen, dge_mode=DgeMode(mode))


def dma_transpose(
    dst: Any,
    src: Any,
    *,
    engine: str | None = None,
    queue: int | None = None,
    dge_mode: str = "unknown",
) -> Instruction:
    """dst[F, P] = src[P, F] during a DMA (2-byte dtypes)."""
    trigger, mode = _dge(engine, dge_mode)
    chosen = current().next_queue(trigger) if queue is None else queue
    return emit("dma_transpose", trigger, dst=dst, src=src, queue=chosen, dge_mode=DgeMode(mode))


def dma_gather(dst: Any, src: Any, indices: Any, *, queue: int | None = None) -> Instruction:
    """dst[p, :] = src[indices[p], :]: gather rows of an HBM table by an int32 SBUF index tile.

    src is an HBM tensor (or view) [G, row]; indices an int32 SBUF tile [P, 1]; dst an SBUF tile
    [P, row]. Software DGE: GpSimdE writes one descriptor per row at run time, then the DMA
    engines move the rows on ``queue``. NKI writes it as an indirect ``dma_copy``
    (``nl.load(table[idx_tile, :])``, ``dge_mode=swdge``, ``oob_mode=error``): an index outside
    [0, G) is an error.
    """
    chosen = current().next_queue(gpsimd_engine) if queue is None else queue
    return emit("dma_gather", gpsimd_engine, dst=dst, src=src, indices=indices, queue=chosen)


__all__ = [
    "ActivationFunction",
    "AluOp",
    "ReduceOp",
    "activate2",
    "activation",
    "activation_reduce",
    "affine_select",
    "bn_aggr",
    "bn_stats",
    "dma_copy",
    "dma_gather",
    "dma_transpose",
    "dropout",
    "emit",
    "exponential",
    "fp32_min",
    "gpsimd_engine",
    "iota",
    "local_gather",
    "max8",
    "memset",
    "nc_find_index8",
    "nc_match_replace8",
    "nc_matmul",
    "nc_matmul_mx",
    "nc_n_gather",
    "nc_stream_shuffle",
    "nc_transpose",
    "nonzero_with_count",
    "quantize_mx",
    "rand2",
    "rand_get_state",
    "rand_set_state",
    "range_select",
    "reciprocal",
    "reduce_cmd",
    "rng",
    "scalar_engine",
    "scalar_tensor_tensor",
    "select",
    "select_reduce",
    "sequence_bounds",
    "set_rng_seed",
    "sync_engine",
    "tensor_copy",
    "tensor_copy_dynamic_dst",
    "tensor_copy_dynamic_src",
    "tensor_copy_predicated",
    "tensor_engine",
    "tensor_partition_reduce",
    "tensor_reduce",
    "tensor_scalar",
    "tensor_scalar_cumulative",
    "tensor_scalar_reduce",
    "tensor_tensor",
    "tensor_tensor_scan",
    "topk",
    "vector_engine",
]
