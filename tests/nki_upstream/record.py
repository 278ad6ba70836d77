"""docs/nki-conformance.json: the outcomes of the last recorded conformance runs (the kernels'
and the unit tests'), from which ``python -m hwsim.nki.support_docs`` writes the pass rates
into docs/nki-support.md."""

from __future__ import annotations

import json
from typing import Any

from hwsim.nki.support_docs import CONFORMANCE


def update(section: str, outcomes: dict[str, Any]) -> None:
    """Replace the recorded outcomes of the tests run (others of the section are kept)."""
    data = json.loads(CONFORMANCE.read_text()) if CONFORMANCE.exists() else {}
    data.setdefault(section, {}).update(outcomes)
    CONFORMANCE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"recorded {len(outcomes)} outcomes in {CONFORMANCE}")
