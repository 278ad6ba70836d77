"""The gemm:MxKxN workload on the library's optimised matmul: numerics (ragged shapes, both ways
of making A^T), and its distance from the ideal TensorE time."""

from __future__ import annotations

import pytest

from hwsim.config import load_config
from hwsim.errors import WorkloadError
from hwsim.machine.simulator import run
from hwsim.workloads.cli_run import run_workload
from hwsim.workloads.gemm import GemmSpec, build_gemm, gemm_blocking


def ideal_ns(spec: GemmSpec, config_name: str) -> float:
    """Ceil-tiled matmuls x max(N, 64) TensorE cycles (N = 512-column moving tiles)."""
    config = load_config(config_name)
    tiles = -(-spec.m // 128) * -(-spec.k // 128) * -(-spec.n // 512)
    return tiles * max(min(spec.n, 512), 64) * 1000 / config.tensor_engine.clock_mhz


@pytest.mark.parametrize(
    ("workload", "config", "transpose"),
    [
        ("gemm:70x100x130:bf16", "tiny", "dma_transpose"),
        ("gemm:70x100x130:fp32", "tiny", "nc_transpose"),  # 4-byte: no DMA transpose
        ("gemm:200x300x700:bf16", "trn2", "dma_transpose"),  # 90% of DMA bandwidth [S2]
        ("gemm:200x300x700:bf16", "trn1", "nc_transpose"),  # trn1 DMA transpose is slow
        ("gemm:256x384x640:fp32", "trn2", "nc_transpose"),
    ],
)
def test_numerics_and_the_cheaper_transpose(workload, config, transpose):
    result, summary = run_workload(workload, config, race_check=True)
    assert summary.numerics_ok, summary.max_abs_err
    opcodes = {r.instruction.OPCODE for r in result.trace.instructions}
    assert transpose in opcodes


def test_k_blocks_fold_in_fp32_when_k_does_not_fit_one_block():
    spec = GemmSpec.parse("gemm:64x2000x600:bf16")
    blocking = gemm_blocking(spec, load_config("tiny"))
    assert blocking.tiles_k < -(-spec.k // 32) and blocking.fold_fp32
    _, summary = run_workload(spec.name, "tiny", race_check=True)
    assert summary.numerics_ok, summary.max_abs_err


# Measured with the descriptor-level DMA model (a 1 KiB-row DMA reaches ~37% of the engines'
# bandwidth, 4 KiB rows saturate them [S11][S12]): this small GEMM (23 us of TensorE on trn1)
# is limited by DMA start latency and efficiency; the bound guards against regressions.
@pytest.mark.parametrize(("config", "before"), [("trn1", 2.08), ("trn2", 1.81)])
def test_512x1024x2048_bf16_near_ideal_and_not_slower_than_before(config, before):
    spec = GemmSpec.parse("gemm:512x1024x2048:bf16")
    hw = load_config(config)
    total = run(build_gemm(spec, hw), hw, numerics=False).summary.total_ns
    ratio = total / ideal_ns(spec, config)
    assert ratio <= before, ratio


def test_too_large_for_sbuf_is_a_clear_error():
    with pytest.raises(WorkloadError, match="no blocking fits tiny's SBUF"):
        build_gemm(GemmSpec.parse("gemm:256x3000x640:bf16"), load_config("tiny"))
    with pytest.raises(WorkloadError, match="TensorE multiplies"):
        GemmSpec.parse("gemm:64x64x64:int8")
