"""Programs are lowered once per distinct lowering-relevant config: keyed by the fields read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hwsim.config import HardwareConfig, config_hash, load_config
from hwsim.isa.base import Instruction
from hwsim.library.common import UnsupportedShapeError
from hwsim.program import Program
from hwsim.sweep.lowering import WHOLE, ProgramCache, build_recorded, recording_config
from hwsim.sweep.workloads import SweepWorkload, parse_workload

SOFTMAX = parse_workload("softmax", Path("."))
GEMM = parse_workload("gemm:64x128x256:bf16", Path("."))


def _streams(program: Program) -> list[dict[str, list[Instruction]]]:
    return [core.streams for core in program.cores]


def _build(workload: SweepWorkload) -> Callable[[HardwareConfig], Program]:
    return lambda config: workload.build(config, False)


def test_recording_config_is_a_drop_in_config() -> None:
    config = load_config("trn2")
    recording = recording_config(config)
    assert isinstance(recording, HardwareConfig)
    assert recording.tensor_engine.rows == config.tensor_engine.rows
    assert config_hash(recording) == config_hash(config)


def test_build_reads_are_recorded() -> None:
    program, reads = build_recorded(_build(SOFTMAX), load_config("trn2"))
    assert program.instruction_count > 0
    assert {"sbuf.partitions", "sbuf.bytes_per_partition"} <= reads
    # softmax's lowering ignores HBM but for the size check of its tensors against HBM capacity
    hbm = {r for r in reads if r.startswith("hbm.")}
    assert hbm == {"hbm.stacks", "hbm.capacity_bytes_per_stack"}


def test_whole_object_reads_count_as_reading_everything() -> None:
    config = load_config("tiny")

    def hashes_the_config(c: HardwareConfig) -> Program:
        config_hash(c)
        return Program()

    def compares_sbuf(c: HardwareConfig) -> Program:
        assert c.sbuf == config.sbuf
        return Program()

    assert WHOLE in build_recorded(hashes_the_config, config)[1]
    assert build_recorded(compares_sbuf, config)[1] == {"sbuf"}


def test_irrelevant_fields_hit_the_cache_and_give_the_same_program() -> None:
    cache = ProgramCache()
    base = load_config("trn2")
    first, cached, _ = cache.get("softmax", _build(SOFTMAX), base)
    assert not cached
    faster_hbm = load_config("trn2", {"hbm.bandwidth_bytes_per_ns_per_stack": 100})
    again, cached, build_s = cache.get("softmax", _build(SOFTMAX), faster_hbm)
    assert cached and build_s == 0.0 and again is first
    assert _streams(again) == _streams(SOFTMAX.build(faster_hbm, False))
    assert (cache.builds, cache.hits) == (1, 1)


def test_relevant_fields_lower_again() -> None:
    cache = ProgramCache()
    cache.get(GEMM.key, _build(GEMM), load_config("trn2"))
    smaller = load_config("trn2", {"sbuf.bytes_per_partition": 65536})
    program, cached, _ = cache.get(GEMM.key, _build(GEMM), smaller)
    assert not cached
    assert _streams(program) == _streams(GEMM.build(smaller, False))
    # back to the first config: still cached
    assert cache.get(GEMM.key, _build(GEMM), load_config("trn2"))[1]


def test_build_errors_are_cached_like_programs() -> None:
    cache = ProgramCache()
    tiny = load_config("tiny")  # softmax's 1024 columns do not fit tiny's SBUF
    for _ in range(2):
        with pytest.raises(UnsupportedShapeError, match="do not fit SBUF"):
            cache.get("softmax", _build(SOFTMAX), tiny)
    assert (cache.builds, cache.hits) == (1, 1)


def test_the_cache_keeps_at_most_max_programs() -> None:
    cache = ProgramCache(max_programs=2)
    for size in (65536, 98304, 131072):
        cache.get(GEMM.key, _build(GEMM), load_config("trn2", {"sbuf.bytes_per_partition": size}))
    oldest = load_config("trn2", {"sbuf.bytes_per_partition": 65536})
    assert not cache.get(GEMM.key, _build(GEMM), oldest)[1]


def test_timing_only_gemm_build_matches_the_full_build() -> None:
    config = load_config("trn2")
    assert _streams(GEMM.build(config, False)) == _streams(GEMM.build(config, True))


def test_an_nki_kernel_under_the_compilers_schedule_is_lowered_per_timing_config() -> None:
    """The compiler's schedule (``best``) is chosen by simulating on the config, so its program
    depends on every timing field: no point reuses another's order. Program order depends on
    the layout fields alone and is lowered once for points that differ in HBM bandwidth."""
    from hwsim.lang import TensorSpec
    from hwsim.nki.kernel import _kernel
    from hwsim.nki.upstream import kernel

    block_all = (
        Path(__file__).resolve().parents[2] / "third_party/neuron-sdk-docs-db1586c3/nki/"
        "how-to-guides/kernel-optimization/block_all.py"
    )
    nk = _kernel(kernel(block_all, "matrix_multiply_kernel"))
    blocks = {"TILES_IN_BLOCK_M": 2, "TILES_IN_BLOCK_N": 2, "TILES_IN_BLOCK_K": 2}
    specs = (TensorSpec((512, 512), "fp32"), TensorSpec((512, 2048), "fp32"))

    def build(schedule: str) -> Callable[[HardwareConfig], Program]:
        return lambda config: (
            nk.lang_kernel([], {}).build(*specs, config=config, schedule=schedule, **blocks).program
        )

    for schedule, builds in (("program", 1), ("best", 2)):
        cache = ProgramCache()
        for bandwidth in (725, 500):
            config = load_config("trn2", {"hbm.bandwidth_bytes_per_ns_per_stack": bandwidth})
            cache.get("block_all", build(schedule), config)
        assert (cache.builds, cache.hits) == (builds, 2 - builds), schedule
    _, reads = build_recorded(build("best"), load_config("trn2"))
    assert WHOLE in reads
