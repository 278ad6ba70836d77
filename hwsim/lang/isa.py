"""ISA calls of the kernel language, named and ordered like ``nki.isa`` so NKI kernels port easily.

Each call converts tiles/views to access patterns, builds the registered instruction, tags it with
the kernel's source line, and appends it in program order (the builder adds the semaphores).
Where several engines can run an op, ``engine=`` names one (``vector``, ``scalar``, ``gpsimd``…).
The calls are made from the instructions' fields (``hwsim.lang.calls``); the DMA calls, which
choose a descriptor mode and a queue, are written here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hwsim.errors import IllegalInstructionError
from hwsim.isa.base import Instruction
from hwsim.isa.dma_ops import DgeMode, dge_trigger_engines
from hwsim.isa.engine_state import ReduceCmd
from hwsim.isa.search_ops import FP32_MIN
from hwsim.kernels.ops import ActivationFunction, AluOp, ReduceOp
from hwsim.lang.calls import isa_call
from hwsim.lang.emit import (
    emit,
    gpsimd_engine,
    scalar_engine,
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
from hwsim.lang.isa_multicore import collective, core_barrier, sendrecv
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


# ---- calls made from the instructions (``hwsim.lang.calls``) -----------------------------------
nc_matmul = isa_call(
    "nc_matmul",
    """dst[M, N] (+)= stationary[K, M].T @ moving[K, N] in PSUM (fp32 accumulation).

    is_stationary_onezero / is_moving_onezero: that operand holds only 0s and 1s, so an fp32
    matmul runs at 2x its speed; a flagged operand with another value is an error at run time.
    perf_mode="double_row" (v3+, fp8): K = 2 x partitions, stationary [K/2, 2, M] and moving
    [K/2, 2, N], at the time of a K/2-row BF16 matmul (``nki.isa.matmul_perf_mode``).
    """,
)
nc_transpose = isa_call(
    "nc_transpose",
    "dst[F, P] = data[P, F] on TensorE (<= 128x128, into PSUM) or VectorE (<= 32x32).",
)
activation = isa_call(
    "activation",
    "dst = op(data * scale + bias); scale an immediate or [P, 1] tile, bias a [P, 1] tile.",
)
activation_reduce = isa_call(
    "activation_reduce",
    "activation, plus reduce_res[P, 1] = sum over the free axis of the result.",
)
tensor_tensor = isa_call("tensor_tensor", "dst = data1 op data2, elementwise.")
tensor_scalar = isa_call(
    "tensor_scalar",
    "dst = (data op0 operand0) op1 operand1; operands immediates or [P, 1] tiles.",
)
scalar_tensor_tensor = isa_call(
    "scalar_tensor_tensor",
    "dst = (data op0 operand0) op1 operand1, with operand1 a tile shaped like data.",
)
tensor_tensor_scan = isa_call(
    "tensor_tensor_scan",
    """Per partition: dst[i] = op1(op0(data0[i], dst[i-1]), data1[i]), dst[-1] = initial (an
    immediate or a [P, 1] tile); reverse0/reverse1 swap op0's/op1's operands.""",
)
tensor_scalar_reduce = isa_call(
    "tensor_scalar_reduce",
    "dst = data op0 operand0, and reduce_res[P, 1] = reduce_op over each partition's result.",
)
tensor_scalar_cumulative = isa_call(
    "tensor_scalar_cumulative",
    """Per partition: reg = op1(op0(src[i], imm0), reg), dst[i] = reg; reg starts at op1's
    identity (reset_reduce) or at imm1 (load_reduce).""",
)
tensor_reduce = isa_call(
    "tensor_reduce", "dst = reduce(data) over its ``axes`` innermost free dims."
)
tensor_copy = isa_call("tensor_copy", "dst = src, converting dtype with round-to-nearest-even.")
reciprocal = isa_call("reciprocal", "dst = 1 / data, elementwise.")
memset = isa_call("memset", "dst = value everywhere (rounded to dst's dtype).")
select = isa_call("select", "dst = on_true where predicate != 0 else on_false.")
bn_stats = isa_call("bn_stats", "Per-partition statistics of data (<= 512 elements) for bn_aggr.")
bn_aggr = isa_call("bn_aggr", "dst[P, 2] = (mean, variance) from concatenated bn_stats results.")
iota = isa_call("iota", "dst[p, i...] = offset + p * channel_multiplier + sum(i_k * steps[k]).")
affine_select = isa_call(
    "affine_select",
    """Keep on_true_tile where (offset + p * channel_multiplier + sum(i_k * steps[k])) cmp_op 0
    holds, else on_false_value — how causal masks are built.""",
)
tensor_partition_reduce = isa_call(
    "tensor_partition_reduce", "dst[1, N] = reduce over the partitions of data[P, N]."
)


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


def _dma_call(opcode: str, doc: str) -> Callable[..., Instruction]:
    """A DMA call (``dma_copy``, ``dma_transpose``): triggered by ``engine`` on ``queue``;
    ``dge_mode`` is who builds the descriptors (``unknown``: the compiler's choice, ``_dge``)."""

    def call(
        dst: Any,
        src: Any,
        *,
        engine: str | None = None,
        queue: int | None = None,
        dge_mode: str = "unknown",
    ) -> Instruction:
        trigger, mode = _dge(engine, dge_mode)
        chosen = current().next_queue(trigger) if queue is None else queue
        return emit(opcode, trigger, dst=dst, src=src, queue=chosen, dge_mode=DgeMode(mode))

    call.__name__ = call.__qualname__ = opcode
    call.__doc__ = doc
    return call


dma_copy = _dma_call(
    "dma_copy",
    """Copy HBM/SBUF -> HBM/SBUF (with dtype conversion), triggered by ``engine`` on ``queue``;
    ``dge_mode`` is who builds the descriptors (``unknown``: the compiler's choice).""",
)
dma_transpose = _dma_call("dma_transpose", "dst[F, P] = src[P, F] during a DMA (2-byte dtypes).")


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
    "collective",
    "core_barrier",
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
    "sendrecv",
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
