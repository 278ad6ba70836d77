"""Kernel-language calls of the search, select and index instructions, named like ``nki.isa``.

max8, nc_find_index8, nc_match_replace8, range_select, select_reduce, tensor_copy_predicated
(VectorE); topk, nonzero_with_count, sequence_bounds (GpSimdE). Re-exported by
``hwsim.lang.isa``; the semantics and costs are the instructions' (``hwsim.isa.search_ops``,
``hwsim.isa.index_ops``).
"""

from __future__ import annotations

from typing import Any

from hwsim.isa.base import Instruction
from hwsim.isa.engine_state import ReduceCmd
from hwsim.isa.search_ops import FP32_MIN
from hwsim.kernels.ops import AluOp
from hwsim.lang.emit import emit, enum_arg, gpsimd_engine, scalar_operand, vector_engine


def max8(dst: Any, src: Any) -> Instruction:
    """dst[P, 8] = the 8 largest values of each partition of src (8..16384), descending."""
    return emit("max8", vector_engine, dst=dst, src=src)


def nc_find_index8(dst: Any, data: Any, vals: Any) -> Instruction:
    """dst[P, 8] (uint16/uint32) = index of the first occurrence in data of each of vals[P, 8]."""
    return emit("nc_find_index8", vector_engine, dst=dst, data=data, vals=vals)


def nc_match_replace8(
    dst: Any, data: Any, vals: Any, imm: float, dst_idx: Any = None
) -> Instruction:
    """dst = data with the first occurrence of each of vals[P, 8] replaced by imm; dst_idx
    (optional, [P, 8]) gets their indices."""
    return emit(
        "nc_match_replace8",
        vector_engine,
        dst=dst,
        data=data,
        vals=vals,
        imm=float(imm),
        dst_idx=dst_idx,
    )


def range_select(
    dst: Any,
    on_true_tile: Any,
    comp_op0: AluOp,
    comp_op1: AluOp,
    bound0: Any,
    bound1: Any,
    reduce_cmd: ReduceCmd | str = ReduceCmd.reset_reduce,
    reduce_res: Any = None,
    reduce_op: AluOp = AluOp.max,
    range_start: int = 0,
    on_false_value: float = FP32_MIN,
) -> Instruction:
    """dst = on_true_tile where comp_op0(range_start + i, bound0) and comp_op1(range_start + i,
    bound1) hold, else FP32_MIN; the max folds into VectorE's accumulators (v3+)."""
    return emit(
        "range_select",
        vector_engine,
        dst=dst,
        on_true=on_true_tile,
        comp_op0=AluOp(comp_op0),
        comp_op1=AluOp(comp_op1),
        bound0=bound0,
        bound1=bound1,
        reduce_cmd=enum_arg(ReduceCmd, reduce_cmd, "range_select", "reduce_cmd"),
        reduce_res=reduce_res,
        reduce_op=AluOp(reduce_op),
        range_start=int(range_start),
        on_false_value=float(on_false_value),
    )


def select_reduce(
    dst: Any,
    predicate: Any,
    on_true: Any,
    on_false: Any,
    reduce_res: Any = None,
    reduce_cmd: ReduceCmd | str = ReduceCmd.idle,
    reduce_op: AluOp = AluOp.max,
    reverse_pred: bool = False,
) -> Instruction:
    """dst = on_true where predicate is nonzero (zero if reverse_pred) else on_false (an
    immediate or [P, 1] tile); the max folds into VectorE's accumulators per reduce_cmd."""
    return emit(
        "select_reduce",
        vector_engine,
        dst=dst,
        predicate=predicate,
        on_true=on_true,
        on_false=scalar_operand(on_false),
        reduce_res=reduce_res,
        reduce_cmd=enum_arg(ReduceCmd, reduce_cmd, "select_reduce", "reduce_cmd"),
        reduce_op=AluOp(reduce_op),
        reverse_pred=bool(reverse_pred),
    )


def tensor_copy_predicated(
    dst: Any, src: Any, predicate: Any, reverse_pred: bool = False
) -> Instruction:
    """dst = src (a tile of dst's dtype, or an immediate) where predicate is nonzero (zero if
    reverse_pred); other elements of dst keep their values."""
    return emit(
        "tensor_copy_predicated",
        vector_engine,
        dst=dst,
        src=scalar_operand(src),
        predicate=predicate,
        reverse_pred=bool(reverse_pred),
    )


def topk(val_dst: Any, idx_dst: Any, src: Any, n: int) -> Instruction:
    """The K (= val_dst's free size) largest values of each 16-partition snake of n bf16
    elements in src, and their indices, in snake layout (GpSimdE)."""
    return emit("topk", gpsimd_engine, val_dst=val_dst, idx_dst=idx_dst, src=src, n=int(n))


def nonzero_with_count(
    dst: Any, src: Any, index_offset: int = 0, padding_val: int = -1
) -> Instruction:
    """On partitions 0, 16, ..: dst = indices (+ index_offset) of src's nonzeros, padding_val,
    then the count (v3+ GpSimdE)."""
    return emit(
        "nonzero_with_count",
        gpsimd_engine,
        dst=dst,
        src=src,
        index_offset=int(index_offset),
        padding_val=int(padding_val),
    )


def sequence_bounds(dst: Any, segment_ids: Any) -> Instruction:
    """dst[1, 2, N] = start and end (exclusive) of each element's segment (GpSimdE)."""
    return emit("sequence_bounds", gpsimd_engine, dst=dst, segment_ids=segment_ids)
