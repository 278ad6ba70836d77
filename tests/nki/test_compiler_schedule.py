"""An NKI kernel is built as the NKI compiler builds it: its instructions reordered where no
dependency forbids it, the order checked by simulation (``hwsim.schedule.COMPILER_SCHEDULE``).

The kernel is the trn2 kernel-optimisation tutorial's *block all* version (K2-v5 of the
calibration set), vendored unmodified, at a small shape: each (k, m) block's lhsT tiles go where
the previous block's were, so under program order a block's loads wait for the previous block's
last matmul. The compiler's schedule interleaves the accumulation groups over the PSUM banks,
so each tile's last reader comes earlier and the next block's load into its bytes starts sooner.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

import hwsim.nki as nki
from hwsim.lang import TensorSpec
from hwsim.nki.upstream import kernel
from hwsim.schedule import COMPILER_SCHEDULE, SCHEDULE_ENV

BLOCK_ALL = (
    Path(__file__).resolve().parents[2]
    / "third_party/neuron-sdk-docs-db1586c3/nki/how-to-guides/kernel-optimization/block_all.py"
)
#: K, M, N and blocks of 2 tiles in each dimension: 2 blocks of each.
K, M, N = 512, 512, 2048
BLOCKS = {"TILES_IN_BLOCK_M": 2, "TILES_IN_BLOCK_N": 2, "TILES_IN_BLOCK_K": 2}
SPECS = (TensorSpec((K, M), "fp32"), TensorSpec((K, N), "fp32"))


def _run(schedule: str | None = None, *args: object, numerics: bool = False) -> nki.NkiRun:
    fn = kernel(BLOCK_ALL, "matrix_multiply_kernel")
    options = {} if schedule is None else {"schedule": schedule}
    return nki.run(fn, *(args or SPECS), config="trn2", numerics=numerics, **options, **BLOCKS)


def _group_runs(run: nki.NkiRun) -> list[int]:
    """Lengths of the runs of consecutive matmuls (TensorE stream order) into one PSUM tile."""
    tiles = [i.dst.offset_bytes for i in run.program.cores[0].streams["tensor"]]
    runs = [1]
    for before, after in itertools.pairwise(tiles):
        if after == before:
            runs[-1] += 1
        else:
            runs.append(1)
    return runs


def test_an_nki_kernel_is_built_under_the_compilers_schedule(monkeypatch):
    monkeypatch.delenv(SCHEDULE_ENV, raising=False)
    assert COMPILER_SCHEDULE == "best"
    scheduled, program = _run(), _run("program")
    assert scheduled.program.meta["schedule"] == "best"
    assert "schedule" not in program.program.meta
    # program order: each accumulation group's 2 matmuls back to back, every block waiting
    assert set(_group_runs(program)) == {BLOCKS["TILES_IN_BLOCK_K"]}
    # the compiler's order interleaves groups across PSUM banks, and is faster
    assert min(_group_runs(scheduled)) == 1
    assert scheduled.latency_ns < program.latency_ns
    assert scheduled.latency_ns == _run("best").latency_ns  # the default is best, to the tick


def test_the_compilers_schedule_never_loses_to_program_order_and_computes_the_same():
    rng = np.random.default_rng(0)
    lhs_t = rng.standard_normal((K, M)).astype(np.float32)
    rhs = rng.standard_normal((K, N)).astype(np.float32)
    scheduled = _run(None, lhs_t, rhs, numerics=True)
    program = _run("program", lhs_t, rhs, numerics=True)
    assert scheduled.latency_ns <= program.latency_ns
    np.testing.assert_allclose(scheduled.outputs[0], lhs_t.T @ rhs, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(scheduled.outputs[0], program.outputs[0])


@pytest.mark.parametrize("policy", ["program", "list"])
def test_the_environment_and_an_explicit_policy_override_the_compilers(monkeypatch, policy):
    monkeypatch.setenv(SCHEDULE_ENV, policy)
    by_env = _run()
    explicit = _run(policy)
    assert by_env.latency_ns == explicit.latency_ns
    assert by_env.program.meta.get("schedule") == explicit.program.meta.get("schedule")
    assert explicit.program.meta.get("schedule") == (None if policy == "program" else policy)
