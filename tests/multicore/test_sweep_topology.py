"""Topology parameters sweep like any config value: a sweep over the chip-to-chip link bandwidth
and hop latency of ``tiny`` times one all-reduce over its 4 chips by the ring formula."""

from __future__ import annotations

import shutil
from pathlib import Path

from hwsim.sweep import load_results, load_sweep, run_sweep
from tests.sweep.helpers import write_spec

WORKLOADS = Path(__file__).resolve().parent / "collective_workloads.py"


def test_a_sweep_over_link_bandwidth_and_latency_times_the_ring(tmp_path: Path) -> None:
    shutil.copy(WORKLOADS, tmp_path / WORKLOADS.name)
    grid = {
        "topology.chip_to_chip.bandwidth_bytes_per_ns": [4, 8],
        "topology.chip_to_chip.hop_latency_ns": [200, 400],
    }
    spec = write_spec(
        tmp_path,
        parameters={"grid": grid},
        workloads=["collective_workloads.py:all_reduce_4"],
        metrics=["total_ns"],
    )
    outcome = run_sweep(load_sweep(spec), tmp_path / "r.sqlite", jobs=1, progress=False)
    assert (outcome.ok, outcome.failed) == (4, 0)
    results = load_results(tmp_path / "r.sqlite")
    rows = results.to_dict("records") if hasattr(results, "to_dict") else results
    by_point = {
        (
            r["topology.chip_to_chip.bandwidth_bytes_per_ns"],
            r["topology.chip_to_chip.hop_latency_ns"],
        ): r["total_ns"]
        for r in rows
    }
    # 4 ranks, 2 KiB buffer, 512 B chunks: 6 ring steps of latency + 512 B over both of a chip's
    # 2 links (the group holds every chip of the ring), plus the 50 ns launch
    for (bandwidth, latency), total_ns in by_point.items():
        assert total_ns == 6 * (latency + 512 / (2 * bandwidth)) + 50
