"""Bridge tests: each starts with an empty lowering cache (``bridge.lowering_cache``), so a
test that patches the lowering is never served another test's program."""

import pytest


@pytest.fixture(autouse=True)
def _fresh_lowering_cache():
    from hwsim.bridge.lowering_cache import LOWERED

    LOWERED.clear()
    yield
