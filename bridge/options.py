"""Options of the bridge's front doors (``torch.compile(..., options={...})`` and ``HwsimMode``).

    config     hardware preset name, YAML path or HardwareConfig (default 'trn2')
    fallback   'cpu' (unsupported ops run on the CPU, recorded in the report), 'warn' (the same,
               plus a warning per op) or 'error' (raise ``FallbackError`` naming the op and why)
    auto_cast  which FP32 operations run in a lower-precision dtype, as neuronx-cc's --auto-cast:
               'matmult' (default: the inputs of matmuls, convolutions and attention's products),
               'all' (every FP32 op's operand tiles) or 'none' (the model's own dtypes); TensorE
               accumulates in fp32 (``bridge.precision``)
    auto_cast_type  the dtype they are cast to: 'bf16' (default), 'fp16', 'tf32' or 'fp8_e4m3'
               (neuronx-cc --auto-cast-type). The former ``precision`` option is retired: passing
               it is an error saying which auto_cast to write instead
    check      compare every simulated result with the CPU (default True)
    trace      a directory, or None. torch.compile writes a run folder per simulated call
               (trace.json for Perfetto, tables, plots) and the report so far (report.json,
               report.txt); eager mode writes the report when its block ends. The folder goes
               through ``hwsim.outputs_guard``: it must be new, empty or an earlier trace folder
               of ours (``.hwsim-run``); it is checked when the options are parsed, and claimed
               once per process (the graphs of one model share it)
    force      write ``trace`` into a non-empty folder that is not ours (default False)
    tiling     TilingOptions or a dict of its fields
    lnc        physical cores each graph is lowered for (``bridge.lnc``): 1, or up to the
               config's ``chip.cores_per_logical_core`` (trn2: 2, trn1: 1); default None, the
               config's, as on the hardware. Large matmul, elementwise, reduction and row ops
               split their output tiles between the cores; the rest run on the first
    memory_plan  place intermediate values in HBM by lifetime, reusing bytes (default True;
               False gives every value its own bytes, to measure the plan: bridge.memory_plan)
    passes     graph passes before lowering (``bridge.passes``): 'all' (default), 'none', a dict
               {'fusion': False, ...} switching named ones, or a list of the names to run
    measure_passes  also lower and time each graph with each pass off and with all off, for the
               report's pass-effects table (default False: it lowers the graph once per pass)
    report     a ``Report`` to append to (default: a new one, see ``bridge.dynamo.last_report``)
    autotune   tune tile plans and pass choices per graph by simulating candidates (True, or
               {'trials': 12, 'seed': 0, 'db': PATH}), cached by graph hash (``bridge.autotune``)
    initcheck  raise ``InitCheckError`` when a lowered program reads memory nothing wrote
               (default None: the ``HWSIM_INITCHECK`` environment variable decides, off unset)

An unknown key or value is an error naming it and the valid ones.
"""

from __future__ import annotations

import dataclasses
import difflib
import warnings
from dataclasses import dataclass, field, fields
from typing import Any

from hwsim.bridge.autotune import parse_autotune
from hwsim.bridge.context import TilingOptions
from hwsim.bridge.errors import FallbackError, Unsupported
from hwsim.bridge.lnc import resolve_lnc
from hwsim.bridge.passes import PassSelection
from hwsim.bridge.precision import RETIRED_OPTION, Precision, retired_precision
from hwsim.bridge.report import Report
from hwsim.config import HardwareConfig, load_config
from hwsim.outputs_guard import OutputFolder, session_folder

FALLBACK_POLICIES = ("cpu", "warn", "error")


@dataclass
class BridgeOptions:
    config: HardwareConfig
    fallback: str = "cpu"
    #: auto_cast and auto_cast_type (the option names), as one value.
    precision: Precision = field(default_factory=lambda: Precision.of())
    check: bool = True
    trace: OutputFolder | None = None
    tiling: TilingOptions = field(default_factory=TilingOptions)
    memory_plan: bool = True
    passes: PassSelection = field(default_factory=PassSelection.all)
    measure_passes: bool = False
    report: Report | None = None
    initcheck: bool | None = None
    force: bool = False
    autotune: dict[str, Any] | None = None
    #: The ``lnc`` option, kept in ``tiling.lnc`` (shown here for the list of valid keys).
    lnc: int | None = None

    @classmethod
    def parse(cls, options: dict[str, Any] | None, mode: str = "compile") -> BridgeOptions:
        given = dict(options or {})
        if RETIRED_OPTION in given:
            raise retired_precision(given[RETIRED_OPTION])
        valid = [f.name for f in fields(cls) if f.name != "precision"]
        valid += ["auto_cast", "auto_cast_type"]
        for key in given:
            if key not in valid:
                close = difflib.get_close_matches(key, valid, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise ValueError(
                    f"unknown hwsim option '{key}'{hint}; valid options: {', '.join(valid)}"
                )
        config = given.get("config", "trn2")
        hw = config if isinstance(config, HardwareConfig) else load_config(str(config))
        fallback = given.get("fallback", "cpu")
        if fallback not in FALLBACK_POLICIES:
            raise ValueError(
                f"hwsim option fallback={fallback!r}; valid: {', '.join(FALLBACK_POLICIES)}"
            )
        tiling = given.get("tiling") or TilingOptions()
        if isinstance(tiling, dict):
            tiling = TilingOptions(**tiling)
        if "lnc" in given:
            resolve_lnc(given["lnc"], hw)  # a bad value is an error now, naming the valid ones
            tiling = dataclasses.replace(tiling, lnc=given["lnc"])
        force = _flag(given, "force", False)
        report = given.get("report")
        if report is not None and not isinstance(report, Report):
            raise ValueError(
                f"hwsim option report={_shown(report)}; valid: a hwsim.bridge.report.Report to "
                "append to, or None (the default: a new one, read with hwsim.bridge.last_report())"
            )
        trace = given.get("trace")
        options_ = cls(
            config=hw,
            fallback=fallback,
            precision=Precision.of(given.get("auto_cast"), given.get("auto_cast_type")),
            check=_flag(given, "check", True),
            trace=session_folder(trace, force=force) if trace else None,
            tiling=tiling,
            memory_plan=_flag(given, "memory_plan", True),
            passes=PassSelection.parse(given.get("passes")),
            measure_passes=_flag(given, "measure_passes", False),
            report=report,
            initcheck=_flag(given, "initcheck", None),
            force=force,
            autotune=parse_autotune(given.get("autotune")),
            lnc=tiling.lnc,
        )
        if options_.report is None:
            options_.report = Report(
                mode, hw.chip.name, options_.precision.to_dict(), options_.fallback
            )
        return options_


def _flag(given: dict[str, Any], name: str, default: bool | None) -> Any:
    """A boolean option: True or False (None only where that is its default). A string such as
    'false' or '0', or a number, is refused: ``bool('false')`` is True, so taking it would turn
    on what the user meant to turn off."""
    value = given.get(name, default)
    if isinstance(value, bool) or (value is None and default is None):
        return value
    allowed = "True, False" + (", None" if default is None else "")
    raise ValueError(f"hwsim option {name}={_shown(value)}; valid: {allowed}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def apply_fallback(options: BridgeOptions, error: Unsupported, where: str = "") -> None:
    """The fallback policy for an op that cannot run on the simulator: raise under 'error',
    warn under 'warn', nothing under 'cpu' (the caller runs it on the CPU and records it)."""
    if options.fallback == "error":
        raise FallbackError(error, where)
    if options.fallback == "warn":
        at = f" (node {where})" if where else ""
        warnings.warn(f"hwsim: running {error} on the CPU{at}", stacklevel=3)
