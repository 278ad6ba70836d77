"""Public NKI kernels run unmodified (``catalog.py``, ``harness.py``): each must give its
reference's numbers, or stop with an error; a wrong number fails. The default run takes a
representative few (one per kind of source and feature); all of them:

    .venv/bin/python -m tests.nki_upstream.harness          # the tally, or
    .venv/bin/pytest -m "" tests/nki_upstream               # as tests
"""

import pytest

from tests.nki_upstream.catalog import cases
from tests.nki_upstream.harness import run_case

#: The default run's cases: quick, and between them the API generations, direct allocation,
#: index arithmetic, constant masks, a host launch of an SPMD grid, and the course's file.
DEFAULT = {
    "reference/vision.adaptive_avg_pool2d",
    "tutorials/average_pool2d",
    "tutorials/fused_mamba.mamba_v2",
    "tutorials/spmd_tensor_addition",
    "sdk/average_pool2d",
    "sdk/matrix_multiplication.fully_optimized",
    "course/vector_add_naive",
}
#: Kernels that stop with an error today, and why (docs/nki-support.md); a fix makes the
#: strict xfail fail, so the list is kept true.
KNOWN = {
    "contributed/pipelined_attention": "the file launches flash_fwd[0]: a grid of no instances",
}


def _params() -> list:
    out = []
    for case in cases():
        marks = [] if case.id in DEFAULT else [pytest.mark.slow]
        if case.id in KNOWN:
            marks.append(pytest.mark.xfail(reason=KNOWN[case.id], strict=True))
        out.append(pytest.param(case, id=case.id, marks=marks))
    return out


@pytest.mark.parametrize("case", _params())
def test_upstream_kernel_runs_unmodified_with_correct_numerics(case):
    result = run_case(case)
    if result.status == "skip":
        pytest.skip(result.detail)
    assert result.status == "pass", f"{case.id}: {result.status}: {result.detail}"
