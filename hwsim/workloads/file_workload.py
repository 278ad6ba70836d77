"""``FILE.py:NAME`` workloads: what NAME may be in a user's file, and the workload each makes.

NAME is one of:

- a ``Workload``, or a ``hwsim.library.workloads.LibraryWorkload``: used as it is;
- a kernel (``@hwsim.lang.kernel``). Its arguments come from ``NAME_inputs()`` in the same file,
  which returns them as a tuple (positional), a dict (by parameter name) or one array; without
  it, every parameter needs a default, and ``TensorSpec(shape, dtype)`` defaults become seeded
  random inputs (standard normal floats, small integers), built from shapes alone when the run
  is timing-only. If the file defines ``NAME_reference(*args, **kwargs)``, it gets the same
  arguments (arrays in fp64) and returns the expected output (or a tuple, one per output in
  the order the kernel returns them); the run then reports ``max_abs_err`` and
  ``numerics_ok``, with a tolerance relative to the largest expected value that follows the
  lowest-precision float dtype among the kernel's inputs and outputs (``relative_tolerance``);
  with no float among them the output must match exactly; an expected NaN or infinity is
  matched only by the same value (``hwsim.workloads.numerics``);
- a function of one argument, ``config -> Program``;
- a function of no arguments returning a torch model and example inputs, ``(model, args)`` or
  ``(model, args, kwargs)``. hwsim never imports torch: the workload kind ``torch`` comes from the
  ``hwsim.workloads`` entry point group (the bridge registers it), loaded only here.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from hwsim.config.schema import HardwareConfig
from hwsim.dtypes import DType
from hwsim.dtypes import dtype as lookup_dtype
from hwsim.errors import HwsimError, WorkloadError
from hwsim.lang import Kernel, TensorSpec
from hwsim.library.workloads import LibraryWorkload
from hwsim.program import Program
from hwsim.workloads.bounds import check_hbm_fits
from hwsim.workloads.numerics import abs_errors
from hwsim.workloads.pyfile import (
    USER_CODE_ERRORS,
    call_inputs,
    import_python_file,
    inputs_hint,
    kernel_helpers,
    lookup_attribute,
    user_code_failed,
)
from hwsim.workloads.registry import NumericsVerdict, Workload, combined_verdict

#: Entry-point group of workload kinds other packages add; ``torch`` runs model factories.
KIND_GROUP = "hwsim.workloads"
MODEL_KIND = "torch"
#: Seed of the random inputs made for ``TensorSpec`` defaults.
SEED = 0
#: Relative tolerance floor (fp32 accumulation over long reductions) and roundings allowed.
MIN_RELATIVE_TOLERANCE = 1e-4
ROUNDINGS_ALLOWED = 4


def file_workload(path: Path, name: str, text: str) -> Workload:
    """The workload NAME defines in the file at ``path`` (``text``: as the user spelled it)."""
    module = import_python_file(path, "hwsim_workload_file", text)
    found = lookup_attribute(module, name, path, text)
    if isinstance(found, Workload):
        return found
    if isinstance(found, LibraryWorkload):
        return found.workload()
    if isinstance(found, Kernel):
        return kernel_workload(found, vars(module), name, text)
    if isinstance(found, type) or not callable(found):
        raise WorkloadError(
            f"{text}: '{name}' (type {type(found).__name__}) is not a workload; expected a kernel "
            "(@hwsim.lang.kernel), a Workload, a function config -> Program, or a function "
            "returning (model, args)"
        )
    required = _required_parameters(found)
    if len(required) == 1:
        return Workload(text, f"{name} from {path.name}", _program_builder(found, name, text))
    if not required:
        return _model_workload(found, text)
    raise WorkloadError(
        f"{text}: {name}() takes {len(required)} arguments ({', '.join(required)}); expected one "
        "(a config, returning a Program) or none (returning a torch model and example inputs)"
    )


def _program_builder(fn: Callable[[HardwareConfig], Any], name: str, text: str) -> Any:
    """``fn`` as a workload's build: what it raises or returns is checked."""

    def build(config: HardwareConfig) -> Program:
        try:
            made = fn(config)
        except HwsimError:
            raise
        except USER_CODE_ERRORS as exc:  # user code: any exception, chained for --debug
            raise user_code_failed(exc, f"{name}(config)", text) from exc
        if not isinstance(made, Program):
            raise WorkloadError(
                f"{text}: {name}(config) returned {type(made).__name__}; expected a Program "
                "(what a kernel's build(...).program is)"
            )
        return made

    return build


def _required_parameters(fn: Callable[..., Any]) -> list[str]:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ["?"]  # no signature to read: neither convention can be told apart
    return [
        p.name
        for p in parameters
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def _model_workload(factory: Callable[[], Any], text: str) -> Workload:
    """A torch model factory as a workload, through the ``torch`` workload kind's plugin."""
    point = next((p for p in entry_points(group=KIND_GROUP) if p.name == MODEL_KIND), None)
    if point is None:
        raise WorkloadError(
            f"{text}: takes no arguments, so it is a torch model factory; running one needs "
            f"hwsim's PyTorch bridge (entry point {KIND_GROUP}: {MODEL_KIND}), which is not "
            "installed: install hwsim with torch"
        )
    try:
        make = point.load()
    except ImportError as exc:  # the bridge is installed, torch is not
        raise WorkloadError(
            f"{text}: a torch model factory needs torch, which does not import ({exc})"
        ) from exc
    made = make(factory, text)
    if not isinstance(made, Workload):
        raise WorkloadError(
            f"{text}: the '{MODEL_KIND}' workload kind ({point.value}) returned "
            f"{type(made).__name__}, not a Workload"
        )
    return made


# ---- kernels -----------------------------------------------------------------------------------


def kernel_workload(kernel: Kernel, helpers: dict[str, Any], name: str, text: str) -> Workload:
    """A kernel as a workload: arguments from ``NAME_inputs`` or its ``TensorSpec`` defaults, and
    a check against ``NAME_reference`` if ``helpers`` (the kernel's module) has one."""
    inputs, reference = kernel_helpers(helpers, name, text)
    specs: dict[str, TensorSpec] = {}
    if inputs is None:
        specs = _tensor_spec_defaults(kernel, name, text, inputs_hint(helpers, name))
        make_arguments = functools.partial(_random_arguments, specs)
    else:
        make_arguments = functools.partial(call_inputs, inputs, name, text)
    arguments = functools.cache(make_arguments)
    output_names: list[str] = []

    def build(config: HardwareConfig) -> Program:
        if specs:  # the random inputs are made only once they are known to fit
            check_hbm_fits(_spec_bytes(specs), config, text)
        args, kwargs = arguments()
        return _build(kernel, config, args, kwargs, output_names, text)

    def build_timing(config: HardwareConfig) -> Program:
        check_hbm_fits(_spec_bytes(specs), config, text)
        return _build(kernel, config, (), dict(specs), output_names, text)

    def check(outputs: dict[str, np.ndarray]) -> NumericsVerdict:
        assert reference is not None
        args, kwargs = arguments()
        return _compare(reference, args, kwargs, [outputs.get(n) for n in output_names], text)

    return Workload(
        text,
        f"kernel {kernel.name}" + (f" checked against {name}_reference" if reference else ""),
        build,
        check if reference is not None else None,
        build_timing if specs else None,
        _spec_bytes(specs) if specs else None,
    )


def _tensor_spec_defaults(
    kernel: Kernel, name: str, text: str, hint: str = ""
) -> dict[str, TensorSpec]:
    specs = {}
    for param in kernel.signature.parameters.values():
        if param.default is param.empty:
            raise WorkloadError(
                f"{text}: kernel parameter '{param.name}' has no value: define {name}_inputs() "
                "in the file, returning the kernel's arguments (a tuple, or a dict by name), or "
                f"give '{param.name}' a TensorSpec(shape, dtype) default{hint}"
            )
        if isinstance(param.default, TensorSpec):
            spec = param.default
            shape = tuple(spec.shape)
            if not shape or not all(isinstance(n, int) and n >= 1 for n in shape):
                raise WorkloadError(
                    f"{text}: parameter '{param.name}': TensorSpec shape {spec.shape} must be "
                    "positive integers"
                )
            try:
                lookup_dtype(spec.dtype)
            except HwsimError as exc:
                raise WorkloadError(f"{text}: parameter '{param.name}': {exc}") from None
            specs[param.name] = spec
    return specs


def _spec_bytes(specs: dict[str, TensorSpec]) -> int:
    """HBM of the TensorSpec inputs (exact integers: a shape may be too large for int64)."""
    return sum(math.prod(s.shape) * lookup_dtype(s.dtype).itemsize for s in specs.values())


def _random_arguments(specs: dict[str, TensorSpec]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Seeded random values for the TensorSpec parameters (the others keep their defaults)."""
    rng = np.random.default_rng(SEED)
    return (), {param: _random(rng, spec) for param, spec in specs.items()}


def _random(rng: np.random.Generator, spec: TensorSpec) -> np.ndarray:
    dt: DType = lookup_dtype(spec.dtype)
    shape = tuple(spec.shape)
    if dt.is_float:
        return rng.standard_normal(shape, dtype=np.float32).astype(dt.numpy)
    low = -8 if dt.is_signed_int else 0
    high = 8 if dt.is_signed_int else 16
    # drawn in the input's own dtype: int64 first would take 8 bytes an element (16 GiB for a
    # 2^31-element int8 input) before the cast
    return rng.integers(low, high, size=shape, dtype=np.dtype(dt.numpy))


def _build(
    kernel: Kernel,
    config: HardwareConfig,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    output_names: list[str],
    text: str,
) -> Program:
    try:
        kernel.signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise WorkloadError(f"{text}: the inputs do not fit kernel {kernel.name}: {exc}") from None
    try:
        built = kernel.build(*args, config=config, **kwargs)
    except HwsimError:
        raise
    except USER_CODE_ERRORS as exc:  # the kernel's own Python: any exception, chained for --debug
        raise user_code_failed(exc, f"kernel {kernel.name}", text) from exc
    if not built.outputs:  # nothing would be checked or shown: a forgotten ``return out``
        raise WorkloadError(
            f"{text}: kernel {kernel.name} returned nothing; a kernel returns the HBM tensors it "
            "writes (return out, or a tuple of them)"
        )
    output_names[:] = built.outputs
    return built.program


def _compare(
    reference: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    got: list[np.ndarray | None],
    text: str,
) -> NumericsVerdict:
    """The verdict over the outputs: each within ``relative_tolerance`` of its largest value."""
    try:
        expected = reference(*(_f64(a) for a in args), **{k: _f64(v) for k, v in kwargs.items()})
    except USER_CODE_ERRORS as exc:  # user code: any exception, chained for --debug
        raise user_code_failed(exc, "the reference", text) from exc
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    if len(expected) != len(got):
        raise WorkloadError(
            f"{text}: the reference returned {len(expected)} values, the kernel {len(got)} outputs"
        )
    arrays = [a for a in (*args, *kwargs.values()) if isinstance(a, np.ndarray)]
    verdicts = []
    for actual, want in zip(got, expected, strict=True):
        want = np.asarray(want, dtype=np.float64)
        if actual is None or actual.shape != want.shape:
            return NumericsVerdict(float("inf"), False, 0.0)
        dtypes = [a.dtype for a in (*arrays, actual)]
        err = float(abs_errors(actual, want).max()) if want.size else 0.0
        finite = np.abs(want[np.isfinite(want)])
        scale = float(finite.max()) if finite.size else 0.0
        # integers from integers are exact: a sum saturated at int32's limit is off by a
        # fraction of its size that no relative tolerance should forgive
        exact = not any(_is_float(d) for d in dtypes)
        allowed = 0.0 if exact else relative_tolerance(dtypes) * scale
        verdicts.append(NumericsVerdict(err, err <= allowed, allowed))
    return combined_verdict(verdicts)


def relative_tolerance(dtypes: list[np.dtype]) -> float:
    """Allowed max |error| / max |expected|: ``ROUNDINGS_ALLOWED`` machine epsilons of the
    coarsest float dtype among ``dtypes`` (bf16: 4 x 2^-7 = 3.1%, about the library's 3%), at
    least ``MIN_RELATIVE_TOLERANCE`` (fp32 accumulation over long reductions)."""
    eps = [float(ml_dtypes.finfo(d).eps) for d in dtypes if _is_float(d)]
    return max([MIN_RELATIVE_TOLERANCE, *(ROUNDINGS_ALLOWED * e for e in eps)])


def _is_float(numpy_dtype: np.dtype) -> bool:
    try:
        ml_dtypes.finfo(numpy_dtype)
    except ValueError:
        return False
    return True


def _f64(value: Any) -> Any:
    return value.astype(np.float64) if isinstance(value, np.ndarray) else value
