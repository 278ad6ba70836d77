"""The matrix multiplication tutorial as trn1's tutorial publishes it (nki-samples at fc5c69f,
vendored), run verbatim through hwsim.nki, against its line-by-line twins in
``hwsim.library.tutorial_matmul``: the same simulated time to the tick (HARDWARE.md §5's
V1a, V1b, V1c and V1 are measured on these kernels; ``hwsim.nki.upstream.run_tutorial_matmul``
is how bench/fidelity.py runs them at the published shape)."""

import pytest

from hwsim.config import load_config
from hwsim.lang.kernel import TensorSpec
from hwsim.library.tutorial_matmul import (
    matmul_block_free,
    matmul_fully_optimized,
    matmul_hoisted,
    matmul_tiled,
)
from hwsim.machine.simulator import run
from hwsim.nki import upstream

TWINS = {
    "V1a": matmul_tiled,
    "V1b": matmul_hoisted,
    "V1c": matmul_block_free,
    "V1": matmul_fully_optimized,
}
#: K, M, N: two tiles of each dimension (V1 with 2 x 2 x 2 tiles per block).
SHAPE = (512, 256, 1024)
BLOCKS = {"TILES_IN_BLOCK_M": 2, "TILES_IN_BLOCK_N": 2, "TILES_IN_BLOCK_K": 2}


@pytest.mark.parametrize("case", list(TWINS))
def test_verbatim_tutorial_kernel_and_its_twin_agree_to_the_tick(case):
    options = BLOCKS if case == "V1" else {}
    # both in program order: the twin is the tutorial's instruction stream, line by line
    # (the NKI default, the compiler's scheduling, would reorder one and not the other)
    verbatim = upstream.run_tutorial_matmul(
        case, config="trn1", shape=SHAPE, schedule="program", **options
    )
    k, m, n = SHAPE
    built = TWINS[case].build(
        TensorSpec((k, m), "bf16"),
        TensorSpec((k, n), "bf16"),
        config="trn1",
        schedule="program",
        **options,
    )
    twin = run(built.program, load_config("trn1"), numerics=False)
    assert verbatim.latency_ns == twin.summary.total_ns
    streams = verbatim.program.cores[0].streams
    assert {e: len(s) for e, s in streams.items()} == {
        e: len(s) for e, s in built.program.cores[0].streams.items()
    }
