"""A sweep's configs built from cached sections are exactly what validating each point's whole
config gives: the same config objects, hashes and error messages; --jobs is capped."""

from __future__ import annotations

import itertools
import os

import pytest

from hwsim.config import config_hash
from hwsim.config.loader import (
    apply_overrides,
    read_config_dict,
    resolve_config_path,
    validate_config,
)
from hwsim.errors import ConfigError
from hwsim.sweep.backends import capped_jobs
from hwsim.sweep.configs import PointConfigs

GRID = {
    "tensor_engine.rows": [16, 32, 64],
    "sbuf.bytes_per_partition": [65536, 65536.0, 98304],
    "dma.start_latency_ns": [0, 1000.5],
    "tensor_engine.cycles_multiplier_by_dtype.bf16": [1, 2],
    "chip.name": ["a", True],
}


@pytest.mark.parametrize("preset", ["tiny", "trn1", "trn2", "trn3"])
def test_cached_sections_give_what_validation_gives(preset: str) -> None:
    base = read_config_dict(resolve_config_path(preset))
    configs = PointConfigs(base)
    seen = 0
    for values in itertools.product(*GRID.values()):
        point = dict(zip(GRID, values, strict=True))
        try:
            want = validate_config(apply_overrides(base, point), source="p")
        except ConfigError as exc:  # the same message, from the same place
            with pytest.raises(ConfigError) as got:
                configs.build(point, source="p")
            assert str(got.value) == str(exc)
            continue
        config, digest = configs.build(point, source="p")
        assert config == want and digest == config_hash(want)
        seen += 1
    assert seen > 10


def test_a_point_outside_the_sections_takes_the_slow_way() -> None:
    base = read_config_dict(resolve_config_path("tiny"))
    with pytest.raises(ConfigError, match="nosuch"):
        PointConfigs(base).build({"nosuch.field": 1}, source="p")


def test_jobs_are_capped_by_runs_and_by_local_cores() -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert capped_jobs(None, 1000, None) == (cores, "")
    assert capped_jobs(64, 3, "tcp://scheduler:8786") == (
        3,
        "--jobs 64: starting 3 workers (3 runs to do)",
    )
    jobs, why = capped_jobs(10_000, 10**6, None)
    assert jobs == cores and why.startswith(f"--jobs 10000: starting {cores} worker")
    assert capped_jobs(1, 0, None) == (1, "")
