"""The bridge's graph compiler, measured: each model with every pass off, each pass alone, all
on, against its roofline floor (bridge.passes, docs/compiler.md).

    .venv/bin/python bench/compiler.py [--config trn2] [--models tiny_gpt2,gpt2_small,...]
                                       [--json FILE]

Each model goes through ``torch.export`` + Core ATen decompositions (the ``hwsim export``
path: one graph) and is lowered once per pass selection; each program is simulated once
without numerics (timing only; tests/bridge/test_bridge_passes.py checks the numerics of the
passes). Models: the demo's tiny GPT-2 (2 x 16 tokens), GPT-2 small (12 layers, d768, 12
heads, seq 128, batch 1, random weights, fp32), tiny Llama (2 x 16 tokens) and a
ResNet-18-shaped CNN (BasicBlocks [2, 2, 2, 2], 64-512 channels) on one 3 x 64 x 64 image.

Targets (printed PASS/MISS): tiny GPT-2 all-on >= 4x faster than all-off; GPT-2 small within
2.5x of its floor; no model slower from any single pass than with all passes off.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import hwsim  # noqa: F401  (first: one BLAS thread before numpy loads)

# isort: split
import torch
from torch import nn

from hwsim.bridge.export import _drop_unused_inputs, _export, _placeholder_values
from hwsim.bridge.graph_lowering import lower_graph
from hwsim.bridge.models import BasicBlock, tiny_gpt2, tiny_llama, tokens
from hwsim.bridge.passes import PASS_NAMES, PassSelection
from hwsim.config import load_config
from hwsim.machine.simulator import run


def gpt2_small() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024)
    config._attn_implementation = "sdpa"
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, 128), generator=torch.Generator().manual_seed(0))
    return model, (ids,), {"use_cache": False}


class ResNet18(nn.Module):
    """ResNet-18's shape: stem 7x7/2 conv + BN + ReLU + 3x3/2 max pool, BasicBlocks [2, 2, 2, 2]
    at 64, 128, 256, 512 channels, global average pool, a 1000-way Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        blocks, c_in = [], 64
        for c_out, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(c_in, c_out, stride), BasicBlock(c_out, c_out, 1)]
            c_in = c_out
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(512, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def resnet18_64() -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    torch.manual_seed(0)
    image = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    return ResNet18().eval(), (image,), {}


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple[Any, ...], dict[str, Any]]]] = {
    "tiny_gpt2": lambda: (tiny_gpt2(), (tokens(2, 16),), {"use_cache": False}),
    "gpt2_small": gpt2_small,
    "tiny_llama": lambda: (tiny_llama(), (tokens(2, 16),), {"use_cache": False}),
    "resnet18_64": resnet18_64,
}


def measure(name: str, config: str) -> dict[str, Any]:
    model, args, kwargs = MODELS[name]()
    exported = _export(model, args, kwargs)
    graph = exported.graph_module
    examples = _drop_unused_inputs(graph.graph, _placeholder_values(exported, args, kwargs))
    hw = load_config(config)
    selections = {"off": PassSelection.none()}
    selections |= {f"{p} only": PassSelection.only(p) for p in PASS_NAMES}
    selections["all on"] = PassSelection.all()
    times: dict[str, float] = {}
    instructions: dict[str, int] = {}
    floor = None
    for label, selection in selections.items():
        started = time.perf_counter()
        lowered = lower_graph(graph, examples, config=hw, passes=selection, name=name)
        result = run(lowered.program, hw, numerics=False)
        times[label] = float(result.summary.total_ns)
        instructions[label] = int(result.summary.instructions)
        floor = lowered.floor
        print(
            f"  {name:12s} {label:18s} {times[label] / 1000:10.1f} µs "
            f"{instructions[label]:7d} instr ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    assert floor is not None
    return {
        "model": name,
        "times_ns": times,
        "instructions": instructions,
        "floor": floor.to_dict(),
    }


def table(rows: list[dict[str, Any]]) -> str:
    labels = list(rows[0]["times_ns"])
    head = ["model", *labels, "floor", "all on / floor", "binding"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        floor = row["floor"]["floor_ns"]
        cells = [f"{row['times_ns'][k] / 1000:,.1f}" for k in labels]
        ratio = row["times_ns"]["all on"] / floor
        lines.append(
            f"| {row['model']} | "
            + " | ".join(cells)
            + f" | {floor / 1000:,.1f} | {ratio:.1f}x | {row['floor']['binding']} |"
        )
    return "\n".join(lines) + "\n\n(simulated µs; 'X only': that pass alone)"


def targets(rows: list[dict[str, Any]]) -> list[tuple[str, bool, str]]:
    by = {r["model"]: r for r in rows}
    checks = []
    if "tiny_gpt2" in by:
        t = by["tiny_gpt2"]["times_ns"]
        speedup = t["off"] / t["all on"]
        checks.append(
            ("tiny GPT-2 all-on >= 4x faster than all-off", speedup >= 4, f"{speedup:.2f}x")
        )
    if "gpt2_small" in by:
        r = by["gpt2_small"]
        ratio = r["times_ns"]["all on"] / r["floor"]["floor_ns"]
        checks.append(("GPT-2 small within 2.5x of its floor", ratio <= 2.5, f"{ratio:.2f}x"))
    worst = []
    for r in rows:
        off = r["times_ns"]["off"]
        for label, ns in r["times_ns"].items():
            if label.endswith(" only") and ns > off:
                worst.append(f"{r['model']} {label} {ns / off:.3f}x")
    checks.append(("no model slower from any single pass", not worst, ", ".join(worst) or "none"))
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="trn2")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--json", help="also write the measurements as JSON")
    args = parser.parse_args(argv)
    rows = [measure(name, args.config) for name in args.models.split(",")]
    print()
    print(table(rows))
    print()
    for what, ok, figure in targets(rows):
        print(f"{'PASS' if ok else 'MISS'}  {what}: {figure}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
