"""``precision.compare`` judges an output a chunk at a time: the same verdict and figures as
judging the whole tensor at once (``precision._outside`` on all of it)."""

from __future__ import annotations

import math

import pytest
import torch

from hwsim.bridge import precision
from hwsim.bridge.precision import ErrorStats, Tolerance

TOLERANCE = Tolerance(rtol=1e-5, atol=1e-5)


def _whole(actual: torch.Tensor, expected: torch.Tensor, tolerance: Tolerance) -> ErrorStats:
    a, e = actual.to(torch.float64), expected.to(torch.float64)
    bad, diff, relative = precision._outside(a, e, tolerance)
    rel = diff / e.abs().clamp_min(torch.finfo(torch.float32).tiny)
    return ErrorStats(
        float(diff.max()), float(rel.max()), int(bad.sum()), a.numel(), tolerance.rtol,
        tolerance.atol, relative,
    )  # fmt: skip


def _cases() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    e = torch.randn(300, 37, generator=g)
    close = e + 1e-6 * torch.randn(300, 37, generator=g)
    tiny = e * 1e-9  # RMS below atol: judged relative to it
    special = e.clone()
    special[3, 4], special[5, 6] = math.nan, math.inf
    off = special.clone()
    off[7, 8], off[9, 1] = math.nan, off[9, 1] + 1.0
    expected_nan = e.clone()
    expected_nan[0, 0] = math.nan
    return {
        "close": (close, e),
        "tiny": (tiny * (1 + 1e-3 * torch.randn(300, 37, generator=g)), tiny),
        "nan and inf": (off, special),
        "nan expected only": (e, expected_nan),
        "zeros": (torch.zeros(100), torch.zeros(100)),
        "transposed": (e.t(), e.t() + 1e-4),
        "bf16": (close.bfloat16(), e.bfloat16()),
    }


@pytest.mark.parametrize("name", list(_cases()))
@pytest.mark.parametrize("chunk", [7, 4096, 1 << 20])
def test_a_chunked_comparison_matches_the_whole_tensors(name, chunk, monkeypatch):
    actual, expected = _cases()[name]
    monkeypatch.setattr(precision, "COMPARE_CHUNK_ELEMENTS", chunk)
    got, want = precision.compare(actual, expected, TOLERANCE), _whole(actual, expected, TOLERANCE)
    assert repr(got) == repr(want)  # repr: NaN figures compare equal


def test_the_cases_cover_failures_nan_figures_and_the_relative_rule():
    stats = {name: _whole(a, e, TOLERANCE) for name, (a, e) in _cases().items()}
    assert stats["close"].ok and not stats["close"].relative
    assert stats["transposed"].mismatched == stats["transposed"].elements
    assert stats["tiny"].relative
    assert stats["nan and inf"].mismatched == 2 and math.isinf(stats["nan and inf"].max_abs)
    assert math.isnan(stats["nan expected only"].max_rel)
