"""bench/collectives.py and bench/lnc.py on small cases: the simulated all-reduce meets the ring
formula at both of its ends, and the LNC=2 pair runs an evenly split kernel in the time one core
takes for half of it, with the sendrecv's pieces on both cores' DMA queues."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from hwsim.config import load_config
from hwsim.cost.collectives import CollectiveCosts

BENCH = Path(__file__).parents[2] / "bench"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


@pytest.mark.parametrize("ranks", [2, 8, 32])
def test_simulated_ring_all_reduce_meets_the_formula_at_both_ends(ranks: int) -> None:
    bench = _load("collectives")
    config = load_config("trn2")
    costs = CollectiveCosts(config)
    small, large = 1024, 1024**3
    small_ns, algorithm = bench.simulate_ns(config, ranks, small, "ring")
    assert algorithm == "ring"
    latency_bound, _ = bench.ring_ends_ns(costs, config, ranks, small)
    assert small_ns == pytest.approx(latency_bound, rel=0.01)
    large_ns, _ = bench.simulate_ns(config, ranks, large, "ring")
    _, bandwidth_bound = bench.ring_ends_ns(costs, config, ranks, large)
    assert large_ns == pytest.approx(bandwidth_bound, rel=0.02)
    # a formula that ignored the latency or bandwidth term would miss one of the ends
    assert large_ns > 50 * small_ns


def test_lnc2_pair_runs_half_the_work_each_in_parallel() -> None:
    bench = _load("lnc")
    one, two, half, equal = bench.speedup("trn2", 2048, 1024, 8)
    assert equal
    assert two == pytest.approx(half, rel=0.05)  # the two halves at once, no interference
    assert one / two > 1.8  # "close to 2x"; bench/lnc.py prints ~2x at 4096 x 2048
    swap = bench.exchange("trn2", 512)
    assert swap["bytes"] == 2 * 128 * 512 * 4 and swap["cores"] == 2
    assert swap["reached_to_done_ns"] > 0


def test_the_bridge_choice_is_never_slower_than_either_forced_lowering() -> None:
    """bench/lnc.py's GPT-2 rows on one block: the choice left to the bridge keeps each graph's
    faster lowering, so the model is no slower than with lnc=1 or lnc=2 forced; outputs equal."""
    bench = _load("lnc")
    gpt = bench.bridge_model("trn2", 1, 128)
    assert gpt["equal"]
    assert gpt["chosen_ns"] == min(gpt["one_ns"], gpt["two_ns"])  # one graph: one of the two
