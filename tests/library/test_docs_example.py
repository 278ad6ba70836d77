"""The walk-through in docs/kernel-language.md runs as written and its semaphore table is true."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "kernel-language.md"


def test_first_example_runs_and_inserts_the_documented_waits():
    text = DOC.read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, str(DOC), "exec"), namespace)  # asserts its own numerics
    streams = namespace["result"].program.cores[0].streams
    waits = {f"{e}[{pc}]": list(i.waits) for e, s in streams.items() for pc, i in enumerate(s)}
    assert waits["vector[0]"] == [("S.dma.q0", 1), ("S.dma.q1", 1)]
    assert waits["vector[1]"] == [("S.dma.q1", 3)]
    assert waits["scalar[0]"] == [("S.vector", 1)]
    assert waits["gpsimd[1]"] == [("S.scalar", 2)]
    assert waits["sync[3]"] == [("S.dma.q0", 1), ("S.vector", 1)]
    for row in ("vector[1] tensor_tensor  waits=[('S.dma.q1', 3)]", "sync[3] dma_copy"):
        assert row in text
