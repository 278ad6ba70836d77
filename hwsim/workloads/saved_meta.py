"""The entries of a saved program's ``meta`` that hwsim reads, and the rules a file's must follow.

Checked on save and on load (``check_meta``), so a value the compatibility check, the numerics
check or the trace would trip over is a one-line error naming its path under ``meta``:

- ``lowered_for``: ``config``, ``config_hash``, ``generation`` (strings), ``geometry`` (a subset
  of ``GEOMETRY_FIELDS`` -> int) and ``requires`` (a subset of ``MINIMUM_FIELDS`` -> int);
- ``expected_outputs``: per output HBM tensor ``values`` (a numeric array), ``rtol`` and
  ``atol`` (finite numbers >= 0), and optionally ``shape`` (ints) and ``dtype`` (a string);
- ``workload`` (a string), ``model_flops`` (an int >= 0), ``dtype`` (a dtype name), read by the
  trace's summary; ``host_events`` belongs to a compiled run's trace, not to a saved program.

Other entries (``source``, ``precision``, ``ops``, ``export_check``...) are informational.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hwsim.dtypes import DTYPES
from hwsim.program import Program
from hwsim.workloads.typed_json import FieldError, describe

#: Config fields a lowering tiles by (partition counts, PE array, matmul free sizes, PSUM banks
#: and their size): a config that differs in one needs a program lowered for it.
GEOMETRY_FIELDS = (
    "sbuf.partitions",
    "psum.partitions",
    "psum.banks",
    "psum.bytes_per_partition",
    "tensor_engine.rows",
    "tensor_engine.cols",
    "tensor_engine.stationary_free_max",
    "tensor_engine.moving_free_max",
)
#: Config fields that only need to be large enough: the program's need is recorded at export.
MINIMUM_FIELDS = ("sbuf.bytes_per_partition", "dma.queues_per_engine")

LOWERED_FOR = "lowered_for"
EXPECTED_OUTPUTS = "expected_outputs"


def check_meta(program: Program) -> None:
    """Raise ``FieldError`` (path under ``meta``) at the first entry breaking the rules above."""
    meta = program.meta
    try:
        _check_summary_entries(meta)
        if LOWERED_FOR in meta:
            _inside(LOWERED_FOR, _check_lowered_for, meta[LOWERED_FOR])
        if EXPECTED_OUTPUTS in meta:
            _inside(EXPECTED_OUTPUTS, _check_expected, meta[EXPECTED_OUTPUTS], program)
    except FieldError as exc:
        raise exc.inside("meta") from None


def _check_summary_entries(meta: dict[str, Any]) -> None:
    if "host_events" in meta:
        raise FieldError(
            "CPU events belong to a compiled run's trace, not to a saved program"
        ).inside("host_events")
    if "workload" in meta and not isinstance(meta["workload"], str):
        raise FieldError(f"expected a string, got {describe(meta['workload'])}").inside("workload")
    flops = meta.get("model_flops")
    if "model_flops" in meta and (type(flops) is not int or flops < 0):
        raise FieldError(f"expected an int >= 0, got {describe(flops)}").inside("model_flops")
    if "dtype" in meta and not (isinstance(meta["dtype"], str) and meta["dtype"] in DTYPES):
        raise FieldError(
            f"unknown dtype {describe(meta['dtype'])} (valid: {', '.join(DTYPES)})"
        ).inside("dtype")


def _check_lowered_for(facts: Any) -> None:
    _object(facts, {"config", "config_hash", "generation", "geometry", "requires"})
    for key in ("config", "config_hash", "generation"):
        if not isinstance(facts[key], str):
            raise FieldError(f"expected a string, got {describe(facts[key])}").inside(key)
    _inside("geometry", _int_fields, facts["geometry"], GEOMETRY_FIELDS)
    _inside("requires", _int_fields, facts["requires"], MINIMUM_FIELDS)


def _int_fields(values: Any, allowed: tuple[str, ...]) -> None:
    if not isinstance(values, dict):
        raise FieldError(f"expected an object, got {describe(values)}")
    for key, value in values.items():
        if key not in allowed:
            raise FieldError(f"not a config field this check knows ({', '.join(allowed)})").inside(
                key
            )
        if type(value) is not int:
            raise FieldError(f"expected an int, got {describe(value)}").inside(key)


def _check_expected(expected: Any, program: Program) -> None:
    if not isinstance(expected, dict):
        raise FieldError(f"expected an object, got {describe(expected)}")
    for name, want in expected.items():
        _inside(name, _check_one_expected, want, name, program)


def _check_one_expected(want: Any, name: str, program: Program) -> None:
    decl = program.hbm.get(name)
    if decl is None or decl.kind != "output":
        outputs = [d.name for d in program.hbm.values() if d.kind == "output"]
        raise FieldError(
            f"not an output HBM tensor of the program (outputs: {', '.join(outputs) or 'none'})"
        )
    _object(want, {"values", "rtol", "atol"}, optional={"shape", "dtype"})
    values = want["values"]
    if not isinstance(values, np.ndarray) or values.dtype.kind not in "biufV":
        raise FieldError(f"expected a numeric array, got {type(values).__name__}").inside("values")
    for key in ("rtol", "atol"):
        tolerance = want[key]
        if type(tolerance) not in (int, float) or not math.isfinite(tolerance) or tolerance < 0:
            raise FieldError(f"expected a finite number >= 0, got {describe(tolerance)}").inside(
                key
            )
    shape = want.get("shape", ())
    if not isinstance(shape, tuple | list) or not all(type(n) is int and n >= 0 for n in shape):
        raise FieldError(f"expected a list of ints >= 0, got {describe(shape)}").inside("shape")
    if not isinstance(want.get("dtype", ""), str):
        raise FieldError(f"expected a string, got {describe(want['dtype'])}").inside("dtype")
    _check_expected_size(want, decl.shape)


def _check_expected_size(want: dict[str, Any], tensor_shape: tuple[int, ...]) -> None:
    """The values are as many as the shape says (when it is given) and fit the output tensor,
    which they fill unless a shape says fewer (an output padded in HBM): a contradiction would
    compare part of the output, or other elements than meant, and call it OK."""
    count, capacity = int(want["values"].size), math.prod(tensor_shape)
    if "shape" in want and math.prod(want["shape"]) != count:
        raise FieldError(
            f"shape {list(want['shape'])} holds {math.prod(want['shape'])} values, but values "
            f"has {count}"
        ).inside("shape")
    if count > capacity or ("shape" not in want and count != capacity):
        raise FieldError(
            f"{count} values for an output tensor of shape {list(tensor_shape)} ({capacity} "
            "elements)"
        ).inside("values")


def _object(
    value: Any, required: set[str], optional: frozenset[str] | set[str] = frozenset()
) -> None:
    if not isinstance(value, dict):
        raise FieldError(f"expected an object, got {describe(value)}")
    for key in sorted(required - set(value)):
        raise FieldError("missing").inside(key)
    for key in sorted(set(value) - required - set(optional)):
        known = ", ".join(sorted(required | set(optional)))
        raise FieldError(f"unknown key (the keys are {known})").inside(key)


def _inside(key: str, check: Any, value: Any, *args: Any) -> None:
    try:
        check(value, *args)
    except FieldError as exc:
        raise exc.inside(key) from None
