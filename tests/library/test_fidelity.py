"""The fidelity bench's cases: V18 (one DMA engine, trn2) in the default run, V1 (the fully
optimised tutorial matmul on trn1) as a slow test that checks what the bench reports."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "fidelity.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_fidelity", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_fidelity"] = module
    spec.loader.exec_module(module)
    return module


def test_v18_one_dma_engine_moves_32_kib_in_published_time():
    (case,) = load_bench().v18()
    assert case.passed, case.line()
    assert abs(case.error_pct) < 1.0  # 32 KiB / 23 B/ns + one 2 ns descriptor vs 1,416 ns


@pytest.mark.slow
def test_v1_runs_tensor_engine_bound_at_the_documented_matmul_cost():
    time_case, hfu_case = load_bench().v1()
    # The documented rule (max(N, 64) cycles, background LoadStationary) gives 5.99 ms at
    # 100% HFU; the simulation is within 1% of it. Hardware measured 6.97 ms / 85.24% HFU: the
    # bench reports that gap (see its notes) rather than fitting it.
    assert 5.99 <= time_case.simulated <= 6.06
    assert hfu_case.simulated > 99.0
    assert "not modelled" in " ".join(time_case.notes)
