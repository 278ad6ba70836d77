"""Helpers of the sweep tests: writing small specs on the ``tiny`` preset."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
TEST_WORKLOADS = HERE / "workloads_for_tests.py"


def write_spec(directory: Path, name: str = "t", **fields: Any) -> Path:
    """A spec file on ``tiny`` (fields override the defaults) with the test workloads beside it."""
    shutil.copy(TEST_WORKLOADS, directory / TEST_WORKLOADS.name)
    spec: dict[str, Any] = {
        "name": name,
        "base": "tiny",
        "parameters": {
            "grid": {"hbm.bandwidth_bytes_per_ns_per_stack": [4, 8], "dma.engines": [2, 4]}
        },
        "workloads": ["gemm:32x64x64"],
        "metrics": ["total_ns", "mbu_pct", "engines.tensor.busy_pct", "bottleneck_resource"],
    }
    spec.update(fields)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path
