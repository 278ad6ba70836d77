"""Shrinking a failing case to a small one that fails the same way, and writing it as a
ready-to-run Python file.

The shrinker is greedy over the spec: it tries, in turn, keeping one output, deleting an op
(its uses take its first operand when the shapes agree), dropping an input nothing reads,
halving the partitions or the free size, reading an earlier value of the same shape,
and plainer op parameters (VectorE, ``copy``, constant
1.0); any change after which the case still fails the same checks is kept, until none helps or
the budget of attempts runs out. (The property tests shrink through Hypothesis instead: the
generator draws its choices through it, ``hwsim.fuzz.spec``.)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from hwsim.fuzz.spec import OPERAND_SLOTS, FuzzError, check_spec, value_shapes

#: Attempts (each a build and a run of the checks) one shrink may make.
MAX_ATTEMPTS = 150


def shrink(
    spec: dict[str, Any],
    still_fails: Callable[[dict[str, Any]], bool],
    budget: int = MAX_ATTEMPTS,
    *,
    smaller: Callable[[dict[str, Any]], Iterator[dict[str, Any]]] | None = None,
    valid: Callable[[Any], Any] = check_spec,
) -> tuple[dict[str, Any], int]:
    """(the smallest failing spec found, attempts made); ``smaller`` and ``valid``: the kind's
    candidate shrinks and spec check (a kernel case's by default)."""
    smaller = smaller or kernel_candidates
    best, attempts = spec, 0
    changed = True
    while changed and attempts < budget:
        changed = False
        for candidate in smaller(best):
            try:
                valid(candidate)
            except FuzzError:
                continue
            attempts += 1
            if still_fails(candidate):
                best, changed = candidate, True
                break
            if attempts >= budget:
                break
    return best, attempts


def kernel_candidates(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Smaller kernel cases to try, simplest change first (module docstring)."""
    if len(spec["outputs"]) > 1:
        for out in spec["outputs"]:
            yield {**spec, "outputs": [out]}
    for i in reversed(range(len(spec["ops"]))):
        removed = _without_op(spec, i)
        if removed is not None:
            yield removed
    if spec["inputs"] > 1:
        for i in range(spec["inputs"]):
            dropped = _without_value(spec, i, replacement=None)
            if dropped is not None:
                yield dropped
    p, f = spec["shape"]
    if p > 1:
        yield {**spec, "shape": [max(1, p // 2), f]}
    if f > 1:
        yield {**spec, "shape": [p, max(1, f // 2)]}
    shapes = value_shapes(spec)
    for i, op in enumerate(spec["ops"]):
        for slot in _operand_slots(op):  # read an earlier value of the same shape instead
            same = next(v for v, s in enumerate(shapes) if s == shapes[op[slot]])
            if same < op[slot]:
                ops = copy.deepcopy(spec["ops"])
                ops[i][slot] = same
                yield {**spec, "ops": ops}
        for plainer in _plainer(op):
            ops = copy.deepcopy(spec["ops"])
            ops[i] = plainer
            yield {**spec, "ops": ops}


def _plainer(op: list[Any]) -> Iterator[list[Any]]:
    kind = op[0]
    if kind in ("tt", "ts") and op[4] != "vector":
        yield [*op[:4], "vector"]
    if kind == "copy" and op[2] != "vector":
        yield [op[0], op[1], "vector"]
    if kind == "act" and op[1] != "copy":
        yield ["act", "copy", op[2], op[3]]
    if kind in ("ts", "act") and op[3] != 1.0:
        yield [*op[:3], 1.0, *op[4:]]


def _without_op(spec: dict[str, Any], i: int) -> dict[str, Any] | None:
    value = spec["inputs"] + i
    op = spec["ops"][i]
    first = op[1] if op[0] in ("copy", "mm") else op[2]
    shapes = value_shapes(spec)
    replacement = first if shapes[first] == shapes[value] else None
    return _without_value(spec, value, replacement)


def _without_value(
    spec: dict[str, Any], value: int, replacement: int | None
) -> dict[str, Any] | None:
    """The spec without value ``value`` (an input or an op's result): its uses read
    ``replacement`` instead (None: it must be unused); later values are renumbered."""

    def renumber(v: int) -> int | None:
        if v == value:
            return replacement if replacement is None else renumber(replacement)
        return v - 1 if v > value else v

    inputs = spec["inputs"]
    ops = ops_without(spec["ops"], inputs, value, _operand_slots, renumber)
    if ops is None:
        return None
    outputs = []
    for out in spec["outputs"]:
        mapped = renumber(out)
        if mapped is None:
            return None
        outputs.append(mapped)
    return {
        **spec,
        "inputs": inputs - (value < inputs),
        "ops": ops,
        "outputs": sorted(set(outputs)),
    }


def _operand_slots(op: list[Any]) -> tuple[int, ...]:
    return OPERAND_SLOTS[op[0]]


def ops_without(
    ops: list[list[Any]],
    first_op_value: int,
    value: int,
    slots: Callable[[list[Any]], Sequence[int]],
    renumber: Callable[[int], int | None],
) -> list[list[Any]] | None:
    """A graph spec's ops without the one making ``value`` (op j makes value
    ``first_op_value + j``), each operand (at ``slots(op)``) mapped through ``renumber``; None if
    ``renumber`` maps one to None (a value that must be unused is used)."""
    out = []
    for j, op in enumerate(ops):
        if first_op_value + j == value:
            continue
        new = list(op)
        for slot in slots(op):
            mapped = renumber(op[slot])
            if mapped is None:
                return None
            new[slot] = mapped
        out.append(new)
    return out


# ---- the reproduction file ----------------------------------------------------------------------


def reproduction(
    spec: dict[str, Any], failures: list[dict[str, str]], where: str, config: str
) -> str:
    """A Python file that builds the case as a readable kernel and runs its checks."""
    shapes = value_shapes(spec)
    names = [f"x{i}" for i in range(spec["inputs"])]
    body = [f"    v{i} = lang.load({n})" for i, n in enumerate(names)]
    dtype = spec["dtype"]
    for j, op in enumerate(spec["ops"]):
        v = spec["inputs"] + j
        body.append(f"    v{v} = lang.ndarray({shapes[v]}, {dtype!r}, lang.sbuf)")
        body.extend(_op_lines(op, v))
    outs = []
    for i, index in enumerate(spec["outputs"]):
        body.append(
            f"    out{i} = lang.ndarray({shapes[index]}, {dtype!r}, lang.hbm, name='out{i}')"
        )
        body.append(f"    lang.store(out{i}, v{index})")
        outs.append(f"out{i}")
    found = "\n".join(f"#   {f['check']}: {f['message']}" for f in failures)
    return f'''"""A case hwsim fuzz found failing ({where}), shrunk; run it: python THIS_FILE.

It builds the kernel below, runs it on {config} and runs every fuzz check on it (numerics
against NumPy, determinism, races, timing invariants); it prints what fails and exits 1 while
anything does. ``SPEC`` is the same case as data (``hwsim.fuzz.spec``); the checks build it from
there, through the same ISA calls as the kernel below.
"""
# Failures when it was found:
{found}

from hwsim import lang
from hwsim.lang import isa as nisa

SPEC = {spec!r}
CONFIG = {config!r}


@lang.kernel
def case({", ".join(names)}):
{chr(10).join(body)}
    return ({", ".join(outs)},)


if __name__ == "__main__":
    import sys

    from hwsim.fuzz.checks import check_case
    from hwsim.fuzz.interpret import inputs_of

    result = case(*inputs_of(SPEC), config=CONFIG)
    print(f"simulated {{result.summary.total_ns:,.1f}} ns")
    failures = check_case(SPEC, CONFIG)
    for failure in failures:
        print(f"FAIL {{failure.check}}: {{failure.message}}")
    print("no check fails" if not failures else f"{{len(failures)}} check(s) fail")
    sys.exit(1 if failures else 0)
'''


def _op_lines(op: list[Any], v: int) -> list[str]:
    kind = op[0]
    if kind == "tt":
        return [
            f"    nisa.tensor_tensor(v{v}, v{op[2]}, v{op[3]}, lang.AluOp.{op[1]}, "
            f"engine={op[4]!r})"
        ]
    if kind == "ts":
        return [
            f"    nisa.tensor_scalar(v{v}, v{op[2]}, lang.AluOp.{op[1]}, {float(op[3])!r}, "
            f"engine={op[4]!r})"
        ]
    if kind == "act":
        return [
            f"    nisa.activation(v{v}, nisa.ActivationFunction.{op[1]}, v{op[2]}, "
            f"scale={float(op[3])!r})"
        ]
    if kind == "copy":
        return [f"    nisa.tensor_copy(v{v}, v{op[1]}, engine={op[2]!r})"]
    if kind == "reduce":
        return [f"    nisa.tensor_reduce(v{v}, nisa.ReduceOp.{op[1]}, v{op[2]})"]
    if kind == "bcast":
        return [f"    nisa.tensor_scalar(v{v}, v{op[2]}, lang.AluOp.{op[1]}, v{op[3]})"]
    return [
        f"    acc{v} = lang.ndarray(v{v}.shape, 'fp32', lang.psum)",
        f"    nisa.nc_matmul(acc{v}, v{op[1]}, v{op[2]})",
        f"    nisa.tensor_copy(v{v}, acc{v})",
    ]
