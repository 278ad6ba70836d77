"""A case as a kernel-language kernel, its seeded inputs, and its NumPy reference.

The kernel interprets the spec (no code is generated and run): each input is loaded into SBUF,
each op is one or two ISA calls into a new SBUF tile, each output value is stored to HBM. The
reference computes the same ops in float64 from the dtype-rounded inputs and rounds each value
to the case's dtype, as the hardware's SBUF writes do (engines compute in fp32 [S1]).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from hwsim import lang
from hwsim.fuzz.spec import value_shapes
from hwsim.lang import isa as nisa

NP_DTYPES = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16}
_ERF = np.vectorize(math.erf)


def inputs_of(spec: dict[str, Any], seed: int = 0) -> list[np.ndarray]:
    """The case's input arrays: uniform in [-2, 2], rounded to its dtype."""
    rng = np.random.default_rng(seed)
    p, f = spec["shape"]
    dtype = NP_DTYPES[spec["dtype"]]
    return [rng.uniform(-2.0, 2.0, (p, f)).astype(dtype) for _ in range(spec["inputs"])]


def kernel_of(spec: dict[str, Any]) -> lang.Kernel:
    """The case as a kernel taking its inputs and returning its outputs (in spec order)."""
    names = [f"x{i}" for i in range(spec["inputs"])]

    def body(**arrays: Any) -> Any:
        return _emit(spec, [arrays[n] for n in names])

    import inspect

    body.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    )
    body.__name__ = "fuzz_case"
    return lang.Kernel(body)


def _emit(spec: dict[str, Any], inputs: list[Any]) -> Any:
    dtype = spec["dtype"]
    shapes = value_shapes(spec)
    values = [lang.load(x) for x in inputs]
    for op in spec["ops"]:
        dst = lang.ndarray(shapes[len(values)], dtype, lang.sbuf)
        kind = op[0]
        if kind == "tt":
            nisa.tensor_tensor(dst, values[op[2]], values[op[3]], lang.AluOp[op[1]], engine=op[4])
        elif kind == "ts":
            nisa.tensor_scalar(dst, values[op[2]], lang.AluOp[op[1]], float(op[3]), engine=op[4])
        elif kind == "act":
            func = nisa.ActivationFunction[op[1]]
            nisa.activation(dst, func, values[op[2]], scale=float(op[3]))
        elif kind == "copy":
            nisa.tensor_copy(dst, values[op[1]], engine=op[2])
        elif kind == "reduce":
            nisa.tensor_reduce(dst, nisa.ReduceOp[op[1]], values[op[2]])
        elif kind == "bcast":
            nisa.tensor_scalar(dst, values[op[2]], lang.AluOp[op[1]], values[op[3]])
        else:
            acc = lang.ndarray(shapes[len(values)], "fp32", lang.psum)
            nisa.nc_matmul(acc, values[op[1]], values[op[2]])
            nisa.tensor_copy(dst, acc)
        values.append(dst)
    outs = []
    for i, index in enumerate(spec["outputs"]):
        out = lang.ndarray(shapes[index], dtype, lang.hbm, name=f"out{i}")
        lang.store(out, values[index])
        outs.append(out)
    return tuple(outs)


def reference(spec: dict[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The outputs computed in float64, each value rounded to the dtype (module docstring)."""
    dtype = NP_DTYPES[spec["dtype"]]

    def rounded(x: np.ndarray) -> np.ndarray:
        return np.asarray(x, np.float64).astype(np.float32).astype(dtype).astype(np.float64)

    values = [x.astype(np.float64) for x in inputs]
    for op in spec["ops"]:
        kind = op[0]
        if kind == "tt":
            out = ALU[op[1]](values[op[2]], values[op[3]])
        elif kind == "ts":
            out = ALU[op[1]](values[op[2]], float(op[3]))
        elif kind == "act":
            out = FUNC[op[1]](values[op[2]] * float(op[3]))
        elif kind == "copy":
            out = values[op[1]]
        elif kind == "reduce":
            out = REDUCE[op[1]](values[op[2]], axis=1, keepdims=True)
        elif kind == "bcast":
            out = ALU[op[1]](values[op[2]], values[op[3]])
        else:
            out = values[op[1]].T @ values[op[2]]
        values.append(rounded(out))
    return [values[i] for i in spec["outputs"]]


ALU: dict[str, Callable[..., Any]] = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}
REDUCE: dict[str, Callable[..., Any]] = {"add": np.sum, "max": np.max, "min": np.min}
FUNC: dict[str, Callable[..., Any]] = {
    "copy": lambda x: x,
    "exp": np.exp,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": lambda x: 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0))),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "square": np.square,
    "abs": np.abs,
}
