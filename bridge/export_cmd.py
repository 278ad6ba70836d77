"""``hwsim export MODEL -o FILE.hwprog``: lower a torch model once into a saved program.

A plugin command (entry point ``hwsim.commands``: ``export``); hwsim loads it only when it runs,
since it imports torch. MODEL is a built-in (``MODELS``) or ``FILE.py:FACTORY`` where
``FACTORY()`` returns ``(model, args)`` or ``(model, args, kwargs)``. The saved program runs with
``hwsim run FILE.hwprog --config ...`` and as a sweep workload (see docs/export.md).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hwsim.bridge.models import POSITIONS
from hwsim.bridge.precision import AUTO_CAST_MODES, AUTO_CAST_TYPES
from hwsim.bridge.workload import Example, call_factory
from hwsim.cli.main import add_config_arguments, add_out_argument
from hwsim.errors import WorkloadError, shorten
from hwsim.workloads.pyfile import load_attribute

#: Built-in models: name -> (description, builder taking the sequence length).
MODELS: dict[str, tuple[str, Callable[[int], Example]]] = {}

BATCH = 2
DEFAULT_SEQ = 16


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "export",
        help="lower a PyTorch model once into a saved program (FILE.hwprog) for runs and sweeps",
        description="Lower a PyTorch model once into a saved program (FILE.hwprog) that hwsim run"
        " and sweeps simulate on many configs with no torch (docs/export.md).",
    )
    names = ", ".join(MODELS)
    parser.add_argument("model", help=f"a built-in model ({names}) or FILE.py:FACTORY")
    add_out_argument(
        parser, "the program file (.hwprog)", dest="output", old_output_flag=True, required=True
    )
    add_config_arguments(parser)
    parser.add_argument(
        "--auto-cast",
        default="matmult",
        choices=AUTO_CAST_MODES,
        help="which FP32 ops run in --auto-cast-type, as neuronx-cc's --auto-cast (matmult: the "
        "inputs of matmuls and convolutions; all: every op; none: the model's dtypes)",
    )
    parser.add_argument(
        "--auto-cast-type",
        default="bf16",
        choices=AUTO_CAST_TYPES,
        help="the dtype auto-cast casts to (neuronx-cc --auto-cast-type)",
    )
    parser.add_argument("--precision", help=argparse.SUPPRESS)  # retired: one clear error
    parser.add_argument(
        "--seq",
        type=int,
        default=DEFAULT_SEQ,
        help=f"tokens per sequence of the built-in models (batch {BATCH}; default {DEFAULT_SEQ})",
    )
    parser.add_argument(
        "--no-check", action="store_true", help="save without simulating it once to compare"
    )
    parser.add_argument(
        "--passes",
        default="all",
        help="graph passes before lowering: all, none, or comma-separated names "
        "(dce,cse,views,constant_fold,attention,reduction_fusion,conv_bn,fusion,residency; "
        "docs/compiler.md)",
    )
    parser.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    import hwsim  # noqa: F401  (first: one BLAS thread before numpy loads)

    # isort: split
    from hwsim.bridge.export import export_program
    from hwsim.config import load_config

    if args.precision is not None:
        from hwsim.bridge.precision import retired_precision

        raise WorkloadError(str(retired_precision(args.precision)).replace("option ", "flag --"))
    config = load_config(args.config, args.overrides)
    passes = _passes(args.passes)
    _check_output(args.output)  # before the model is built and lowered (seconds to minutes)
    model, inputs, kwargs = example(args.model, args.seq)
    result = export_program(
        model,
        inputs,
        args.output,
        kwargs=kwargs,
        config=config,
        auto_cast=args.auto_cast,
        auto_cast_type=args.auto_cast_type,
        name=args.model if args.model in MODELS else None,
        check=not args.no_check,
        passes=passes,
    )
    print(result.describe())
    return 0


def _passes(text: str) -> str | list[str]:
    """``--passes``: all, none, or names, each checked now (one line naming the unknown one)."""
    from hwsim.bridge.passes import PassSelection

    passes = text if text in ("all", "none") else [n.strip() for n in text.split(",")]
    try:
        PassSelection.parse(passes)
    except ValueError as exc:
        raise WorkloadError(f"--passes {shorten(text)}: {exc}") from None
    return passes


def _check_output(output: str) -> None:
    from hwsim.output_paths import check_output_file
    from hwsim.workloads.saved import PROGRAM_SUFFIX

    if Path(output).suffix != PROGRAM_SUFFIX:
        raise WorkloadError(f"-o {output}: saved programs end in {PROGRAM_SUFFIX}")
    check_output_file(output)


def example(text: str, seq: int = DEFAULT_SEQ) -> Example:
    """The model and example inputs MODEL names (a built-in, or FILE.py:FACTORY)."""
    if text in MODELS:
        if not 1 <= seq <= POSITIONS:
            raise WorkloadError(f"--seq {seq}: the built-in models take 1..{POSITIONS} tokens")
        return MODELS[text][1](seq)
    if ".py:" not in text:
        raise WorkloadError(
            f"unknown model '{text}': use one of {', '.join(MODELS)} or FILE.py:FACTORY"
        )
    file, _, factory = text.rpartition(":")
    made = load_attribute(Path(file), factory, "hwsim_export", text)
    if not callable(made):
        raise WorkloadError(f"{text}: '{factory}' is a {type(made).__name__}, not a function")
    return call_factory(made, text)


# ---- built-in models -----------------------------------------------------------------------------


def _builtin(name: str, description: str) -> Callable[[Callable[[int], Example]], Any]:
    def add(builder: Callable[[int], Example]) -> Callable[[int], Example]:
        MODELS[name] = (description, builder)
        return builder

    return add


@_builtin("tiny-gpt2", "GPT-2, 2 layers, 128 wide, 4 heads, vocabulary 512 (as bridge.demo)")
def _tiny_gpt2(seq: int) -> Example:
    from hwsim.bridge.models import tiny_gpt2, tokens

    return tiny_gpt2(), (tokens(BATCH, seq),), {"use_cache": False}


@_builtin("tiny-llama", "Llama, 2 layers, 128 wide, 4 query / 2 KV heads, vocabulary 512")
def _tiny_llama(seq: int) -> Example:
    from hwsim.bridge.models import tiny_llama, tokens

    return tiny_llama(), (tokens(BATCH, seq),), {"use_cache": False}


@_builtin("tiny-resnet", "stem conv, max pool, 2 ResNet basic blocks, avg pool, Linear; seq x seq")
def _tiny_resnet(seq: int) -> Example:
    import torch

    from hwsim.bridge.models import tiny_resnet

    x = torch.randn(BATCH, 3, seq, seq, generator=torch.Generator().manual_seed(1))
    return tiny_resnet(), (x,), {}


@_builtin("mlp", "Linear 128->512, GELU, Linear 512->128 on [2, seq, 128]")
def _mlp(seq: int) -> Example:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 128)).eval()
    x = torch.randn(BATCH, seq, 128, generator=torch.Generator().manual_seed(1))
    return model, (x,), {}
