"""A sweep on a Dask LocalCluster (in-process threads: quick to start)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwsim.sweep import load_results, load_sweep, run_sweep
from tests.sweep.helpers import write_spec

distributed = pytest.importorskip("distributed", reason="the dask extra is part of `make setup`")


# the scheduler's HTTP server falls back to another port when a cluster elsewhere holds 8787
@pytest.mark.filterwarnings("ignore:Port 8787 is already in use")
def test_sweep_on_a_dask_local_cluster(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path, workloads=["gemm:32x64x64", "workloads_for_tests.py:fails_on_two_engines"]
    )
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
    ) as cluster:
        outcome = run_sweep(
            load_sweep(spec),
            tmp_path / "r.sqlite",
            backend="dask",
            address=cluster.scheduler_address,
            progress=False,
        )
    assert (outcome.backend, outcome.ok, outcome.failed) == ("dask", 6, 2)
    frame = load_results(tmp_path / "r.sqlite")
    assert set(frame["status"]) == {"ok", "failed"}
    assert frame.loc[frame["status"] == "ok", "total_ns"].gt(0).all()
