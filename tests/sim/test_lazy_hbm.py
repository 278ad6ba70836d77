"""A timing-only run allocates no HBM tensor bytes; a run with numerics allocates what it uses."""

from __future__ import annotations

import numpy as np
import pytest

from hwsim.config import load_config
from hwsim.lang import TensorSpec
from hwsim.library import matmul_optimized
from hwsim.machine import state
from hwsim.machine.simulator import run


@pytest.fixture
def made_tensors(monkeypatch: pytest.MonkeyPatch) -> list[state.HbmTensor]:
    """Every HbmTensor the simulator declares, as it declares them."""
    made: list[state.HbmTensor] = []
    add = state.Hbm.add

    def recording_add(self: state.Hbm, *args: object, **kwargs: object) -> state.HbmTensor:
        tensor = add(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(tensor)
        return tensor

    monkeypatch.setattr(state.Hbm, "add", recording_add)
    return made


def test_timing_only_run_allocates_no_hbm_bytes(made_tensors: list[state.HbmTensor]) -> None:
    config = load_config("trn1")
    spec = TensorSpec((512, 512), "bf16")
    built = matmul_optimized.build(spec, spec, config=config)
    result = run(built.program, config, numerics=False, summarize=False)
    assert result.trace.instructions
    assert sorted(t.name for t in made_tensors) == ["lhsT", "out", "rhs"]
    assert [t.name for t in made_tensors if t.allocated] == []
    assert sum(t.nbytes for t in made_tensors) == 3 * 512 * 512 * 2


def test_numerics_run_allocates_and_computes(made_tensors: list[state.HbmTensor]) -> None:
    config = load_config("trn1")
    rng = np.random.default_rng(0)
    lhs_t = rng.standard_normal((256, 128), dtype=np.float32)
    rhs = rng.standard_normal((256, 512), dtype=np.float32)
    built = matmul_optimized.build(lhs_t, rhs, config=config)
    result = run(built.program, config, numerics=True, summarize=False)
    assert all(t.allocated for t in made_tensors)
    (out,) = result.outputs.values()
    np.testing.assert_allclose(out.astype(np.float32), lhs_t.T @ rhs, rtol=2e-2, atol=2e-1)
