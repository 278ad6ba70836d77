"""Programs whose every instruction (semaphore waits and signals included), HBM tensor and
allocation ``test_build_fingerprint`` pins: library kernels, the V1 kernel, gemm, NKI tutorial
kernels, a bridge model graph, a memory-planned (spilling) kernel and a list-scheduled one.

Tags name source lines, some of them in this file: editing it above a kernel changes their
fingerprints (regenerate with ``python tests/unit/test_build_fingerprint.py --write`` only for a
change that means to alter programs).
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np

from hwsim import lang
from hwsim.config import load_config
from hwsim.lang import TensorSpec
from hwsim.lang import isa as nisa
from hwsim.library import matmul_optimized
from hwsim.library.workloads import WORKLOADS
from hwsim.program import Program
from hwsim.workloads.resolve import resolve_workload

CHUNK = 1024
TESTS = Path(__file__).resolve().parents[1]


@lang.kernel
def sum_of_live_chunks(x):
    """Every chunk loaded first, summed afterwards: on ``tiny`` the memory planner spills."""
    out = lang.ndarray((x.shape[0], CHUNK), x.dtype, buffer=lang.hbm)
    chunks = [lang.load(x[:, c * CHUNK : (c + 1) * CHUNK]) for c in range(x.shape[1] // CHUNK)]
    acc = lang.ndarray((x.shape[0], CHUNK), x.dtype)
    nisa.tensor_copy(acc, chunks[0])
    for tile in chunks[1:]:
        nisa.tensor_tensor(acc, acc, tile, nisa.AluOp.add)
    lang.store(out, acc)
    return out


MODEL = textwrap.dedent(
    """
    import torch
    from torch import nn


    def model():
        torch.manual_seed(0)
        net = nn.Sequential(
            nn.Linear(64, 128), nn.GELU(), nn.LayerNorm(128), nn.Linear(128, 32), nn.Softmax(-1)
        ).eval()
        return net, (torch.randn(8, 64, generator=torch.Generator().manual_seed(1)),)


    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 8, 3, padding=1)
            self.norm = nn.BatchNorm2d(8)
            self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
            self.out = nn.Linear(16, 10)

        def forward(self, x):
            y = torch.relu(self.norm(self.conv(x)))
            y = nn.functional.max_pool2d(y, 2).flatten(2)  # [B, 8, 16]
            y, _ = self.attn(y, y, y)
            return self.out(y).sum(1)


    def cnn_attention():
        torch.manual_seed(0)
        x = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(2))
        return Block().eval(), (x,)
    """
)


def _nki_kernels():
    spec = importlib.util.spec_from_file_location(
        "fp_matmul_kernels", TESTS / "nki" / "matmul_kernels.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def programs(tmp: Path) -> dict[str, Callable[[], Program]]:
    """Name -> a function building that program."""
    trn1, trn2, tiny = load_config("trn1"), load_config("trn2"), load_config("tiny")
    found: dict[str, Callable[[], Program]] = {}
    for w in WORKLOADS:
        found[f"library:{w.name}"] = lambda w=w: w.build(trn2)
    found["v1-small"] = lambda: (
        matmul_optimized.build(
            TensorSpec((1024, 512), "bf16"), TensorSpec((1024, 2048), "bf16"), config=trn1
        ).program
    )
    found["v1-medium"] = lambda: (
        matmul_optimized.build(
            TensorSpec((2048, 2048), "bf16"), TensorSpec((2048, 4096), "bf16"), config=trn1
        ).program
    )
    for text in ("gemm:256x256x256:bf16", "gemm:512x1024x2048:bf16", "gemm:384x640x320:fp32"):
        found[text] = lambda text=text: resolve_workload(text).program(trn2)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 6 * CHUNK)).astype(np.float32)
    found["spill"] = lambda: sum_of_live_chunks.build(x, config=tiny).program
    found["list-scheduled"] = lambda: (
        WORKLOADS[1].kernel.build(*WORKLOADS[1].args(), config=trn2, schedule="list").program
    )
    nki = _nki_kernels()
    a = rng.standard_normal((512, 256)).astype(np.float32)
    b = rng.standard_normal((512, 1024)).astype(np.float32)
    for name in ("nki_matmul_tiled_", "nki_matmul_hoist_load_"):
        kernel = getattr(nki, name)
        # program order, as pinned (NKI builds are scheduled by default; the list schedule
        # is pinned above)
        found[f"nki:{name}"] = lambda kernel=kernel: (
            kernel.lang_kernel([], {}).build(a, b, config=trn2, schedule="program").program
        )
    model = tmp / "fp_model.py"
    model.write_text(MODEL)
    found["bridge:mlp"] = lambda: resolve_workload(f"{model}:model").program(tiny)
    found["bridge:cnn_attention"] = lambda: resolve_workload(f"{model}:cnn_attention").program(trn2)
    return found


#: A tag's ``file.py:LINE``: where a lowering emitted an instruction. A lowering moving down a
#: line changes no program, so the line is left out of the fingerprint.
_SOURCE_LINE = re.compile(r"\.py:\d+")


def fingerprint(program: Program) -> str:
    """SHA-256 of everything the builder decides: per core and engine stream, every
    instruction's full repr (fields, waits, signals, tag, name); HBM tensors; allocations. The
    empty stream of an engine not shown when idle (the collective engine, added after these
    programs were pinned) is no decision of the builder's and is left out."""
    from hwsim.engines import engine_spec  # here: a line above would move the kernels' tags

    digest = hashlib.sha256()
    for decl in program.hbm.values():
        digest.update(
            repr((decl.name, decl.shape, decl.dtype, decl.kind, decl.address_bytes)).encode()
        )
    for allocation in program.allocations:
        digest.update(repr(allocation).encode())
    for index, core in enumerate(program.cores):
        for engine, stream in core.streams.items():
            if not stream and not engine_spec(engine).shown_when_idle:
                continue
            digest.update(f"core{index}:{engine}:{len(stream)}".encode())
            for instruction in stream:
                digest.update(_SOURCE_LINE.sub(".py", repr(instruction)).encode())
    return digest.hexdigest()
