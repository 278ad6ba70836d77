"""The advisor: each rule on a kernel that shows it and on one that does not, the expected top
recommendation on library and tutorial kernels, gains measured by re-simulation, run folders."""

from __future__ import annotations

import json

import pytest

from hwsim import lang
from hwsim.advise.advice import BOUND, RESIMULATED, advise
from hwsim.advise.cli import advise_target, simulate_workload
from hwsim.advise.evidence import Evidence
from hwsim.advise.rules import RULES
from hwsim.lang import TensorSpec
from hwsim.lang import isa as nisa
from hwsim.library import matmul_tiled
from hwsim.machine.simulator import run


def advice_of(workload: str, config: str = "trn1"):
    return advise_target(workload, config)


def rules_of(advice) -> list[str]:
    return [r.finding.rule for r in advice.recommendations]


def kernel_advice(kernel, *args, config="trn1", **kwargs):
    built = kernel.build(*args, config=config, **kwargs)
    result = run(built.program, built.config, numerics=False)
    return advise(result.summary, trace=result.trace, program=built.program, config=built.config)


@lang.kernel
def evacuation_bound(lhsT, rhs, rounds=48):
    """Matmuls on resident tiles, each PSUM tile evacuated by VectorE (ScalarE idle): the
    evacuations, 2.5x a matmul's time, hold TensorE back through the two PSUM banks."""
    out = lang.ndarray(rhs.shape, rhs.dtype, lang.hbm, name="out")
    a, b = lang.load(lhsT), lang.load(rhs)
    res = lang.ndarray(rhs.shape, rhs.dtype, lang.sbuf)
    banks = [lang.ndarray((128, 512), "fp32", lang.psum) for _ in range(2)]
    for i in range(rounds):
        ps = banks[i % 2]
        nisa.nc_matmul(ps, a, b)
        nisa.tensor_copy(res, ps)
    lang.store(out, res)
    return out


# ---- the expected top recommendation on library and tutorial kernels -------------------------


@pytest.mark.parametrize(
    ("workload", "expected"),
    [
        ("matmul_tiled", "reloaded-tiles"),  # the tutorial's V1a: each tile reloaded per matmul
        ("matmul_hoisted", "reloaded-tiles"),  # V1b: rhs tiles reloaded per M tile
        ("matmul_block_free", "small-descriptors"),  # V1c: 1 KiB rows, loaded once per block
        ("gemm:512x512x512:fp32", "fp32-matmul"),
        ("gemm:2048x2048x2048:bf16", "at-roofline"),  # TensorE busy ~87%
        ("rmsnorm", "at-roofline"),  # HBM at its peak MBU
        ("gemm:128x128x128:bf16", "latency-bound"),
    ],
)
def test_expected_top_recommendation(workload, expected):
    advice = advice_of(workload)
    assert advice.top is not None, advice.lines()
    assert advice.top.finding.rule == expected, advice.lines()


def test_psum_evacuation_rule_shows_on_a_kernel_that_stalls_tensore():
    advice = kernel_advice(
        evacuation_bound, TensorSpec((128, 128), "bf16"), TensorSpec((128, 512), "bf16")
    )
    assert advice.top.finding.rule == "psum-evacuation-stalls", advice.lines()
    assert advice.top.method == RESIMULATED and advice.top.gain_ns > 0


def test_shallow_buffering_rule_shows_with_one_buffer_not_with_four():
    specs = (TensorSpec((1024, 256), "bf16"), TensorSpec((1024, 1024), "bf16"))
    serial = kernel_advice(matmul_tiled, *specs, buffers=1)
    assert "dma-compute-serialised" in rules_of(serial), serial.lines()
    deep = kernel_advice(matmul_tiled, *specs, buffers=4)
    assert "dma-compute-serialised" not in rules_of(deep), deep.lines()


# ---- each rule silent where it has nothing to say ------------------------------------------------


@pytest.mark.parametrize(
    ("workload", "absent"),
    [
        ("rmsnorm", "small-descriptors"),  # HBM-bound with full-size descriptors
        ("matmul_block_free", "reloaded-tiles"),  # each block's tiles loaded once
        ("gemm:512x512x512:bf16", "fp32-matmul"),
        ("matmul_tiled", "at-roofline"),
        ("gemm:2048x2048x2048:bf16", "latency-bound"),
        ("gemm:2048x2048x2048:bf16", "psum-evacuation-stalls"),
        ("rmsnorm", "dma-compute-serialised"),
    ],
)
def test_rule_silent_where_it_does_not_apply(workload, absent):
    assert absent in RULES
    assert absent not in rules_of(advice_of(workload))


def test_gains_are_measured_by_simulating_the_what_if():
    """The re-simulated gain is the simulated time saved under the what-if config."""
    trace, summary, program, config = simulate_workload("matmul_block_free", "trn1", [])
    advice = advise(summary, trace=trace, program=program, config=config)
    top = advice.top
    assert top.finding.rule == "small-descriptors" and top.method == RESIMULATED
    assert top.what_if_total_ns == pytest.approx(summary.total_ns - top.gain_ns)
    assert 0 < top.gain_ns < summary.total_ns
    assert top.finding.what_if["dma.descriptor_efficiency"]["1024"] > 0.39


def test_run_folder_gives_the_same_findings_with_bounds(tmp_path):
    trace, summary, program, config = simulate_workload("matmul_tiled", "trn1", [])
    from hwsim.trace.outputs import write_run_outputs

    write_run_outputs(trace, tmp_path / "run", summary=summary, plots=False)
    from_dir = advise_target(str(tmp_path / "run"))
    in_memory = advise(summary, trace=trace, program=program, config=config)
    assert sorted(rules_of(from_dir)) == sorted(rules_of(in_memory))
    assert {r.method for r in from_dir.recommendations} == {BOUND}
    evidence = Evidence.from_run_dir(tmp_path / "run")
    assert evidence.load_total_bytes == Evidence.from_trace(trace, summary).load_total_bytes
    data = json.loads(json.dumps(from_dir.to_dict()))
    assert data["recommendations"][0]["rule"] in ("reloaded-tiles", "small-descriptors")


def test_cli_advise(capsys, tmp_path):
    from hwsim.cli import main

    assert main(["advise", "matmul_block_free", "--config", "trn1"]) == 0
    out = capsys.readouterr().out
    assert "Bottleneck: descriptor-overhead-bound" in out
    assert "1. [small-descriptors]" in out and "re-simulated" in out
    assert main(["advise", str(tmp_path / "missing")]) == 2
