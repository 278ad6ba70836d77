"""Saved programs (``FILE.hwprog``): writing and reading them, which configs can run one, and
checking its outputs against the expected ones it carries.

A file holds data only, so programs can be shared: a zip of a versioned, hashed manifest, one
JSON document and ``.npy`` arrays (``program_archive``), the document written from the ISA
registry's field types and checked field by field when read (``program_codec``, ``typed_json``;
the ``meta`` entries hwsim reads by ``saved_meta``). Loading never runs code from the file; the
old pickle format is refused without being unpickled (docs/export.md, SECURITY.md).

A program saved by ``bridge.export`` (``hwsim export``) was lowered once, for one config, from a
torch model. Its ``meta`` records what the lowering depended on and what the model computed:

- ``meta['lowered_for']``: the config's name, hash and generation, its ``geometry`` (the fields
  below, which decided the tiling) and what the program ``requires`` of a config (bytes per SBUF
  partition up to its highest allocation, DMA queues per engine);
- ``meta['expected_outputs']``: per output HBM tensor, the model's CPU values (flat, in the
  device representation) and the tolerance ``(rtol, atol)`` of the dtype they were computed in.

Compatibility rule (``check_compatible``): every ``GEOMETRY_FIELDS`` value must equal the one it
was lowered for, SBUF must be at least as large as the program's allocations reach, and there
must be as many DMA queues as it names. Everything else (clocks, bandwidths, latencies, HBM,
engine counts, timing models, ...) may differ: that is what a sweep over a saved program varies.
Instruction legality on the new config is still checked by the simulator, once per distinct
instruction. Numerics do not depend on timing, so the expected outputs hold on every config.

hwsim never imports torch: the check here is numpy, the same formula as
``bridge.precision.compare``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np

from hwsim.config import config_hash
from hwsim.config.schema import HardwareConfig
from hwsim.errors import IncompatibleProgramError, SavedProgramError, WorkloadError
from hwsim.program import Program
from hwsim.workloads.numerics import abs_errors
from hwsim.workloads.program_archive import read_archive, write_archive
from hwsim.workloads.program_codec import decode_program, encode_program
from hwsim.workloads.registry import NumericsVerdict, Workload, combined_verdict
from hwsim.workloads.saved_meta import (
    EXPECTED_OUTPUTS,
    GEOMETRY_FIELDS,
    LOWERED_FOR,
    MINIMUM_FIELDS,
    check_meta,
)
from hwsim.workloads.typed_json import FieldError

PROGRAM_SUFFIX = ".hwprog"

__all__ = [
    "EXPECTED_OUTPUTS",
    "GEOMETRY_FIELDS",
    "LOWERED_FOR",
    "MINIMUM_FIELDS",
    "PROGRAM_SUFFIX",
    "check_compatible",
    "check_outputs",
    "compare_arrays",
    "load_program",
    "lowered_for",
    "relower_hint",
    "save_program",
    "saved_workload",
]


def save_program(program: Program, path: str | Path) -> Path:
    """Write ``program`` (e.g. a torch model lowered once) for sweeps to simulate on many configs.

    The file holds data only (``program_archive``: JSON and ``.npy`` arrays, versioned and
    hashed); a value that cannot be saved as data is an error naming its field, and no file is
    written then.
    """
    path = Path(path)
    if path.suffix != PROGRAM_SUFFIX:
        raise WorkloadError(f"{path}: saved programs end in {PROGRAM_SUFFIX}")
    try:
        check_meta(program)
        document, arrays = encode_program(program)
    except FieldError as exc:
        raise SavedProgramError(f"{path}: cannot save the program: {exc}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    write_archive(path, document, arrays)
    return path


def load_program(path: str | Path) -> Program:
    """A program written by ``save_program``. Reading runs no code from the file: a pickle (the
    old format) is refused unread; anything malformed, corrupted or from a newer hwsim is a
    ``SavedProgramError`` naming the file and the field."""
    document, arrays = read_archive(Path(path))
    try:
        program = decode_program(document, arrays)
        check_meta(program)
    except FieldError as exc:
        raise SavedProgramError(f"{path}: {exc}") from None
    return program


# ---- what a program was lowered for ------------------------------------------------------------


def _field(config: HardwareConfig, path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        node = getattr(node, part)
    return node


def lowered_for(program: Program, config: HardwareConfig) -> dict[str, Any]:
    """``meta['lowered_for']`` of ``program`` built for ``config``: geometry and requirements.

    One pass over the program's allocations and instructions, at export time (never per run).
    """
    sbuf_reach = max(
        (a.offset_bytes + a.size_bytes for a in program.allocations if a.memory == "sbuf"),
        default=0,
    )
    queues = [
        getattr(instruction, "queue", 0)
        for core in program.cores
        for _, _, instruction in core.instructions()
        if instruction.IS_DMA
    ]
    return {
        "config": config.chip.name,
        "config_hash": config_hash(config),
        "generation": config.chip.generation,
        "geometry": {path: _field(config, path) for path in GEOMETRY_FIELDS},
        "requires": {
            "sbuf.bytes_per_partition": sbuf_reach,
            "dma.queues_per_engine": max(queues, default=-1) + 1,
        },
    }


def check_compatible(program: Program, config: HardwareConfig, where: str = "program") -> None:
    """Raise ``IncompatibleProgramError`` (one line naming every field that differs) if
    ``config`` cannot run ``program`` as lowered; programs without ``lowered_for`` pass."""
    facts = program.meta.get(LOWERED_FOR)
    if not facts:
        return
    problems = []
    for path, want in facts["geometry"].items():
        have = _field(config, path)
        if have != want:
            problems.append(f"{path}={have} (lowered for {want})")
    for path, need in facts["requires"].items():
        have = _field(config, path)
        if have < need:
            problems.append(f"{path}={have} (the program needs {need})")
    if problems:
        raise IncompatibleProgramError(
            f"{where} was lowered for {facts['config']}; this config ({config.chip.name}) has "
            f"{', '.join(problems)}: re-export the model for this config "
            f"(hwsim export MODEL --config NAME|PATH -o FILE{PROGRAM_SUFFIX})"
        )


def relower_hint(program: Program, config: HardwareConfig) -> str:
    """For an instruction the simulator finds illegal on a config other than the one the program
    was lowered for (e.g. another generation's engine rules): what to do, or ''."""
    facts = program.meta.get(LOWERED_FOR)
    if not facts or facts.get("config_hash") == config_hash(config):
        return ""
    return (
        f" (the program was lowered for {facts['config']}, NeuronCore-{facts['generation']}, "
        f"and this config differs: re-export the model for it: hwsim export MODEL --config "
        "NAME|PATH)"
    )


# ---- numerics ------------------------------------------------------------------------------------


def compare_arrays(
    actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float
) -> tuple[float, int]:
    """(max abs error, elements outside the tolerance), as ``bridge.precision.compare``:
    ``|a - e| <= atol * scale + rtol * |e|`` with scale the RMS of the finite expected values
    (at least 1); where NaN or an infinity is expected, only the same value passes."""
    verdict, mismatched = _compared(actual, expected, rtol, atol)
    return verdict.max_abs_err, mismatched


def _compared(
    actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float
) -> tuple[NumericsVerdict, int]:
    """``compare_arrays`` with the verdict: its tolerance is the bound at the element whose
    error is the largest fraction of its own bound."""
    if actual.shape != expected.shape:
        return NumericsVerdict(math.inf, False, 0.0), max(actual.size, expected.size)
    if actual.size == 0:
        return NumericsVerdict(0.0, True, 0.0), 0
    e = expected.astype(np.float64)
    diff = abs_errors(actual, e)
    same = diff == 0
    finite = e[np.isfinite(e)]
    scale = max(1.0, float(np.sqrt(np.mean(np.square(finite))))) if finite.size else 1.0
    with np.errstate(invalid="ignore", divide="ignore"):  # where a NaN or an infinity is
        bound = atol * scale + rtol * np.abs(e)  # expected, the bound is NaN or inf: only the
        bad = (diff > bound) | (~same & ~np.isfinite(e))  # same value passes
        ratio = np.where(same, 0.0, np.where(bad, np.inf, diff / bound))
    worst = int(np.argmax(np.nan_to_num(ratio, nan=0.0)))
    tolerance = float(bound.reshape(-1)[worst])
    mismatched = int(bad.sum())
    return NumericsVerdict(float(diff.max()), mismatched == 0, tolerance), mismatched


def check_outputs(
    expected: dict[str, dict[str, Any]], outputs: dict[str, np.ndarray]
) -> NumericsVerdict:
    """The verdict of a run's ``outputs`` against ``meta['expected_outputs']`` (every element of
    every output within its tolerance)."""
    verdicts = []
    for name, want in expected.items():
        values = np.asarray(want["values"]).reshape(-1)
        got = outputs.get(name)
        if got is None or got.size < values.size:
            return NumericsVerdict(math.inf, False, 0.0)
        verdict, _ = _compared(got.reshape(-1)[: values.size], values, want["rtol"], want["atol"])
        verdicts.append(verdict)
    return combined_verdict(verdicts)


# ---- as a workload -------------------------------------------------------------------------------


def saved_workload(path: str | Path, name: str | None = None) -> Workload:
    """``FILE.hwprog`` as a workload: ``build`` checks the config can run it and returns it as
    saved; ``check`` compares with its expected outputs (None if it carries none)."""
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(f"saved program '{path}' not found")
    program = load_program(path)
    expected = program.meta.get(EXPECTED_OUTPUTS)
    # the simulator copies meta into the trace (JSON): keep the arrays out of it
    meta = {k: v for k, v in program.meta.items() if k != EXPECTED_OUTPUTS}
    simulated = dataclasses.replace(program, meta=meta)
    facts = meta.get(LOWERED_FOR)
    origin = f", lowered for {facts['config']}" if facts else ""

    def build(config: HardwareConfig) -> Program:
        check_compatible(simulated, config, str(path))
        return simulated

    def check(outputs: dict[str, np.ndarray]) -> NumericsVerdict:
        assert expected is not None
        return check_outputs(expected, outputs)

    return Workload(
        name or path.name,
        f"saved program {path.name}{origin}",
        build,
        check if expected else None,
    )
