"""The documented constants of the cost rules, per NeuronCore generation, as data.

The cost rules (``hwsim.cost.rules``) read two kinds of parameters: the config's (engine clocks,
MIN_II, DMA bandwidth and efficiency curve, ...: ``configs/*.yaml``, one preset per generation)
and these, the factors the documentation states for an instruction (``reciprocal`` takes 8N
cycles, ``exponential`` runs 4x ``activation(exp)``, ...). Each is a field of ``RuleConstants``
with its unit and source; ``RULES`` holds one table per generation, so a generation whose
documentation (or calibration) says otherwise replaces only its fields. ``hwsim.cost.parameters``
lists every parameter of both kinds and sets them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def documented(value: int, unit: str, source: str) -> Any:
    """A rule constant: its value, unit and where it comes from (``dataclasses.field``)."""
    return field(default=value, metadata={"unit": unit, "source": source})


@dataclass(frozen=True)
class RuleConstants:
    """The documented constants of the cost rules of one generation (HARDWARE.md §2, §3)."""

    documented_min_ii_cycles: int = documented(
        64,
        "cycles",
        "MIN_II as [S16] states it (§3), assumed by planners' estimates at peak rates "
        "(``hwsim.cost.planning.dma_transpose_is_faster``); the simulator's rules use each "
        "engine's ``min_ii_cycles``",
    )
    fast_case_sbuf_streams: int = documented(
        2,
        "streams",
        "SBUF inputs streamed at once in the documented bf16 cases of tensor_tensor "
        "(add/multiply/subtract) and scalar_tensor_tensor (subtract then multiply): N, not 2N "
        "(§3 [S16])",
    )
    performance_mode_full_speedup: int = documented(
        4, "x", "VectorE performance mode, all operands SBUF and contiguous (§2.2 [S2])"
    )
    performance_mode_partial_speedup: int = documented(
        2, "x", "VectorE performance mode, one of SBUF-only / contiguous failing (§2.2 [S2])"
    )
    strided_access_slowdown: int = documented(
        2, "x", "a stream whose innermost stride exceeds the interface limit (§1.4 [S1])"
    )
    reciprocal_cycles_per_element: int = documented(
        8, "cycles/element", "reciprocal: max(MIN_II, 8N) (§3 [S16])"
    )
    exponential_speedup: int = documented(
        4, "x", "VectorE exponential over ScalarE activation(exp) (§2.2 [S3])"
    )
    topk_cycles_per_element: int = documented(
        4, "cycles/element", "topk: 4 cycles per element of the row plus k (§3 [S16])"
    )
    bn_aggr_cycles_per_group: int = documented(
        13, "cycles/group", "bn_aggr: per group of bn_stats results (§3 [S16])"
    )
    quantize_mx_elements_per_cycle: int = documented(
        4, "elements/partition/cycle", "quantize_mx (§2.2 [S3])"
    )
    local_gather_batch_cycles: int = documented(
        28, "cycles", "local_gather: per batch of indices (§3 [S16])"
    )
    local_gather_batch_indices: int = documented(
        4, "indices", "local_gather: indices per batch, 't is a constant 4' (§3 [S16])"
    )
    local_gather_path_bytes: int = documented(
        4, "bytes/lane/cycle", "local_gather: the 32-bit lane data path (§3 [S16])"
    )
    n_gather_elements_per_instruction: int = documented(
        512, "elements", "nc_n_gather: one ISA instruction per this many elements (§3 [S15])"
    )
    memset_zero_16bit_speedup: int = documented(
        2, "x", "memset of zero into a 16-bit float tile (§3 [S16])"
    )
    tensor_reduce_bf16_speedup: int = documented(
        2, "x", "tensor_reduce add/max with bf16 input and output: N/2 (§3 [S16])"
    )


#: The rule constants of each generation: the documented values, which [S16] states once for all
#: generations (a generation with its own value replaces that field here).
RULES: dict[str, RuleConstants] = {
    "v2": RuleConstants(),
    "v3": RuleConstants(),
    "v4": RuleConstants(),
}


def rules_for(generation: str) -> RuleConstants:
    """The rule constants of a NeuronCore generation (``chip.generation``)."""
    found = RULES.get(generation)
    if found is None:
        raise KeyError(
            f"no cost rule constants for generation '{generation}'; known: {', '.join(RULES)}"
        )
    return found
