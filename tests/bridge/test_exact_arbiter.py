"""The float64 arbiter of a bf16/fp16 result off the CPU (``judged_with_exact``).

The CPU's low-precision kernels round too; where the exact result is 0 (the layer norm of one
element) their output is rounding noise, and the tiny-output rule then failed a simulator that
computed the exact value. The arbiter passes such a result only if it is within tolerance of the
op in float64 *and* no further from it than the CPU's; every other case keeps the CPU's verdict.
"""

from __future__ import annotations

import torch

from hwsim.bridge.offload import HwsimMode
from hwsim.bridge.precision import TOLERANCES, compare, judged_with_exact, lazy_leaves

BF16 = TOLERANCES["bf16"]


def _bf16(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.bfloat16)


def test_the_exact_value_passes_where_the_cpu_result_is_rounding_noise() -> None:
    cpu, ours, exact = _bf16(-0.00104), _bf16(0.0), torch.tensor([0.0], dtype=torch.float64)
    assert not compare(ours, cpu, BF16).ok  # the CPU alone fails the exact value
    stats = judged_with_exact(ours, cpu, BF16, lambda: exact)
    assert stats.ok
    assert stats.exact_max_abs == 0.0
    assert stats.cpu_exact_max_abs is not None and stats.cpu_exact_max_abs > 1e-3
    assert stats.max_abs > 1e-3  # the distance to the CPU is still reported


def test_a_result_off_the_exact_value_too_fails() -> None:
    cpu, ours, exact = _bf16(-0.00104), _bf16(0.003), torch.tensor([0.0], dtype=torch.float64)
    assert not judged_with_exact(ours, cpu, BF16, lambda: exact).ok


def test_a_result_further_from_the_exact_value_than_the_cpu_fails() -> None:
    # Within the tolerance of the exact 0 (absolute: atol 0.01), but the CPU is closer to it.
    cpu, ours, exact = _bf16(-0.00104), _bf16(0.002), torch.tensor([0.0], dtype=torch.float64)
    assert compare(ours, exact.to(torch.bfloat16), BF16).ok
    assert not judged_with_exact(ours, cpu, BF16, lambda: exact).ok


def test_fp32_results_and_refused_references_keep_the_cpu_verdict() -> None:
    called = []

    def exact() -> torch.Tensor:
        called.append(1)
        return torch.tensor([0.0], dtype=torch.float64)

    cpu32, ours32 = torch.tensor([-1e-7]), torch.tensor([0.0])
    assert not judged_with_exact(ours32, cpu32, TOLERANCES["fp32"], exact).ok
    assert not called  # fp32 is never arbitrated: no float64 run either
    assert not judged_with_exact(_bf16(0.0), _bf16(-0.00104), BF16, lambda: None).ok


def test_the_reference_runs_only_when_needed_and_once() -> None:
    calls = []

    def outputs() -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(1)
        return torch.zeros(1), torch.ones(1)

    leaf = lazy_leaves(outputs)
    assert not calls
    assert float(leaf(1)[0]) == 1.0 and float(leaf(0)[0]) == 0.0  # type: ignore[index]
    assert leaf(2) is None and len(calls) == 1
    assert lazy_leaves(None)(0) is None


def test_layer_norm_of_one_bf16_element_passes_the_eager_check() -> None:
    x, w = _bf16(0.7109375), _bf16(1.3)
    with HwsimMode(config="tiny", check=True) as mode:
        out, _mean, _rstd = torch.ops.aten.native_layer_norm.default(x, (1,), w, None, 1e-5)
    assert float(out[0]) == 0.0  # (x - mean) * rstd * w: exactly 0
    (record,) = [r for r in mode.report.ops if r.status == "simulator"]
    assert record.error is not None and record.error["ok"]
    cpu = torch.ops.aten.native_layer_norm.default(x, (1,), w, None, 1e-5)[0]
    if float(cpu[0]) != 0.0:  # this CPU's kernel leaves rounding noise: the arbiter decided
        assert record.error["exact_max_abs"] == 0.0
