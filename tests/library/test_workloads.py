"""Every library kernel is a named workload: listed, runnable from the CLI, numerics checked."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hwsim.library.workloads import WORKLOADS
from hwsim.workloads.cli_run import run_workload
from hwsim.workloads.resolve import list_workloads

NAMES = [w.name for w in WORKLOADS]


def test_every_library_kernel_is_listed():
    listed = {name for name, _ in list_workloads()}
    assert set(NAMES) <= listed
    assert set(NAMES) >= {
        "matmul_basic",
        "matmul_blocked",
        "matmul_optimized",
        "softmax",
        "layernorm",
        "rmsnorm",
        "mlp",
        "attention",
        "conv2d_3x3",
    }


@pytest.mark.parametrize("name", NAMES)
def test_default_problem_runs_and_passes_its_check_on_trn2(name):
    _, summary = run_workload(name, "trn2")
    assert summary.numerics_ok, summary.max_abs_err
    assert summary.total_ns > 0


def test_cli_run_softmax_json():
    done = subprocess.run(
        [sys.executable, "-m", "hwsim.cli", "run", "softmax", "--config", "trn2", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    summary = json.loads(done.stdout)
    assert summary["workload"] == "softmax" and summary["numerics_ok"] is True
    assert summary["engines"]["scalar"]["instructions"] > 0
