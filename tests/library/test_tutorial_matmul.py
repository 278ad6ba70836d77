"""The matmul tutorial's V1a-V1c kernels (matmul_tiled / matmul_hoisted / matmul_block_free):
numerics with the race checker, the published load and matmul counts (HARDWARE.md §5), their
multi-buffering, and that each version is faster than the one before, as published."""

from __future__ import annotations

import numpy as np
import pytest

from hwsim.isa import MemorySpace
from hwsim.lang import TensorSpec
from hwsim.library import UnsupportedShapeError, matmul_block_free, matmul_hoisted, matmul_tiled
from hwsim.workloads.resolve import list_workloads
from tests.library.helpers import BF16, f64, normal, run_and_compare

KERNELS = [matmul_tiled, matmul_hoisted, matmul_block_free]


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
@pytest.mark.parametrize(
    ("config", "k", "m", "n", "dtype"),
    [
        ("trn2", 512, 256, 1024, BF16),  # lhsT [512, 256] x rhs [512, 1024]
        ("trn1", 300, 200, 700, np.float32),  # no dimension a multiple of a tile
        ("tiny", 70, 100, 130, np.float32),
    ],
)
def test_matches_numpy_with_the_race_checker(kernel, config, k, m, n, dtype):
    rng = np.random.default_rng(0)
    lhs_t, rhs = normal(rng, (k, m), dtype), normal(rng, (k, n), dtype)
    run_and_compare(kernel, (lhs_t, rhs), f64(lhs_t).T @ f64(rhs), config)


def counts(kernel, k: int, m: int, n: int, **kwargs) -> tuple[int, int, int]:
    """(loads, stores, matmuls) of a timing-only build on trn1."""
    program = kernel.build(
        TensorSpec((k, m), "bf16"), TensorSpec((k, n), "bf16"), config="trn1", **kwargs
    ).program
    loads = stores = matmuls = 0
    for _, _, instruction in program.cores[0].instructions():
        if instruction.OPCODE == "dma_copy":
            loads += instruction.src.memory is MemorySpace.HBM
            stores += instruction.dst.memory is MemorySpace.HBM
        matmuls += instruction.OPCODE == "nc_matmul"
    return loads, stores, matmuls


@pytest.mark.parametrize(
    ("kernel", "loads"),
    [
        # K = 1024, M = 512, N = 2048: 8 K tiles, 4 M tiles, 4 N tiles, 16 output tiles.
        (matmul_tiled, 16 * 8 * 2),  # two loads per matmul
        (matmul_hoisted, 4 * 8 + 16 * 8),  # lhsT once per M tile; rhs per output tile
        (matmul_block_free, 2 * 2 * 8 + 2 * 2 * 2 * 8),  # per M block, per (M, N) block pair
    ],
    ids=lambda v: getattr(v, "name", None),
)
def test_scaled_down_counts(kernel, loads):
    assert counts(kernel, 1024, 512, 2048) == (loads, 16, 16 * 8)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kernel", "loads"),
    [(matmul_tiled, 65_536), (matmul_hoisted, 34_816), (matmul_block_free, 18_432)],
    ids=lambda v: getattr(v, "name", None),
)
def test_v1_shape_emits_the_published_counts(kernel, loads):
    """lhsT [8192, 4096] x rhs [8192, 8192] bf16: the loads of HARDWARE.md §5, 32,768 matmuls
    (the same in every version) and one store per [128, 512] output tile."""
    assert counts(kernel, 8192, 4096, 8192) == (loads, 32 * 16, 32_768)


def test_multi_buffering_lets_loads_run_ahead_of_the_matmuls():
    def total_ns(**kwargs) -> float:
        specs = (TensorSpec((1024, 512), "bf16"), TensorSpec((1024, 2048), "bf16"))
        result = matmul_tiled(*specs, config="trn1", numerics=False, **kwargs)
        return result.summary.total_ns

    # One buffer exposes each step's DMA start latency (1.3 us) on top of its transfer (~1.6 us
    # of 160 KiB at ~100 GB/s): the buffered kernel takes about 1.6 / 2.9 of the time.
    single, default = total_ns(buffers=1), total_ns()
    assert default < 0.65 * single, (single, default)
    assert total_ns(buffers=4) == default  # the default depth is 4 where it fits


def test_default_depth_shrinks_to_fit_sbuf_and_an_explicit_one_must_fit():
    # tiny has 16 KiB per partition; K = 512 is 16 K tiles of 32 rows: one V1c set of
    # 2 x 16 rhs tiles [32, 512] fp32 takes 64 KiB, so even one set does not fit.
    specs = (TensorSpec((512, 64), "fp32"), TensorSpec((512, 1024), "fp32"))
    with pytest.raises(UnsupportedShapeError, match=r"matmul_block_free: 1 buffered set"):
        matmul_block_free.build(*specs, config="tiny")
    # A smaller K fits with fewer sets than 4: the default finds the depth, 4 is refused.
    small = (TensorSpec((64, 64), "fp32"), TensorSpec((64, 1024), "fp32"))
    matmul_hoisted.build(*small, config="tiny")
    with pytest.raises(UnsupportedShapeError, match="use fewer buffers"):
        matmul_hoisted.build(*small, config="tiny", buffers=4)
    with pytest.raises(UnsupportedShapeError, match="buffers=0 must be >= 1"):
        matmul_tiled.build(*small, config="tiny", buffers=0)


def test_each_tutorial_version_is_faster_than_the_one_before_on_trn1():
    """Published: 51.80 > 42.96 > 22.07 ms (V1a, V1b, V1c, HARDWARE.md §5)."""
    specs = (TensorSpec((1024, 512), "bf16"), TensorSpec((1024, 2048), "bf16"))
    times = [k(*specs, config="trn1", numerics=False).summary.total_ns for k in KERNELS]
    assert times[0] > times[1] > times[2], times


def test_registered_as_workloads():
    listed = {name for name, _ in list_workloads()}  # what ``hwsim run --list`` prints
    assert {"matmul_tiled", "matmul_hoisted", "matmul_block_free"} <= listed
