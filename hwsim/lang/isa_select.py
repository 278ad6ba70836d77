"""Kernel-language calls of the search, select and index instructions, named like ``nki.isa``.

max8, nc_find_index8, nc_match_replace8, range_select, select_reduce, tensor_copy_predicated
(VectorE); topk, nonzero_with_count, sequence_bounds (GpSimdE). Re-exported by
``hwsim.lang.isa``; the semantics and costs are the instructions' (``hwsim.isa.search_ops``,
``hwsim.isa.index_ops``), and the calls are made from them (``hwsim.lang.calls``).
"""

from __future__ import annotations

from hwsim.lang.calls import isa_call

max8 = isa_call(
    "max8", "dst[P, 8] = the 8 largest values of each partition of src (8..16384), descending."
)
nc_find_index8 = isa_call(
    "nc_find_index8",
    "dst[P, 8] (uint16/uint32) = index of the first occurrence in data of each of vals[P, 8].",
)
nc_match_replace8 = isa_call(
    "nc_match_replace8",
    """dst = data with the first occurrence of each of vals[P, 8] replaced by imm; dst_idx
    (optional, [P, 8]) gets their indices.""",
)
range_select = isa_call(
    "range_select",
    """dst = on_true_tile where comp_op0(range_start + i, bound0) and comp_op1(range_start + i,
    bound1) hold, else FP32_MIN; the max folds into VectorE's accumulators (v3+).""",
)
select_reduce = isa_call(
    "select_reduce",
    """dst = on_true where predicate is nonzero (zero if reverse_pred) else on_false (an
    immediate or [P, 1] tile); the max folds into VectorE's accumulators per reduce_cmd.""",
)
tensor_copy_predicated = isa_call(
    "tensor_copy_predicated",
    """dst = src (a tile of dst's dtype, or an immediate) where predicate is nonzero (zero if
    reverse_pred); other elements of dst keep their values.""",
)
topk = isa_call(
    "topk",
    """The K (= val_dst's free size) largest values of each 16-partition snake of n bf16
    elements in src, and their indices, in snake layout (GpSimdE).""",
)
nonzero_with_count = isa_call(
    "nonzero_with_count",
    """On partitions 0, 16, ..: dst = indices (+ index_offset) of src's nonzeros, padding_val,
    then the count (v3+ GpSimdE).""",
)
sequence_bounds = isa_call(
    "sequence_bounds",
    "dst[1, 2, N] = start and end (exclusive) of each element's segment (GpSimdE).",
)
