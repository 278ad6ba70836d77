"""Programs whose full run summary and trace records are fingerprinted (tests/data/
sim_fingerprints.json, captured from main before the issue-16 simulator speed work): library
kernels on trn1/trn2, a bridge (torch) model, an NKI kernel and a two-core program.

``python -m tests.sim.fingerprint_programs`` (from the checkout root) rewrites the data file;
only do that for a change that is meant to change simulated timing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).parents[2]
DATA = ROOT / "tests" / "data" / "sim_fingerprints.json"

_MODEL = textwrap.dedent(
    """
    import torch
    from torch import nn


    def model():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 32)).eval()
        return net, (torch.randn(8, 64, generator=torch.Generator().manual_seed(1)),)
    """
)


def _workload(text: str, config: str, numerics: bool) -> Callable[[Path], tuple[Any, Any, Any]]:
    def make(tmp: Path) -> tuple[Any, Any, Any]:
        from hwsim.config import load_config
        from hwsim.machine.simulator import run
        from hwsim.workloads.resolve import resolve_workload

        hw = load_config(config)
        name = text
        if text == "MODEL":
            path = tmp / "fingerprint_model.py"
            path.write_text(_MODEL)
            name = f"{path}:model"
        program = resolve_workload(name).program(hw, numerics)
        result = run(program, hw, numerics=numerics)
        return program, result.trace, result.summary

    return make


def _nki(tmp: Path) -> tuple[Any, Any, Any]:
    import hwsim.nki as nki
    import hwsim.nki.language as nl

    @nki.jit
    def softmax_kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for t in nl.affine_range(x.shape[0] // 128):
            tile = nl.load(x[t * 128 : (t + 1) * 128, :])
            nl.store(out[t * 128 : (t + 1) * 128, :], value=nl.softmax(tile, axis=1))
        return out

    x = np.random.default_rng(1).standard_normal((512, 512)).astype(np.float32)
    done = nki.run(softmax_kernel, x, config="trn2", schedule="program")  # as pinned
    return done.program, done.trace, done.summary


def _two_cores(tmp: Path) -> tuple[Any, Any, Any]:
    """Two gemm programs of the same shapes, one per core, sharing their HBM stack on trn2."""
    from hwsim.config import load_config
    from hwsim.machine.simulator import run
    from hwsim.program import Program
    from hwsim.workloads.resolve import resolve_workload

    hw = load_config("trn2")
    first = resolve_workload("gemm:256x512x512:bf16").program(hw, False)
    second = resolve_workload("gemm:256x512x512:bf16").program(hw, False)
    program = Program(
        hbm=first.hbm,
        cores=[first.cores[0], second.cores[0]],
        allocations=[
            *first.allocations,
            *(dataclasses.replace(a, core=1) for a in second.allocations),
        ],
        meta=dict(first.meta),
    )
    result = run(program, hw, numerics=False)
    return program, result.trace, result.summary


def _v1_2k(tmp: Path) -> tuple[Any, Any, Any]:
    """The V1 kernel of bench/speed.py at a sixteenth of its size (thousands of instructions)."""
    from hwsim.config import load_config
    from hwsim.lang import TensorSpec
    from hwsim.library import matmul_optimized
    from hwsim.machine.simulator import run

    hw = load_config("trn1")
    lhs_t, rhs = TensorSpec((2048, 2048), "bf16"), TensorSpec((2048, 4096), "bf16")
    program = matmul_optimized.build(lhs_t, rhs, config=hw).program
    result = run(program, hw, numerics=False)
    return program, result.trace, result.summary


CASES: dict[str, Callable[[Path], tuple[Any, Any, Any]]] = {
    "gemm256@trn2": _workload("gemm:256x256x256:bf16", "trn2", True),
    "matmul_optimized@trn1": _workload("matmul_optimized", "trn1", False),
    "attention@trn2": _workload("attention", "trn2", False),
    "softmax@trn1": _workload("softmax", "trn1", False),
    "conv2d_3x3@trn2": _workload("conv2d_3x3", "trn2", False),
    "mlp@trn2": _workload("mlp", "trn2", False),
    "torch_model@tiny": _workload("MODEL", "tiny", True),
    "nki_softmax@trn2": _nki,
    "two_cores@trn2": _two_cores,
    "v1_2k@trn1": _v1_2k,
}


#: A tag's ``file.py:LINE``: where a bridge lowering emitted an instruction. Fingerprints pin
#: results, and a lowering moving down a line is not one, so the line is left out.
_SOURCE_LINE = re.compile(r"\.py:\d+")


def _digest(rows: Any) -> str:
    h = hashlib.sha256()
    for row in rows:
        h.update(_SOURCE_LINE.sub(".py", repr(tuple(row))).encode())
        h.update(b"\n")
    return h.hexdigest()


def fingerprint(program: Any, trace: Any, summary: Any) -> dict[str, Any]:
    """The summary dict (JSON round trip, wall times dropped) and digests of every trace record;
    an instruction record's instruction must be the program's at its (core, engine, pc)."""
    rows = []
    for r in trace.instructions:
        instruction = r.instruction
        assert instruction is program.cores[r.core].streams[r.engine][r.pc]
        rows.append((r.core, r.engine, r.pc, r.ready_tick, r.start_tick, r.end_tick, r.done_tick))
    data = json.loads(_SOURCE_LINE.sub(".py", json.dumps(summary.to_dict(), default=str)))
    for key in ("wall_build_s", "wall_simulate_s"):
        data.pop(key, None)
    data["workload"] = data["workload"].rsplit("/", 1)[-1]  # a file workload's temporary folder
    return {
        "summary": data,
        "instructions": len(rows),
        "instruction_digest": _digest(rows),
        "dma": len(trace.dma),
        "dma_digest": _digest(trace.dma),
        "semaphore_updates": len(trace.semaphore_updates),
        "semaphore_digest": _digest(trace.semaphore_updates),
        "end_tick": trace.end_tick,
    }


def main() -> None:
    import tempfile

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in CASES.items():
            out[name] = fingerprint(*make(Path(tmp)))
            print(name, out[name]["instructions"], out[name]["dma"], file=sys.stderr)
    DATA.write_text(json.dumps(out, indent=1, sort_keys=False) + "\n")


if __name__ == "__main__":
    main()
