"""A generated kernel case as data, and the generator that draws one.

A case (``spec``) is plain JSON: a dtype, the input shape [P, F], a number of inputs, a list of
ops and which values are outputs. Values are numbered: the first ``inputs`` are the inputs loaded
into SBUF; each op appends one value. Ops (operands are value numbers):

- ``["tt", alu, a, b, engine]``: tensor_tensor (VectorE or GpSimdE) of two same-shape values;
- ``["ts", alu, a, const, engine]``: tensor_scalar with an immediate;
- ``["act", func, a, scale]``: activation on ScalarE, func(a * scale);
- ``["copy", a, engine]``: tensor_copy;
- ``["reduce", op, a]``: tensor_reduce over the free axis -> [P, 1];
- ``["bcast", alu, a, r]``: tensor_scalar of a [P, F] value with a [P, 1] value per partition;
- ``["mm", a, b]``: nc_matmul, a [K, M] (M <= 128) stationary, b [K, N] (N <= 512) moving, into
  PSUM, evacuated to SBUF -> [M, N].

Every choice the generator makes goes through a ``Draw`` (an integer in a range, an element of a
list), so one generator serves two drivers: a seeded NumPy generator (``hwsim fuzz``: case i of
seed s is always the same case) and Hypothesis (the property tests, which shrink through the
same choices). Legality comes from the ISA's rules: partitions <= 128, matmul stationary free
<= 128 and moving free <= 512, the engines each instruction may run on, and values kept in
ranges where every function is defined.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from hwsim.errors import HwsimError

DTYPES = ("fp32", "bf16")
#: ALU ops whose float semantics need no care about domains.
BINARY_ALU = ("add", "subtract", "multiply", "max", "min")
SCALAR_ALU = ("add", "subtract", "multiply", "max", "min")
#: ScalarE functions defined and bounded on the ranges the generator keeps values in.
FUNCTIONS = ("copy", "exp", "tanh", "sigmoid", "relu", "gelu", "silu", "square", "abs")
REDUCE_OPS = ("add", "max", "min")
ENGINES_TT = ("vector", "gpsimd")
ENGINES_TS = ("vector", "gpsimd")
ENGINES_COPY = ("vector", "gpsimd")
OP_KINDS = ("tt", "ts", "act", "copy", "reduce", "bcast", "mm")
#: Largest magnitude a value may reach before growing ops (multiply, exp, square) are avoided.
GROWTH_LIMIT = 8.0
MAX_OPS = 12
SPEC_KEYS = {"dtype", "shape", "inputs", "ops", "outputs"}


class FuzzError(HwsimError):
    """A case that is not a valid case of this generator (a damaged database row, a bad file)."""


class Draw(Protocol):
    def integer(self, low: int, high: int) -> int: ...  # inclusive bounds

    def choice(self, options: Sequence[Any]) -> Any: ...


class NumpyDraw:
    """Choices from a seeded NumPy generator."""

    def __init__(self, seed: int, index: int) -> None:
        import numpy as np

        self.rng = np.random.default_rng([seed, index])

    def integer(self, low: int, high: int) -> int:
        return int(self.rng.integers(low, high + 1))

    def choice(self, options: Sequence[Any]) -> Any:
        return options[int(self.rng.integers(0, len(options)))]


class HypothesisDraw:
    """Choices drawn through Hypothesis (``st.data()``), so that it shrinks failing cases
    through the same choices the generator makes."""

    def __init__(self, data: Any) -> None:
        from hypothesis import strategies

        self.data, self.st = data, strategies

    def integer(self, low: int, high: int) -> int:
        return int(self.data.draw(self.st.integers(low, high)))

    def choice(self, options: Sequence[Any]) -> Any:
        return self.data.draw(self.st.sampled_from(list(options)))


def generate(draw: Draw) -> dict[str, Any]:
    """One random valid case (see the module docstring)."""
    dtype = draw.choice(DTYPES)
    p = draw.choice((1, 2, 16, 32, 64, 96, 128, draw.integer(1, 128)))
    f = draw.choice((1, 8, 64, 128, 200, 512, draw.integer(1, 512)))
    inputs = draw.integer(1, 3)
    shapes: list[tuple[int, int]] = [(p, f)] * inputs
    bounds: list[float] = [2.0] * inputs  # inputs are uniform in [-2, 2]
    ops: list[list[Any]] = []
    for _ in range(draw.integer(1, MAX_OPS)):
        op = _draw_op(draw, shapes, bounds)
        if op is None:
            continue
        spec_op, shape, bound = op
        ops.append(spec_op)
        shapes.append(shape)
        bounds.append(bound)
    last = len(shapes) - 1
    outputs = sorted({last, draw.integer(0, last)})
    return {"dtype": dtype, "shape": [p, f], "inputs": inputs, "ops": ops, "outputs": outputs}


def _draw_op(
    draw: Draw, shapes: list[tuple[int, int]], bounds: list[float]
) -> tuple[list[Any], tuple[int, int], float] | None:
    kind = draw.choice(OP_KINDS)
    a = draw.integer(0, len(shapes) - 1)
    shape, bound = shapes[a], bounds[a]
    if kind == "tt":
        same = [i for i, s in enumerate(shapes) if s == shape]
        b = draw.choice(same)
        op = draw.choice(BINARY_ALU)
        if op == "multiply" and max(bound, bounds[b]) > GROWTH_LIMIT:
            op = "add"
        grown = bound * bounds[b] if op == "multiply" else bound + bounds[b]
        return ["tt", op, a, b, draw.choice(ENGINES_TT)], shape, grown
    if kind == "ts":
        op = draw.choice(SCALAR_ALU)
        const = draw.choice((0.0, 1.0, -1.0, 0.5, 1.5, -0.25))
        grown = bound * abs(const) if op == "multiply" else bound + abs(const)
        return ["ts", op, a, const, draw.choice(ENGINES_TS)], shape, grown
    if kind == "act":
        func = draw.choice(FUNCTIONS)
        if func in ("exp", "square") and bound > GROWTH_LIMIT / 4:
            func = "tanh"
        scale = draw.choice((1.0, 0.5, -1.0))
        return ["act", func, a, scale], shape, _function_bound(func, bound * abs(scale))
    if kind == "copy":
        return ["copy", a, draw.choice(ENGINES_COPY)], shape, bound
    if kind == "reduce":
        op = draw.choice(REDUCE_OPS)
        grown = bound * shape[1] if op == "add" else bound
        return ["reduce", op, a], (shape[0], 1), grown
    if kind == "bcast":
        columns = [i for i, s in enumerate(shapes) if s == (shape[0], 1)]
        if not columns or shape[1] == 1:
            return None
        r = draw.choice(columns)
        op = draw.choice(("add", "subtract", "max"))
        return ["bcast", op, a, r], shape, bound + bounds[r]
    # mm: stationary [K, M <= 128], moving [K, N <= 512] with the same K (partitions)
    if shape[1] > 128:
        return None
    moving = [i for i, s in enumerate(shapes) if s[0] == shape[0] and s[1] <= 512]
    b = draw.choice(moving)
    return ["mm", a, b], (shape[1], shapes[b][1]), bound * bounds[b] * shape[0]


def _function_bound(func: str, bound: float) -> float:
    if func == "exp":
        return math.exp(bound)
    if func in ("tanh", "sigmoid"):
        return 1.0
    if func == "square":
        return bound * bound
    return bound


def value_shapes(spec: dict[str, Any]) -> list[tuple[int, int]]:
    """The shape of every value of a checked spec, in order."""
    p, f = spec["shape"]
    shapes = [(p, f)] * spec["inputs"]
    for op in spec["ops"]:
        kind = op[0]
        if kind in ("tt", "ts", "act", "copy", "bcast"):
            shapes.append(shapes[op[2] if kind in ("tt", "ts", "act", "bcast") else op[1]])
        elif kind == "reduce":
            shapes.append((shapes[op[2]][0], 1))
        else:
            shapes.append((shapes[op[1]][1], shapes[op[2]][1]))
    return shapes


def check_spec(spec: Any) -> dict[str, Any]:
    """``spec`` if it is a valid case (read back from a database or a file), else FuzzError."""
    try:
        _check(spec)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise FuzzError(f"not a valid fuzz case ({type(exc).__name__}: {exc})") from None
    return spec


def _check(spec: Any) -> None:
    if not isinstance(spec, dict) or set(spec) != SPEC_KEYS:
        raise ValueError(f"keys must be {sorted(SPEC_KEYS)}")
    if spec["dtype"] not in DTYPES:
        raise ValueError(f"dtype {spec['dtype']!r}")
    p, f = spec["shape"]
    if not (type(p) is int and type(f) is int and 1 <= p <= 128 and 1 <= f <= 512):
        raise ValueError(f"shape {spec['shape']!r}")
    if not (type(spec["inputs"]) is int and 1 <= spec["inputs"] <= 3):
        raise ValueError("inputs")
    count = spec["inputs"]
    for op in spec["ops"]:
        _check_op(op, count)
        count += 1
    shapes = value_shapes(spec)
    for op in spec["ops"]:
        _check_shapes(op, shapes)
    outputs = spec["outputs"]
    if not outputs or any(type(i) is not int or not 0 <= i < count for i in outputs):
        raise ValueError(f"outputs {outputs!r}")


#: Where each op keeps its operands (value numbers).
OPERAND_SLOTS = {
    "tt": (2, 3),
    "ts": (2,),
    "act": (2,),
    "copy": (1,),
    "reduce": (2,),
    "bcast": (2, 3),
    "mm": (1, 2),
}
_ARITY = {"tt": 5, "ts": 5, "act": 4, "copy": 3, "reduce": 3, "bcast": 4, "mm": 3}


def _check_op(op: Any, count: int) -> None:
    if not isinstance(op, list) or not op or _ARITY.get(op[0]) != len(op):
        raise ValueError(f"op {op!r}")
    kind = op[0]
    for i in OPERAND_SLOTS[kind]:
        if type(op[i]) is not int or not 0 <= op[i] < count:
            raise ValueError(f"op {op!r}: operand {op[i]!r} is not an earlier value")
    allowed = {
        "tt": (BINARY_ALU, ENGINES_TT),
        "ts": (SCALAR_ALU, ENGINES_TS),
        "act": (FUNCTIONS,),
        "copy": (ENGINES_COPY,),
        "reduce": (REDUCE_OPS,),
        "bcast": (BINARY_ALU,),
        "mm": (),
    }[kind]
    named = [op[1]] if kind != "copy" else [op[2]]
    if kind in ("tt", "ts"):
        named.append(op[4])
    for value, options in zip(named, allowed, strict=False):
        if value not in options:
            raise ValueError(f"op {op!r}: {value!r} not one of {options}")
    if kind in ("ts", "act") and not isinstance(op[3], (int, float)):
        raise ValueError(f"op {op!r}: constant {op[3]!r}")


def _check_shapes(op: list[Any], shapes: list[tuple[int, int]]) -> None:
    kind = op[0]
    if kind == "tt" and shapes[op[2]] != shapes[op[3]]:
        raise ValueError(f"op {op!r}: operand shapes differ")
    if kind == "bcast" and shapes[op[3]] != (shapes[op[2]][0], 1):
        raise ValueError(f"op {op!r}: the per-partition operand must be [P, 1]")
    if kind == "mm":
        (k, m), (k2, n) = shapes[op[1]], shapes[op[2]]
        if k != k2 or m > 128 or n > 512:
            raise ValueError(f"op {op!r}: matmul shapes [{k},{m}] x [{k2},{n}]")
