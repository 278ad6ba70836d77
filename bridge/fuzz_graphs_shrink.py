"""Shrinking a failing ``graph`` fuzz case (``bridge.fuzz_graphs``) and writing it as a
ready-to-run file: a readable ``torch.nn.Module`` plus the spec its checks build from."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hwsim.bridge.fuzz_graphs import BINARY, value_shapes
from hwsim.fuzz.shrink import ops_without


def candidates(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Smaller graph cases: one output, an op removed (uses read its first operand when the
    shapes agree), training off, halved dimensions."""
    if len(spec["outputs"]) > 1:
        for out in spec["outputs"]:
            yield {**spec, "outputs": [out]}
    shapes = value_shapes(spec)
    inputs = len(spec["inputs"])
    for value in reversed(range(inputs + len(spec["ops"]))):  # values nothing reads
        if (
            value not in spec["outputs"]
            and not _readers(spec, value)
            and (value >= inputs or inputs > 1)
        ):
            yield _without(spec, value, value)
    for i in reversed(range(len(spec["ops"]))):
        value, op = inputs + i, spec["ops"][i]
        if shapes[op[1]] == shapes[value]:
            yield _without(spec, value, op[1])
    if spec["train"]:
        yield {**spec, "train": False}
    dims = {(len(s) - d, size) for s in spec["inputs"] for d, size in enumerate(s) if size > 1}
    for back, size in sorted(dims):  # a dimension halved in every input that has it, so
        smaller = [list(s) for s in spec["inputs"]]  # broadcasting still holds
        for s in smaller:
            if len(s) >= back and s[-back] == size:
                s[-back] = size // 2
        yield {**spec, "inputs": smaller}


def _slots(op: list[Any]) -> list[int]:
    return [1, 2] if op[0] in BINARY or op[0] == "matmul" else [1]


def _readers(spec: dict[str, Any], value: int) -> list[int]:
    return [j for j, op in enumerate(spec["ops"]) if value in (op[s] for s in _slots(op))]


def _without(spec: dict[str, Any], value: int, replacement: int) -> dict[str, Any]:
    """The spec without value ``value`` (an input or an op's result), its readers reading
    ``replacement`` instead; later values renumbered."""

    def renumber(v: int) -> int:
        v = replacement if v == value else v
        return v - 1 if v > value else v

    ops = ops_without(spec["ops"], len(spec["inputs"]), value, _slots, renumber)
    assert ops is not None  # renumber maps every value
    kept = [s for i, s in enumerate(spec["inputs"]) if i != value]
    return {
        **spec,
        "inputs": kept,
        "ops": ops,
        "outputs": sorted({renumber(o) for o in spec["outputs"]}),
    }


def reproduction(
    spec: dict[str, Any], failures: list[dict[str, str]], where: str, config: str
) -> str:
    """A Python file: the graph as a readable module, compiled for the simulator and checked."""
    n = len(spec["inputs"])
    lines = [
        f"        v{len(spec['inputs']) + j} = {_source(op)}" for j, op in enumerate(spec["ops"])
    ]
    outs = ", ".join(f"v{i}" for i in spec["outputs"])
    found = "\n".join(f"#   {f['check']}: {f['message']}" for f in failures)
    return f'''"""A graph hwsim fuzz found failing ({where}), shrunk; run it: python THIS_FILE.

The module below is the case; the checks (hwsim.bridge.fuzz_graphs.check_case) compile the same
graph from SPEC with torch.compile(backend="hwsim") on {config} and compare it with eager
PyTorch, across two calls, against its roofline floor and with each graph pass off; it prints
what fails and exits 1 while anything does.
"""
# Failures when it was found:
{found}

import torch

SPEC = {spec!r}
CONFIG = {config!r}


class Case(torch.nn.Module):
    def forward(self, {", ".join(f"v{i}" for i in range(n))}):
{chr(10).join(lines) if lines else "        pass"}
        return ({outs},)


if __name__ == "__main__":
    import sys

    from hwsim.bridge.fuzz_graphs import check_case, inputs_of

    compiled = torch.compile(Case(), backend="hwsim", options={{"config": CONFIG}})
    print([tuple(o.shape) for o in compiled(*inputs_of(SPEC))])
    failures = check_case(SPEC, CONFIG)
    for failure in failures:
        print(f"FAIL {{failure.check}}: {{failure.message}}")
    print("no check fails" if not failures else f"{{len(failures)}} check(s) fail")
    sys.exit(1 if failures else 0)
'''


def _source(op: list[Any]) -> str:
    name, a = op[0], f"v{op[1]}"
    b = f"v{op[2]}" if name in BINARY or name == "matmul" else ""
    return {
        "add": f"{a} + {b}",
        "sub": f"{a} - {b}",
        "mul": f"{a} * {b}",
        "maximum": f"torch.maximum({a}, {b})",
        "matmul": f"{a} @ {b}",
        "scale": f"{a} * {op[-1]!r}",
        "transpose": f"{a}.transpose(-1, -2)",
        "stride": f"{a}[..., ::2]",
        "softmax": f"torch.softmax({a}, dim=-1)",
        "layer_norm": f"torch.nn.functional.layer_norm({a}, {a}.shape[-1:])",
        "sum": f"{a}.sum(dim=-1, keepdim=True)",
        "mean": f"{a}.mean(dim=-1, keepdim=True)",
        "exp": f"torch.exp(torch.tanh({a}))",
        "neg": f"-{a}",
    }.get(name, f"torch.nn.functional.{name}({a})")
