"""Every distributed test starts and ends with dynamo's caches empty: rank threads share the
process's compiled code, so a graph an earlier test compiled (with other options, on other
ranks) would otherwise serve this test's ranks, and which test ran before in the same pytest
worker would decide the outcome."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch._dynamo


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
