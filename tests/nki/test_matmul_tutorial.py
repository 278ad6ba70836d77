"""The NKI matmul tutorial's versions in NKI: numerics against numpy (race checker and initcheck
on) and the same simulated time as their hwsim.lang twins within 2% (issue 12's done-when)."""

import matmul_kernels as mk
import numpy as np
import pytest

import hwsim.nki as nki
from hwsim.library.tutorial_matmul import matmul_block_free, matmul_hoisted, matmul_tiled

RNG = np.random.default_rng(0)
LHST = RNG.standard_normal((512, 512)).astype(np.float32)
RHS = RNG.standard_normal((512, 2048)).astype(np.float32)
EXPECTED = LHST.T.astype(np.float64) @ RHS

TWINS = [
    (mk.nki_matmul_tiled_, matmul_tiled),
    (mk.nki_matmul_hoist_load_, matmul_hoisted),
    (mk.nki_matmul_block_free_dimension_, matmul_block_free),
]


@pytest.mark.parametrize(("kernel", "twin"), TWINS, ids=lambda k: getattr(k, "__name__", "?"))
def test_tutorial_version_matches_numpy_and_its_twin(kernel, twin):
    result = nki.run(kernel, LHST, RHS, config="trn2", race_check=True)
    assert np.max(np.abs(result.outputs[0] - EXPECTED)) < 1e-3
    lang_ns = twin(LHST, RHS, config="trn2").summary.total_ns
    assert abs(result.latency_ns - lang_ns) <= 0.02 * lang_ns, (result.latency_ns, lang_ns)


def test_newer_style_matches_numpy_and_the_older_style():
    newer = nki.run(mk.matmul_newer_style, LHST, RHS, config="trn2", race_check=True)
    assert np.max(np.abs(newer.outputs[0] - EXPECTED)) < 1e-3
    older = nki.run(mk.nki_matmul_tiled_, LHST, RHS, config="trn2")
    assert newer.latency_ns == pytest.approx(older.latency_ns, rel=0.02)


def test_simulate_returns_the_output_and_benchmark_the_latency():
    out = nki.simulate(mk.nki_matmul_tiled_)(LHST, RHS)
    assert np.max(np.abs(out - EXPECTED)) < 1e-3
    bench = nki.benchmark(warmup=1, iters=2)(mk.nki_matmul_tiled_)
    bench(LHST, RHS)
    us = bench.benchmark_result.nc_latency.get_latency_percentile(99)
    assert us == pytest.approx(nki.last_run().latency_ns / 1000.0)
    assert us == bench.benchmark_result.run.latency_ns / 1000.0


def test_fully_optimized_version_with_par_dim_blocks_matches_numpy():
    """V1 (nki_matmul_fully_optimized_) as the tutorial writes it: par_dim block tiles, mgrid
    .p/.x indices, sequential K blocks. Its time is not its twin's: matmul_optimized is an
    expert's adaptation (resident lhsT, alternating evacuation), not the tutorial's code."""
    result = nki.run(
        mk.nki_matmul_fully_optimized_, LHST, RHS, TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2,
        TILES_IN_BLOCK_K=2, race_check=True,
    )  # fmt: skip
    assert np.max(np.abs(result.outputs[0] - EXPECTED)) < 1e-3
    regions = result.program.meta["nki_sequential_range"]
    assert len(regions) == 2 and all("matmul_kernels.py:" in r["line"] for r in regions)
