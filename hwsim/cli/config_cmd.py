"""``hwsim config list | show | schema``: inspect presets, effective configs and the JSON schema."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hwsim.cli.main import add_config_arguments, add_out_argument
from hwsim.config import CONFIGS_DIR, config_hash, config_to_yaml, list_presets, load_config
from hwsim.config.schema import HardwareConfig

SCHEMA_PATH = CONFIGS_DIR / "hwsim-config.schema.json"


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("config", help="list, show and validate hardware configs")
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)

    sub.add_parser("list", help="list the built-in presets").set_defaults(handler=_list)

    show = sub.add_parser("show", help="print the effective config as YAML with its hash")
    show.add_argument("name", metavar="NAME|PATH", help="preset name or YAML path")
    show.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    show.set_defaults(handler=_show)

    schema = sub.add_parser("schema", help="write the JSON schema that editors use")
    add_out_argument(
        schema, "output path (default: stdout)", dest="output", old_output_flag=True, type=Path
    )
    schema.set_defaults(handler=_schema)

    peaks = sub.add_parser("peaks", help="what a config implies: peak FLOP/s, capacities, BW")
    peaks.add_argument("name", metavar="NAME|PATH", help="preset name or YAML path")
    peaks.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    peaks.set_defaults(handler=_peaks)

    check = sub.add_parser("check", help="validate a config and print its hash")
    add_config_arguments(check)
    check.set_defaults(handler=_check)


def json_schema_text() -> str:
    """The JSON schema of a hardware config file, as committed in ``configs/``."""
    schema = HardwareConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "hwsim hardware config"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def _list(args: argparse.Namespace) -> int:
    for name in list_presets():
        config = load_config(name)
        chip = config.chip
        print(
            f"{name:6s} {chip.generation}  {chip.cores_per_chip} cores  {CONFIGS_DIR / name}.yaml"
        )
    return 0


def _show(args: argparse.Namespace) -> int:
    config = load_config(args.name, args.overrides)
    print(
        f"# effective config of {args.name}"
        + (f" with {' '.join(args.overrides)}" if args.overrides else "")
    )
    print(f"# hash: {config_hash(config)}")
    print(config_to_yaml(config), end="")
    return 0


def _schema(args: argparse.Namespace) -> int:
    text = json_schema_text()
    if args.output:
        from hwsim.outputs_guard import output_file

        with output_file(args.output) as file:
            file.write(text)
        print(f"wrote {args.output}")
    else:
        print(text, end="")
    return 0


def _peaks(args: argparse.Namespace) -> int:
    from hwsim.report.preset_summary import print_preset_summary

    print_preset_summary(args.name, args.overrides)
    return 0


def _check(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.overrides)
    print(f"{args.config}: ok, hash {config_hash(config)}")
    return 0
