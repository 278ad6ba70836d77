"""``hwsim nki FILE.py:KERNEL``: run an unmodified NKI kernel file on the simulator.

The file is imported with ``hwsim.nki.install()`` active (so ``import nki`` and
``neuronxcc.nki`` work). Its inputs come from, in order:

1. a function ``KERNEL_inputs()`` in the file, returning the arguments (a tuple, a dict by
   parameter name, or one array), as ``hwsim run FILE.py:KERNEL`` takes them
   (``hwsim.workloads.pyfile.kernel_helpers``);
2. ``--shape NAME=128x512[:dtype]`` flags (seeded random data);
3. ``nki.typing`` annotations with shapes (``a: nt.tensor[(128, 512), nl.float32]``).

With ``KERNEL_reference(*inputs)`` in the file (returning the expected output or a tuple), the
outputs are compared and the max error printed. Prints the latency; writes the trace to ``--out``.
"""

from __future__ import annotations

import argparse
import inspect
import math
from pathlib import Path
from typing import Any

import numpy as np

from hwsim.errors import HwsimError
from hwsim.units import time_text
from hwsim.workloads.pyfile import call_inputs, import_python_file, inputs_hint, kernel_helpers
from hwsim.workloads.registry import NumericsVerdict


def register(commands: argparse._SubParsersAction) -> None:
    from hwsim.cli.main import add_config_arguments, add_kernel_arguments, add_out_argument
    from hwsim.schedule import SCHEDULES

    parser = commands.add_parser("nki", help="run an NKI kernel file: FILE.py:KERNEL")
    parser.add_argument("target", help="FILE.py:KERNEL")
    add_config_arguments(parser)
    add_out_argument(parser, "directory for trace, summary, tables and plots")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--timing-only", action="store_true", help="skip numerics (for sweeps)")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=AxB[:dtype]")
    parser.add_argument("--force", action="store_true", help="write into a non-empty --out")
    parser.add_argument(
        "--schedule",
        choices=SCHEDULES,
        default=None,
        help="instruction order: program (as written), list, best (default: $HWSIM_SCHEDULE, "
        "else the NKI compiler's: best, reordered and checked by simulation)",
    )
    parser.add_argument("--force-install", action="store_true",
                        help="shadow an installed real nki/neuronxcc in this process")  # fmt: skip
    add_kernel_arguments(parser)  # the tracing watchdog's limits and --no-initcheck
    parser.set_defaults(handler=main)


def load_kernel_file(path: Path, name: str, force: bool = False) -> tuple[Any, Any]:
    """(the kernel, the file's module), importing it with the nki aliases installed."""
    from hwsim.nki import install

    if not path.is_file():
        raise HwsimError(f"{path}: no such file")
    install(force=force)
    module = import_python_file(path, "hwsim_nki_file", str(path))
    kernel = getattr(module, name, None)
    if kernel is None:
        found = [k for k, v in vars(module).items() if type(v).__name__ == "NkiKernel"]
        raise HwsimError(f"{path}: no kernel '{name}'; NKI kernels in the file: {found}")
    return kernel, module


#: dtypes ``--shape`` takes (numpy names and hwsim's short names).
SHAPE_DTYPES = ("float32", "fp32", "float16", "fp16", "bfloat16", "bf16")
#: Largest tensor ``--shape`` makes, in elements (4 GiB of fp32): beyond it, a typo.
MAX_SHAPE_ELEMENTS = 1 << 30


def _dims(flag: str, text: str) -> tuple[tuple[int, ...], str]:
    """``128x512[:dtype]`` of ``--shape NAME=...``: ASCII digits only, each dim >= 1, bounded."""
    shape, _, dtype = text.partition(":")
    parts = shape.split("x")
    if not all(p.isascii() and p.isdigit() and len(p) <= 9 for p in parts):
        raise HwsimError(f"--shape {flag}: '{shape}' is not AxB... of ASCII digits (e.g. 128x512)")
    dims = tuple(int(p) for p in parts)
    if min(dims) < 1 or math.prod(dims) > MAX_SHAPE_ELEMENTS:
        raise HwsimError(
            f"--shape {flag}: {shape} must have every dim >= 1 and at most "
            f"{MAX_SHAPE_ELEMENTS:,} elements"
        )
    dtype = dtype or "float32"
    if dtype not in SHAPE_DTYPES:
        raise HwsimError(f"--shape {flag}: unknown dtype '{dtype}'; use one of {SHAPE_DTYPES}")
    return dims, dtype


def _given_shapes(kernel: Any, name: str, shapes: list[str]) -> dict[str, tuple]:
    """Every ``--shape`` flag checked: NAME=DIMS of a parameter of the kernel."""
    params = list(inspect.signature(kernel.fn).parameters)
    given: dict[str, tuple] = {}
    for flag in shapes:
        param, sep, text = flag.partition("=")
        if not sep or param not in params:
            raise HwsimError(
                f"--shape {flag}: write NAME=AxB[:dtype] with NAME a parameter of {name} "
                f"({', '.join(params)})"
            )
        given[param] = _dims(flag, text)
    return given


def _random(shape: tuple[int, ...], dtype: Any, rng: np.random.Generator) -> np.ndarray:
    name = str(dtype)
    if name in ("bf16", "bfloat16"):
        import ml_dtypes

        return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
    np_name = {"fp32": "float32", "fp16": "float16"}.get(name, name)
    return rng.standard_normal(shape).astype(np_name)


def kernel_inputs(kernel: Any, module: Any, name: str, shapes: list[str]) -> tuple[Any, ...]:
    """The kernel's arguments by the convention in the module docstring."""
    given = _given_shapes(kernel, name, shapes)
    inputs, _ = kernel_helpers(vars(module), name, name)
    if inputs is not None:
        if given:
            raise HwsimError(
                f"--shape: the file makes {name}'s inputs ({name}_inputs()); drop --shape, or "
                "run a kernel without an inputs function"
            )
        made, by_name = call_inputs(inputs, name, name)
        params = list(inspect.signature(kernel.fn).parameters)
        return made + tuple(by_name[p] for p in params if p in by_name)
    rng = np.random.default_rng(0)
    args = []
    for param in inspect.signature(kernel.fn).parameters.values():
        if param.name in given:
            shape, dtype = given[param.name]
            args.append(_random(shape, dtype, rng))
        elif getattr(param.annotation, "shape", None):
            ann = param.annotation
            args.append(_random(tuple(ann.shape), ann.dtype or "float32", rng))
        elif param.default is not inspect.Parameter.empty:
            break
        else:
            raise HwsimError(
                f"kernel {name}: no inputs for '{param.name}': give the file a {name}_inputs() "
                f"function, pass --shape {param.name}=128x512:float32, or annotate it with "
                f"nki.typing.tensor[(shape), dtype]{inputs_hint(vars(module), name)}"
            )
    return tuple(args)


def main(args: argparse.Namespace) -> int:
    from hwsim.errors import InitCheckError
    from hwsim.lang.watchdog import limits_within
    from hwsim.nki.kernel import run
    from hwsim.workloads.cli_run import INITCHECK_HINT

    file_text, _, name = args.target.rpartition(":")
    if not file_text:
        raise HwsimError(f"'{args.target}': write FILE.py:KERNEL")
    if args.out is not None:
        from hwsim.outputs_guard import check_output_folder

        check_output_folder(args.out, force=args.force)
    kernel, module = load_kernel_file(Path(file_text), name, args.force_install)
    inputs = kernel_inputs(kernel, module, name, args.shape)
    try:  # an inputs function returning too few (or too many) arrays: one line, not a traceback
        inspect.signature(kernel.fn).bind(*inputs)
    except TypeError as exc:
        raise HwsimError(
            f"{args.target}: {len(inputs)} inputs do not fit kernel {name}: {exc}"
        ) from None
    config = _config(args)
    try:
        with limits_within(args.max_instructions, args.trace_timeout):  # the tracing watchdog's
            initcheck = False if args.no_initcheck else None  # None: on (a front door)
            result = run(
                kernel,
                *inputs,
                config=config,
                numerics=not args.timing_only,
                initcheck=initcheck,
                schedule=args.schedule,
            )
    except InitCheckError as exc:  # on by default here: say how to run without it
        raise InitCheckError(f"{exc}; {INITCHECK_HINT}", exc.findings) from exc
    ok = _check_numerics(result, module, name, inputs, args.timing_only)
    if args.out is not None or not args.json:
        from hwsim.trace.outputs import default_run_dir

        out = args.out or default_run_dir(name)
        result.write(out, force=args.force)
        result.summary.out_dir = str(out)
    if args.json:
        from hwsim import strict_json

        print(strict_json.dumps(result.summary.to_dict(), default=str))
        return 0 if ok else 1
    latency = time_text(result.latency_ns)
    print(f"{name}: latency {latency} on {getattr(config, 'name', args.config)}")
    print(f"bottleneck: {result.summary.bottleneck}")
    print(f"instruction order: {_order_text(result.program)}")
    for note in result.notes:
        print(f"note: {note}")
    if result.summary.numerics_ok is not None:
        print(f"numerics: {result.summary.numerics_text()}")
    print(f"wrote {result.summary.out_dir}")
    return 0 if ok else 1


def _order_text(program: Any) -> str:
    """How the run's instructions were ordered (``hwsim.schedule``)."""
    policy = program.meta.get("schedule", "program")
    return {
        "program": "program order (as written)",
        "list": "list scheduled (the cost model's estimate)",
        "best": "scheduled as the NKI compiler does (the fastest of program order and the list "
        "schedules, simulated; --schedule program for the order as written)",
    }.get(policy, policy)


#: Error allowed against ``KERNEL_reference``, relative to the largest expected value.
REFERENCE_RTOL = 1e-2


def _expected(module: Any, name: str, inputs: tuple[Any, ...]) -> tuple[np.ndarray, ...] | None:
    _, reference = kernel_helpers(vars(module), name, name)
    if reference is None:
        return None
    expected = reference(*[np.asarray(a, np.float64) for a in inputs])
    return expected if isinstance(expected, tuple) else (expected,)


def _check_numerics(
    result: Any, module: Any, name: str, inputs: tuple[Any, ...], timing_only: bool
) -> bool:
    """Compare against ``KERNEL_reference`` (when the file has one and numerics ran); the
    verdict goes into the run's summary. Returns whether it passed (True when not checked)."""
    expected = None if timing_only else _expected(module, name, inputs)
    if expected is None:
        return True
    err = max(
        float(np.max(np.abs(o.astype(np.float64) - e)))
        for o, e in zip(result.outputs, expected, strict=True)
    )
    tolerance = _scaled_tolerance(expected)
    result.summary.record_numerics(NumericsVerdict(err, err <= tolerance, tolerance))
    return err <= tolerance


def _scaled_tolerance(expected: tuple[np.ndarray, ...]) -> float:
    return REFERENCE_RTOL * (max(float(np.max(np.abs(e))) for e in expected) or 1.0)


def _config(args: argparse.Namespace) -> Any:
    from hwsim.config import load_config

    return load_config(args.config, args.overrides)
