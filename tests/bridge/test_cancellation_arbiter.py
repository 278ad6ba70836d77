"""An fp32 result that is rounding noise (0 in exact arithmetic) is judged against float64.

The gradient of an attention key projection's bias is exactly 0 (the softmax is invariant to a
shift of its row), so both the CPU and the simulator return rounding noise of ~1e-12 in
different places; judged relative to its own magnitude, that noise failed every element and
flagged a correct training step. ``precision.judged_as_cancellation`` passes such a result when
the float64 result is itself within the CPU's noise and the simulator's distance from it is
within ``CANCELLATION_NOISE_FACTOR`` of the CPU's; anything else keeps the CPU's verdict.
"""

from __future__ import annotations

import torch

from hwsim.bridge.precision import (
    CANCELLATION_NOISE_FACTOR,
    TOLERANCES,
    compare,
    judged_as_cancellation,
)

FP32 = TOLERANCES["fp32"]


def _noise(seed: int, scale: float = 1e-12) -> torch.Tensor:
    return torch.randn(64, generator=torch.Generator().manual_seed(seed)) * scale


def test_noise_against_noise_passes_with_both_distances_reported() -> None:
    cpu, ours, exact = _noise(0), _noise(1), torch.zeros(64, dtype=torch.float64)
    assert not compare(ours, cpu, FP32).ok  # the relative rule alone fails the noise
    stats = judged_as_cancellation(ours, cpu, FP32, lambda: exact)
    assert stats.ok
    assert stats.exact_max_abs == float(ours.double().abs().max())
    assert stats.cpu_exact_max_abs == float(cpu.double().abs().max())


def test_a_value_far_beyond_the_cpus_noise_fails() -> None:
    cpu, exact = _noise(0), torch.zeros(64, dtype=torch.float64)
    ours = _noise(1, scale=1e-12 * CANCELLATION_NOISE_FACTOR * 10)
    assert not judged_as_cancellation(ours, cpu, FP32, lambda: exact).ok


def test_a_real_small_value_is_not_treated_as_noise() -> None:
    # The exact result is 1e-9 per element, far above the CPU's 1e-15 of rounding: a real value,
    # judged as before (the simulator's 1e-12 answer is wrong), never waved through as noise.
    exact = torch.full((64,), 1e-9, dtype=torch.float64)
    cpu = (exact + _noise(0, 1e-15).double()).float()
    ours = _noise(1).float()
    assert not judged_as_cancellation(ours, cpu, FP32, lambda: exact).ok


def test_no_arbiter_keeps_the_verdict() -> None:
    cpu, ours = _noise(0), _noise(1)
    assert not judged_as_cancellation(ours, cpu, FP32, lambda: None).ok


class _KeyBiasAttention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.q = torch.nn.Linear(32, 32)
        self.k = torch.nn.Linear(32, 32)
        self.v = torch.nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.q(x) @ self.k(x).transpose(-1, -2) / 32**0.5
        return (scores.softmax(-1) @ self.v(x)).square().mean()


def test_a_training_step_with_a_zero_gradient_is_judged_correct() -> None:
    from hwsim import bridge

    model = _KeyBiasAttention()
    x = torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(1))
    options = {"config": "trn2", "fallback": "error", "auto_cast": "none"}
    loss = torch.compile(model, backend="hwsim", options=options)(x)
    loss.backward()
    report = bridge.last_report()
    grad = model.k.bias.grad
    assert grad is not None and float(grad.abs().max()) < 1e-6  # 0 up to rounding
    assert report.numerics_ok, [
        (o.name, o.stats) for o in (*report.outputs, *report.gradients) if not o.stats.ok
    ]
