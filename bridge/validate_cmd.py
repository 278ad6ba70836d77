"""``hwsim validate opinfo``: PyTorch's OpInfo samples for every lowered overload, run eagerly on
the simulator and compared with the CPU (``bridge.opinfo``). A plugin command: ``hwsim.cli.main``
loads it from the ``hwsim.commands`` entry point only when ``hwsim validate`` is run."""

from __future__ import annotations

import argparse
import sys

from hwsim import strict_json
from hwsim.cli.main import positive_int
from hwsim.outputs_guard import output_file

DTYPE_CHOICES = ("float32", "bfloat16")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "validate", help="conformance of the PyTorch bridge against PyTorch's own tests"
    )
    checks = parser.add_subparsers(dest="check", metavar="CHECK", required=True)
    opinfo = checks.add_parser(
        "opinfo",
        help="run PyTorch OpInfo samples of every lowered ATen overload on the simulator",
        description="Run PyTorch's OpInfo samples for every lowered overload eagerly on the "
        "simulator (HwsimMode), compare with the CPU, and print per-op results. Exit code 0 "
        "when every lowered overload reached by a sample passes at least 90%% of them.",
    )
    opinfo.add_argument(
        "--ops",
        nargs="+",
        metavar="OP",
        help="OpInfo names (add, softmax.with_dtype, nn.functional.gelu) or lowered overloads "
        "(aten.add.Tensor); default: every entry that exercises a lowered overload",
    )
    opinfo.add_argument(
        "--dtype",
        nargs="+",
        choices=DTYPE_CHOICES,
        default=["float32"],
        help="sample dtype(s) (default float32)",
    )
    opinfo.add_argument("--config", default="tiny", help="hardware preset or YAML (default tiny)")
    opinfo.add_argument(
        "--max-samples", type=positive_int, metavar="N", help="at most N samples per OpInfo entry"
    )
    opinfo.add_argument(
        "--max-elements",
        type=positive_int,
        metavar="N",
        help="skip samples with more tensor elements than N (default 32768, for speed)",
    )
    opinfo.add_argument(
        "--reference",
        action="store_true",
        help="use the OpInfos' reference_inputs (samples plus extremal values, larger and "
        "non-contiguous tensors) instead of sample_inputs",
    )
    opinfo.add_argument("--docs", metavar="PATH", help="write the op-support table (Markdown)")
    opinfo.add_argument("--json", metavar="PATH", help="write every sample's result as JSON")
    opinfo.set_defaults(handler=_opinfo)


def _opinfo(args: argparse.Namespace) -> int:
    from hwsim.bridge.opinfo import DEFAULT_MAX_ELEMENTS, OpResult, run_conformance
    from hwsim.bridge.opinfo_docs import markdown, op_line, summary_lines, to_dict
    from hwsim.output_paths import check_output_file

    for path in (args.docs, args.json):  # a bad path fails now, not after the whole run
        if path:
            check_output_file(path)

    def progress(result: OpResult) -> None:
        print(op_line(result), flush=True)

    run = run_conformance(
        args.ops,
        args.dtype,
        config=args.config,
        max_samples=args.max_samples,
        max_elements=args.max_elements or DEFAULT_MAX_ELEMENTS,
        reference=args.reference,
        progress=progress,
    )
    for path, text in (
        (args.docs, lambda: markdown(run, _command(args))),
        (args.json, lambda: strict_json.dumps(to_dict(run), indent=1, default=str) + "\n"),
    ):
        if path:
            with output_file(path) as file:
                file.write(text())
            print(f"wrote {path}", file=sys.stderr)
    for line in summary_lines(run):
        print(line)
    return 0 if run.meets_target else 1


def _command(args: argparse.Namespace) -> str:
    """The command that regenerates the docs table (what the table says it came from)."""
    words = ["hwsim validate opinfo", "--dtype", *args.dtype]
    if args.ops:
        words += ["--ops", *args.ops]
    if args.config != "tiny":
        words += ["--config", args.config]
    if args.max_samples is not None:
        words += ["--max-samples", str(args.max_samples)]
    if args.reference:
        words.append("--reference")
    if args.max_elements:
        words += ["--max-elements", str(args.max_elements)]
    return " ".join([*words, "--docs", args.docs])
