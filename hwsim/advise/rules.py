"""The advisor's rules: each reads ``Evidence`` and either stays silent or returns a ``Finding``
(what it saw, with numbers; what to change; and how to estimate the gain).

A finding's gain is estimated by the simulator (``hwsim.advise.estimate``): where the fix can
be stated as a change of the machine that the same program runs on (a what-if config, e.g.
"descriptors move at the efficiency of 2 KiB ones"), the program is simulated again under it;
otherwise, and for a run folder without its program, ``bound_ns`` is the most the fix could save
on the recorded trace (time on the critical path that the fix removes).

Thresholds are named below; each rule is tested on a kernel that shows it and one that does not
(``tests/advise``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hwsim.advise.evidence import Evidence
from hwsim.registry import add_unique

#: The DMA guide's minimum recommended descriptor size ("≥ 2 KiB per partition") [S11][S12].
MIN_DESCRIPTOR_BYTES = 2048
#: Where the saturation curve reaches full bandwidth ("≥ 4 KiB saturates") [S11][S12].
SATURATED_DESCRIPTOR_BYTES = 4096
#: DMA data moving below this share of the engines' bandwidth is descriptor-bound (as the
#: run's verdict, ``hwsim.trace.verdict.EFFICIENT_PCT``).
EFFICIENT_PCT = 70.0
#: DMA counts as limiting when it holds this share of the critical path.
DMA_PATH_PCT = 30.0
#: Loaded bytes over distinct bytes loaded above which reloads are worth hoisting.
RELOAD_RATIO = 2.0
#: TensorE waiting on an engine this share of the run is a stall worth fixing.
STALL_PCT = 10.0
#: An engine below this busy share has room to take work.
IDLE_ENGINE_PCT = 50.0
#: TensorE at least this busy is at its roofline (Neuron's compute-bound target, [S10]).
ROOFLINE_BUSY_PCT = 85.0
#: MBU at which a kernel is at its memory roofline (Neuron's "good" MBU target, [S10]).
MBU_ROOFLINE_PCT = 60.0
#: Nothing busy for this share of the run: latency-bound.
IDLE_PCT = 50.0
#: fp32 matmul FLOPs above this share of TensorE's are worth casting (fp32 costs 4x) [S1][S16].
FP32_SHARE_PCT = 25.0


@dataclass(frozen=True)
class Finding:
    """What one rule saw. ``what_if``: config overrides under which the same program shows the
    fix's effect (empty: no such change; the gain is ``bound_ns``)."""

    rule: str
    title: str
    action: str
    evidence: dict[str, Any]
    bound_ns: float
    what_if: dict[str, Any] = field(default_factory=dict)
    what_if_text: str = ""


Rule = Callable[[Evidence, Any], Finding | None]
RULES: dict[str, Rule] = {}


def rule(name: str) -> Callable[[Rule], Rule]:
    return lambda fn: add_unique(RULES, name, fn, "advisor rule")


def _dma_path_ns(ev: Evidence) -> float:
    return ev.total_ns * ev.path_pct("dma") / 100.0


@rule("small-descriptors")
def small_descriptors(ev: Evidence, config: Any) -> Finding | None:
    dma = ev.summary.dma
    mean = float(dma.descriptor_bytes_mean)
    efficiency = float(dma.data_efficiency_pct)
    if not dma.pieces or efficiency >= EFFICIENT_PCT or ev.path_pct("dma") < DMA_PATH_PCT:
        return None
    size = MIN_DESCRIPTOR_BYTES if mean < MIN_DESCRIPTOR_BYTES else SATURATED_DESCRIPTOR_BYTES
    what_if: dict[str, Any] = {}
    target = None
    if config is not None:
        from hwsim.cost import CostModel

        model = CostModel.for_config(config).dma
        target = float(model.efficiency_at(size))
        curve = {
            str(b): max(float(e), target) if b < size else float(e) for b, e in model.efficiency
        }
        curve.setdefault(str(size), target)
        what_if = {"dma.descriptor_efficiency": curve}
    bound = _dma_path_ns(ev) * max(0.0, 1.0 - efficiency / 100.0 / (target or 1.0))
    below = "below the" if mean < size else "short of the"
    return Finding(
        "small-descriptors",
        f"DMA descriptors average {mean:,.0f} B, {below} {size:,} B the DMA engines need: data "
        f"moves at {efficiency:.0f}% of their bandwidth, and DMA holds "
        f"{ev.path_pct('dma'):.0f}% of the critical path",
        f"coalesce rows: load tiles whose rows are contiguous for at least {size:,} B per "
        "partition (a block of adjacent tiles in one dma_copy, or a wider free dimension)",
        {
            "descriptor_bytes_mean": mean,
            "dma_data_efficiency_pct": efficiency,
            "critical_path_dma_pct": ev.path_pct("dma"),
        },
        bound,
        what_if,
        f"descriptors smaller than {size} B move at the efficiency of {size} B ones",
    )


@rule("reloaded-tiles")
def reloaded_tiles(ev: Evidence, config: Any) -> Finding | None:
    if not ev.loads or ev.path_pct("dma") < DMA_PATH_PCT:
        return None
    total, unique = ev.load_total_bytes, ev.load_unique_bytes
    ratio = total / unique if unique else 1.0
    if ratio < RELOAD_RATIO:
        return None
    key, count = max(ev.loads.items(), key=lambda kv: (kv[1] * ev.load_bytes[kv[0]], kv[0]))
    what_if = {}
    if config is not None:
        what_if = {
            "dma.bandwidth_bytes_per_ns": float(config.dma.bandwidth_bytes_per_ns) * ratio,
            "hbm.bandwidth_bytes_per_ns_per_stack": float(
                config.hbm.bandwidth_bytes_per_ns_per_stack
            )
            * ratio,
        }
    return Finding(
        "reloaded-tiles",
        f"loads move {total / 1e6:,.1f} MB for {unique / 1e6:,.1f} MB of distinct data "
        f"({ratio:.1f}x): {key} is loaded {count} times",
        "hoist the loads out of the loop that does not change them, or block the free "
        "dimensions so that each loaded tile serves several matmuls (keep it in SBUF)",
        {
            "load_bytes": total,
            "distinct_bytes": unique,
            "reload_ratio": ratio,
            "most_reloaded": key,
            "most_reloaded_count": count,
        },
        _dma_path_ns(ev) * (1.0 - 1.0 / ratio),
        what_if,
        f"every tile loaded once: DMA and HBM move the same data {ratio:.1f}x faster",
    )


@rule("psum-evacuation-stalls")
def psum_evacuation(ev: Evidence, config: Any) -> Finding | None:
    stall = ev.wait_pct("tensor", "vector")
    count = ev.evacuations.get("vector", 0)
    if stall < STALL_PCT or not count or ev.busy_pct("scalar") >= IDLE_ENGINE_PCT:
        return None
    share = 100.0 * ev.evacuation_ns.get("vector", 0.0) / max(ev.busy_ns.get("vector", 0.0), 1.0)
    what_if = {}
    if config is not None:
        what_if = {"vector_engine.clock_mhz": 2 * int(config.vector_engine.clock_mhz)}
    return Finding(
        "psum-evacuation-stalls",
        f"PSUM evacuation on VectorE stalls TensorE {stall:.0f}% of the run: {count:,} "
        f"PSUM reads on VectorE ({share:.0f}% of its busy time) while ScalarE is busy "
        f"{ev.busy_pct('scalar'):.0f}%",
        "move half of the PSUM -> SBUF copies to ScalarE (alternate the engines, as "
        "nisa.activation copies or tensor_copy(engine='scalar') on v3+)",
        {
            "tensor_wait_on_vector_pct": stall,
            "vector_psum_reads": count,
            "evacuation_share_of_vector_pct": share,
            "scalar_busy_pct": ev.busy_pct("scalar"),
        },
        ev.total_ns * stall / 100.0 / 2,
        what_if,
        "VectorE's work takes half the time (half of it moved to the idle ScalarE)",
    )


@rule("fp32-matmul")
def fp32_matmul(ev: Evidence, config: Any) -> Finding | None:
    by_dtype = ev.summary.flops.tensor_flops_by_dtype
    total = sum(by_dtype.values())
    fp32 = by_dtype.get("fp32", 0)
    share = 100.0 * fp32 / total if total else 0.0
    if share < FP32_SHARE_PCT or ev.path_pct("tensor") < DMA_PATH_PCT:
        return None
    what_if = {}
    if config is not None:
        mult = dict(config.tensor_engine.cycles_multiplier_by_dtype)
        what_if = {
            "tensor_engine.cycles_multiplier_by_dtype": {**mult, "fp32": mult.get("bf16", 1)}
        }
    tensor_path = ev.total_ns * ev.path_pct("tensor") / 100.0
    return Finding(
        "fp32-matmul",
        f"{share:.0f}% of TensorE's FLOPs are fp32 matmuls, which pass through the array 4x; "
        f"TensorE holds {ev.path_pct('tensor'):.0f}% of the critical path",
        "cast the matmul operands to bf16 (accumulation stays fp32 in PSUM), if the "
        "precision allows",
        {"fp32_flops_pct": share, "critical_path_tensor_pct": ev.path_pct("tensor")},
        tensor_path * share / 100.0 * 0.75,
        what_if,
        "fp32 matmuls cost what bf16 ones do",
    )


@rule("dma-compute-serialised")
def shallow_buffering(ev: Evidence, config: Any) -> Finding | None:
    stall = ev.wait_pct("tensor", "dma")
    dma_active = float(ev.summary.dma_active_pct)
    if (
        stall < 2 * STALL_PCT
        or dma_active >= EFFICIENT_PCT
        or ev.busy_pct("tensor") >= ROOFLINE_BUSY_PCT
        or float(ev.summary.idle_pct) >= IDLE_PCT  # latency-bound: that rule says what to do
    ):
        return None
    overlapped = max(dma_active, *(ev.busy_pct(e) for e in ev.summary.engines)) / 100.0
    return Finding(
        "dma-compute-serialised",
        f"TensorE waits on DMA {stall:.0f}% of the run while DMA is active only "
        f"{dma_active:.0f}%: loads and matmuls take turns instead of overlapping",
        "buffer deeper: let loads run ahead of the matmuls (more buffers per allocation "
        "site, or prefetch the next tile before the current matmul)",
        {"tensor_wait_on_dma_pct": stall, "dma_active_pct": dma_active},
        ev.total_ns * min(stall / 100.0, 1.0 - overlapped),
        {},
        "",
    )


@rule("latency-bound")
def latency_bound(ev: Evidence, config: Any) -> Finding | None:
    idle = float(ev.summary.idle_pct)
    if idle < IDLE_PCT:
        return None
    return Finding(
        "latency-bound",
        f"nothing is busy {idle:.0f}% of the run: the time goes to DMA start latencies and "
        "semaphore hand-offs between short instructions",
        "do more per instruction and per DMA (larger tiles, fused elementwise chains), and "
        "start independent work early so the latencies overlap",
        {"idle_pct": idle, "instructions": ev.instructions},
        ev.total_ns * idle / 100.0,
        {},
        "",
    )


@rule("at-roofline")
def at_roofline(ev: Evidence, config: Any) -> Finding | None:
    busy = ev.busy_pct("tensor")
    mbu = float(ev.summary.mbu_pct)
    if busy < ROOFLINE_BUSY_PCT and mbu >= MBU_ROOFLINE_PCT:
        return Finding(
            "at-roofline",
            f"HBM moves data at {mbu:.0f}% of its peak (MBU): the kernel is at its memory roofline",
            "nothing in the schedule to gain; only moving fewer bytes would help (a narrower "
            "dtype for inputs and outputs, or fusing with the ops before and after)",
            {"mbu_pct": mbu, "dma_active_pct": float(ev.summary.dma_active_pct)},
            0.0,
        )
    if busy < ROOFLINE_BUSY_PCT:
        return None
    return Finding(
        "at-roofline",
        f"TensorE is busy {busy:.0f}% of the run (MFU {ev.summary.mfu_pct:.0f}%): the kernel "
        "is at its compute roofline",
        "nothing in the schedule to gain; only fewer FLOPs or a faster dtype (fp8 on trn2+) "
        "would help",
        {"tensor_busy_pct": busy, "mfu_pct": float(ev.summary.mfu_pct)},
        0.0,
        {},
        "",
    )
