"""Every CLI command on the corpus of bad inputs in ``tests/data/bad_inputs/`` (issue 15): each
refusal is exit status 2 and one line on stderr (``hwsim: error: ...``) saying what was wrong,
never a traceback, in under 5 s; ``--debug`` shows the traceback.

The corpus, one folder per class (binary files written by ``tests/data/make_bad_inputs.py``):
saved programs (``programs/``), sweep databases (``sweep_dbs/``), trace files and run folders
for ``report`` / ``plot`` (``traces/``, ``runs/``), sweep specs (``specs/``) and the user files
of ``FILE.py:NAME`` (``python/``). Strings (workloads, ``--set`` values, ``--out`` paths, command
arguments) are the tables below. Hostile config files are ``tests/data/bad_configs/`` (their
messages are checked by ``test_bad_inputs.py``; here they go through the other front doors).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hwsim.cli.main import main
from hwsim.errors import HwsimError

from test_hostile_inputs import HOSTILE_CORPUS_FILES  # isort: skip  (a module beside this one)

DATA = Path(__file__).resolve().parents[1] / "data"
CORPUS = DATA / "bad_inputs"
#: CPU-time bound of one refusal (CPU, not wall, so that a loaded machine cannot fail it), and
#: a far larger wall bound that catches a refusal that waits instead of computing.
MAX_CPU_S = 5.0
HANG_S = 60.0
#: A spec that runs one quick simulation: what a bad ``--db`` is given with.
ONE_RUN_SPEC = "name: one\nbase: tiny\nworkloads: [gemm:32x32x32]\n"

P, DB, TR, RUN, SPEC, PY = "programs", "sweep_dbs", "traces", "runs", "specs", "python"

#: corpus file -> (command before the file, after it, what the one line says)
FILE_CASES: dict[str, tuple[list[str], list[str], str]] = {
    # saved programs, as `hwsim run FILE.hwprog`
    f"{P}/pickle_renamed.hwprog": (["run"], [], "is an old pickle-format saved program"),
    f"{P}/truncated_zip.hwprog": (["run"], [], "corrupted: not a readable zip archive"),
    f"{P}/empty.hwprog": (["run"], [], "not a saved hwsim program (saved programs are zip"),
    f"{P}/yaml_text.hwprog": (["run"], [], "this file starts with b'name'"),
    f"{P}/zip_without_manifest.hwprog": (["run"], [], "no manifest.json in the archive"),
    f"{P}/unexpected_entry.hwprog": (["run"], [], "unexpected entry 'run_me.py' in the archive"),
    f"{P}/bad_manifest_hash.hwprog": (["run"], [], "corrupted or edited: content hash mismatch"),
    f"{P}/newer_format.hwprog": (["run"], [], "written by a newer hwsim (format 7; this hwsim"),
    f"{P}/unknown_engine_stream.hwprog": (["run"], [], "streams.vectr: unknown engine 'vectr'"),
    f"{P}/unknown_opcode.hwprog": (["run"], [], "unknown opcode 'dma_cpy'; did you mean"),
    f"{P}/field_wrong_type.hwprog": (["run"], [], "queue: expected an int, got the string '0'"),
    f"{P}/field_missing.hwprog": (["run"], [], "src: missing (every field of a dma_copy"),
    f"{P}/sizes_not_a_list.hwprog": (["run"], [], "free_sizes: expected a list of ints"),
    f"{P}/shape_mismatch.hwprog": (["run"], [], "the array has shape [32, 32], the tensor is"),
    f"{P}/negative_address.hwprog": (["run"], [], "hbm[0].address_bytes: -64 is outside 0.."),
    f"{P}/huge_shape.hwprog": (["run"], [], "bytes, more than MAX_PROGRAM_BYTES"),
    f"{P}/huge_array_header.hwprog": (["run"], [], "needs 4398046511104 bytes, the entry holds"),
    f"{P}/missing_array.hwprog": (["run"], [], "names no array entry of the file"),
    f"{P}/undeclared_tensor.hwprog": (["run"], [], "names HBM tensor 'weights', which the"),
    f"{P}/lowered_for_another_config.hwprog": (
        ["run"],
        [],
        "was lowered for trn1; this config (tiny) has tensor_engine.rows=32 (lowered for 16)",
    ),
    f"{P}/negative_semaphore_wait.hwprog": (
        ["run"],
        ["--timing-only"],
        "waits[0][1]: a wait for -5",
    ),
    f"{P}/negative_semaphore_increment.hwprog": (["run"], [], "signals[0][1]: an increment of -1"),
    f"{P}/number_too_large.hwprog": (["run"], [], "the number 1e309 is too large for a float"),
    f"{P}/expected_shape_contradicts.hwprog": (
        ["run"],
        [],
        "meta.expected_outputs.c.shape: shape [32, 32] holds 1024 values, but values has 16",
    ),
    # sweep databases: exporting, plotting, and running a spec into them
    **{
        f"{DB}/{name}": (["sweep", "export"], ["-o", "{tmp}/out.csv"], says)
        for name, says in {
            "not_sqlite.sqlite": "is not an hwsim sweep database: it is not an SQLite file",
            "foreign.sqlite": "is not an hwsim sweep database: its tables are photos",
            "newer_schema.sqlite": "was written by a newer hwsim (sweep database version 99",
            "truncated.sqlite": "is not an hwsim sweep database: database disk image is malformed",
            "damaged_pages.sqlite": "is not an hwsim sweep database: database disk image is",
            "only_a_view.sqlite": "is not an hwsim sweep database: it holds no tables but view",
            "trigger_added.sqlite": "it has trigger 'wipe', which hwsim does not create",
            "config_edited.sqlite": "the stored config of f25088994a8c6807 does not hash to its",
        }.items()
    },
    # traces and run folders
    f"{TR}/not_json.json": (["report"], [], "not a Chrome trace JSON file (Expecting value"),
    f"{TR}/truncated.json": (["report"], [], "not a Chrome trace JSON file (Expecting value"),
    f"{TR}/utf16.json": (["report"], [], "not a Chrome trace JSON file ('utf-8' codec"),
    f"{TR}/deep_nesting.json": (["report"], [], "not a Chrome trace JSON file (nested too deep"),
    f"{TR}/nonfinite.json": (["report"], [], "not a Chrome trace JSON file (NaN is not JSON"),
    f"{TR}/summary_infinity.json": (["report"], [], "(Infinity is not JSON (non-finite numbers"),
    f"{TR}/top_level_list.json": (["report"], [], "no hwsim summary in this trace"),
    f"{TR}/events_not_a_list.json": (["report"], [], "no hwsim summary in this trace"),
    f"{TR}/event_fields_wrong.json": (["report"], [], "no hwsim summary in this trace"),
    f"{TR}/no_summary.json": (["report"], [], "no hwsim summary in this trace"),
    f"{TR}/header_not_json.json": (["report"], [], "not a Chrome trace JSON file (Expecting"),
    f"{TR}/header_a_list.json": (["report"], [], "no hwsim summary in this trace"),
    f"{TR}/summary_not_an_object.json": (["report"], [], "the run summary is a JSON str, not an"),
    f"{TR}/summary_a_list.json": (["report"], [], "the run summary is a JSON list, not an"),
    f"{TR}/summary_of_another_schema.json": (
        ["report"],
        [],
        "not a run summary of this hwsim (schema 'hwsim.summary/9', this hwsim reads",
    ),
    f"{TR}/summary_fields_wrong.json": (
        ["report"],
        [],
        "its run summary has a missing or malformed field (ValueError: could not convert",
    ),
    f"{TR}/line_format_cut_off.json": (
        ["plot"],
        ["--kind", "timeline", "-o", "{tmp}/t.png"],
        "cannot read trace events (the file ends before the closing ']}' (truncated?))",
    ),
    f"{TR}/line_format_event_not_json.json": (
        ["plot"],
        ["--kind", "timeline", "-o", "{tmp}/t.png"],
        "cannot read trace events (line 4: Expecting property name",
    ),
    f"{TR}/line_format_event_fields_wrong.json": (
        ["plot"],
        ["--kind", "timeline", "-o", "{tmp}/t.png"],
        "cannot read trace events ('str' object cannot be interpreted as an integer)",
    ),
    f"{TR}/line_format_event_not_an_object.json": (
        ["plot"],
        ["--kind", "memory", "-o", "{tmp}/t.png"],
        "cannot read trace events ('list' object has no attribute 'get')",
    ),
    f"{RUN}/empty_folder": (["report"], [], "no trace.json or summary.json in this folder"),
    f"{RUN}/summary_not_json": (["report"], [], "not a JSON summary (Expecting property name"),
    f"{RUN}/summary_not_utf8": (["report"], [], "not a JSON summary ('utf-8' codec can't decode"),
    f"{RUN}/summary_a_list": (["report"], [], "the run summary is a JSON list, not an object"),
    f"{RUN}/summary_of_another_schema": (["report"], [], "(schema 'hwsim.summary/0', this"),
    f"{RUN}/summary_nan": (["report"], [], "not a JSON summary (NaN is not JSON"),
    f"{RUN}/summary_number_too_large": (["report"], [], "the number 1e309 is too large for a"),
    f"{RUN}/summary_fields_wrong": (
        ["plot"],
        ["--kind", "util", "-o", "{tmp}/u.png"],
        "its run summary has a missing or malformed field (AttributeError",
    ),
    # sweep specs (--dry-run: nothing would run even if one were accepted)
    **{
        f"{SPEC}/{name}": (["sweep"], ["--dry-run", "--db", "{tmp}/r.sqlite"], says)
        for name, says in {
            "unknown_key.yaml": "paramters",
            "no_workloads.yaml": "workloads",
            "malformed_workload.yaml": "workloads[0]: 'gemm:1x1': expected gemm:MxKxN[:dtype]",
            "huge_gemm.yaml": "gemm:1000000000x1000000000x128: needs 2,000,000,512,000,000,000 B",
            "fullwidth_digits.yaml": "workloads[0]: 'gemm:１２８x128x128': expected gemm:MxKxN",
            "digits_5000.yaml": "M has 5000 digits; a dimension has at most 12",
            "bad_dtype.yaml": "TensorE multiplies bf16, fp16, fp32, "
            "fp8_e4m3, fp8_e5m2, tf32, not int7",
            "unknown_workload.yaml": "unknown workload 'softmaxx' (did you mean 'softmax'?)",
            "unknown_parameter.yaml": "parameters.grid.tensor_engine.rowz",
            "bad_parameter_value.yaml": "tensor_engine.rows",
            "huge_grid.yaml": "parameters: 10000000000000000 configs, more than the 100000 ",
            "unknown_base.yaml": "base: trn9: not a preset",
            "pickle_program.yaml": "is an old pickle-format saved program",
            "edited_program.yaml": "corrupted or edited: content hash mismatch",
            "missing_python_file.yaml": "workload file 'missing.py' not found",
            "unknown_metric.yaml": "metrics[0]",
            "negative_samples.yaml": "samples",
            "zip_unequal.yaml": "zip lists must have equal lengths",
            "random_range_overflow.yaml": "high - low is too large to draw from (-1e+308",
            "random_step_too_small.yaml": "step 1e-300 makes more than 9e+15 steps from low",
            "not_a_mapping.yaml": "a sweep spec must be a YAML mapping",
            "empty.yaml": "a sweep spec must be a YAML mapping",
        }.items()
    },
}

#: FILE.py:NAME -> what the one line says (``hwsim run`` on tiny); torch factories below
PYTHON_CASES = {
    "not_callable.py:x": "'x' (type int) is not a workload; expected a kernel",
    "not_callable.py:y": "not_callable.py defines no 'y'; it defines x",
    "missing.py:build": "workload file '{py}/missing.py' not found",
    "raises_on_import.py:build": "failed: this module refuses to be imported",
    "syntax_error.py:build": "failed: '(' was never closed (syntax_error.py, line 1)",
    "builder_raises.py:build": "build(config) raised ValueError at builder_raises.py:2: the",
    "builder_returns_int.py:build": "build(config) returned int; expected a Program",
    "kernel_raises.py:copy": "kernel copy raised TypeError at kernel_raises.py:8: unsupported",
    "reference_raises.py:copy": "the reference raised AttributeError at reference_raises.py:13",
    "huge_tensor_spec.py:copy": "needs 4,000,000,000,000,000,000 B of HBM (3.47 EiB",
    "out_of_bounds_slice.py:copy": "slice 0:256 of dimension 0 (size 128) is out of bounds",
    "exits_at_import.py:copy": "exits_at_import.py called sys.exit(0); a workload file defines",
    "exits_in_kernel.py:copy": "kernel copy called sys.exit(0) at exits_in_kernel.py:9",
    "returns_nothing.py:copy": "kernel copy returned nothing; a kernel returns the HBM tensors",
    "float_shape.py:copy": "float_shape.py:7: ndarray: shape (32.0, 16) must be whole numbers",
}
#: FILE.py:NAME with the options of ``hwsim run`` it is run with -> what the one line says
PYTHON_LIMIT_CASES = {
    "endless_isa_calls.py:copy": (
        ["--max-instructions", "1000"],
        "tracing kernel copy stopped at its limit of 1,000 instructions",
    ),
    "endless_python_loop.py:copy": (
        ["--trace-timeout", "0.5"],
        "tracing kernel copy stopped at its limit of 0.5 s (0 instructions made)",
    ),
}

#: workload strings of `hwsim run WORKLOAD --config tiny`
WORKLOADS = {
    "gemm:1000000000x1000000000x128": "needs 2,000,000,512,000,000,000 B of HBM (1.73 EiB",
    "gemm:" + "7" * 5000 + "x2x2": "M has 5000 digits; a dimension has at most 12",
    "gemm:2x2x" + "7" * 13: "N has 13 digits; a dimension has at most 12",
    "gemm:１２８x128x128": "expected gemm:MxKxN[:dtype], e.g. gemm:512x1024x2048:bf16",
    "gemm:128x128x128:int3": "TensorE multiplies bf16, fp16, fp32, "
    "fp8_e4m3, fp8_e5m2, tf32, not int3",
    "gemm:128x128": "expected gemm:MxKxN[:dtype]",
    "gemm:0x128x128": "M must be at least 1, got 0",
    "gemm:-1x2x2": "expected gemm:MxKxN[:dtype]",
    "softmaxx": "unknown workload 'softmaxx' (did you mean 'softmax'?)",
    "kernel.py": "'kernel.py': name the kernel or function in it: kernel.py:NAME",
    "missing.hwprog": "saved program 'missing.hwprog' not found",
    "": "name a workload (e.g. gemm:512x1024x2048:bf16) or use --list",
}

#: `hwsim run softmax --config tiny --set VALUE`
SET_VALUES = {
    "tensor_engine.rows=abc": "tensor_engine.rows: input should be a valid integer, got 'abc'",
    "tensor_engine.rows=0": "tensor_engine.rows: input should be greater than or equal to 1",
    "tensor_engine.rows=" + "9" * 5000: "an integer of 5000 digits at tensor_engine.rows",
    "vector_engine.pipeline_latency_cycles=18446744073709551617": "less than or equal to",
    "nokey=1": "nokey: unknown key (valid keys: chip, collectives, dma",
    "novalue": "--set 'novalue': expected section.field=value",
    "chip.name=2024-01-01": "2024-01-01 reads as a date or time at chip.name",
    # tiny gives size "4": "04" read as the same size, and one value silently won
    "dma.descriptor_efficiency.04=0.5": "key '04': write a size as a plain integer",
}

#: command-line arguments of the hwsim commands (argparse's own errors, one line too)
ARGUMENTS = {
    ("nosuch",): "argument COMMAND: invalid choice: 'nosuch'",
    (): "the following arguments are required: COMMAND",
    ("run", "softmax", "--jobs", "3"): "unrecognized arguments: --jobs 3",
    ("sweep", "x.yaml", "--jobs", "x"): "argument --jobs/-j: expected a whole number, got 'x'",
    ("sweep", "x.yaml", "--jobs", "0"): "argument --jobs/-j: expected at least 1, got 0",
    ("sweep", "x.yaml", "--backend", "mpi"): "argument --backend: invalid choice: 'mpi'",
    ("sweep",): "name a sweep spec (hwsim sweep SPEC.yaml), or export / plot a DB",
    ("sweep", "export"): "hwsim sweep export DB: name the results database",
    ("sweep", "export", "{tmp}/none.sqlite", "-o", "{tmp}/x.csv"): "no such results database",
    ("sweep", "export", "{tmp}/" + "n" * 300 + ".sqlite", "-o", "{tmp}/x.csv"): (
        "cannot be a results database (File name too long)"
    ),
    # a name over NAME_MAX wherever a path is read (the system's error, one line)
    (
        "report",
        "{tmp}/" + "n" * 300 + ".json",
    ): "characters): File name too long; name a shorter path",
    ("plot", "{tmp}/" + "n" * 300, "--kind", "util"): "characters): File name too long; name a",
    ("run", "{tmp}/" + "n" * 300 + ".hwprog"): "characters): File name too long; name a",
    ("run", "{tmp}/" + "n" * 300 + ".py:f"): "characters): File name too long; name a",
    ("run", "softmax", "--config", "{tmp}/" + "n" * 300 + ".yaml"): "File name too long; name a",
    ("config", "show", "{tmp}/" + "n" * 300 + ".yaml"): "File name too long; name a",
    ("sweep", "{tmp}/" + "n" * 300 + ".yaml"): "File name too long",
    ("sweep", "nosuch.yaml"): "nosuch.yaml: cannot read sweep spec (No such file or directory)",
    ("plot", "x.json", "--kind", "pie"): "argument --kind: invalid choice: 'pie'",
    ("plot", "x.json"): "the following arguments are required: --kind",
    ("report", "{tmp}/none.json"): "no such trace file or run folder",
    ("config", "show", "trn9"): "trn9: not a preset",
    ("config", "schema", "-o", "/"): "/ is a folder; name a file to write",
    ("demo", "--config", "trn9"): "trn9: not a preset",
    ("demo", "--workload", "softmaxx", "--config", "tiny"): "unknown workload 'softmaxx'",
}


def _out_cases(tmp: Path) -> dict[str, tuple[str, str]]:
    """``--out`` targets made in ``tmp`` -> what the one line says."""
    (tmp / "a_file").write_text("precious\n")
    (tmp / "foreign").mkdir()
    (tmp / "foreign" / "notes.txt").write_text("someone's\n")
    (tmp / "planted").symlink_to(tmp / "a_file")
    (tmp / "fake_run").mkdir()
    (tmp / "fake_run" / ".hwsim-run").write_text("not ours\n")
    (tmp / "fake_run" / "trace.json").symlink_to(tmp / "a_file")
    (tmp / "loop_a").symlink_to(tmp / "loop_b")
    (tmp / "loop_b").symlink_to(tmp / "loop_a")
    (tmp / "unbound").mkdir()  # a marker of the old, unbound format listing a user's file
    (tmp / "unbound" / ".hwsim-run").write_text("hwsim-run format 1\nthesis.tex\n")
    (tmp / "unbound" / "thesis.tex").write_text("years of work\n")
    (tmp / "copied").mkdir()  # a marker copied from another run folder (bound to that one)
    (tmp / "copied" / ".hwsim-run").write_text("hwsim-run format 2\nfolder inode 1\nsummary.json\n")
    (tmp / "copied" / "summary.json").write_text("my notes\n")
    long_path = str(tmp) + "/d" * 2100
    return {
        str(tmp / "a_file"): "exists and is a file, not a folder; name a folder for the outputs",
        str(tmp / "foreign"): "is not empty and is not an hwsim run folder (no .hwsim-run in it)",
        str(tmp / "planted"): "exists and is a file, not a folder",
        str(tmp / "fake_run"): "its .hwsim-run was not written by hwsim",
        "/": "refusing to write into / (the filesystem root)",
        str(Path.home()): "(your home directory): name a new folder inside it",
        long_path: "over this system's limit of 4096 (PATH_MAX); name a shorter one",
        str(tmp / ("n" * 300)): "over this filesystem's limit of 255 (NAME_MAX)",
        str(tmp / "a_file" / "sub"): "a_file is a file",
        "/proc/hwsim-out": "cannot create /proc/hwsim-out: /proc is not writable",
        str(tmp / "loop_a"): "loop_a cannot be resolved",
        str(tmp / "unbound"): "its .hwsim-run is of an older hwsim, not bound to this folder",
        str(tmp / "copied"): "its .hwsim-run was made for another folder (copied or unpacked",
    }


@pytest.fixture(autouse=True, scope="module")
def _commands_imported() -> None:
    """What every command imports on first use (the simulator, the sweep machinery, the JIT
    warm-up: seconds, cold) happens before any refusal is timed."""
    for module in ("hwsim.cli.config_cmd", "hwsim.sweep.execute", "hwsim.sweep.spec"):
        importlib.import_module(module)
    importlib.import_module("hwsim.workloads.cli_run")
    importlib.import_module("hwsim.plots")
    from hwsim.kernels import warm_up

    warm_up()


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], quiet: bool = True) -> str:
    """Run the CLI in-process; check exit 2, one stderr line, no traceback, within 5 s of CPU."""
    start, start_cpu = time.perf_counter(), time.process_time()
    code = main(argv)
    wall_s, cpu_s = time.perf_counter() - start, time.process_time() - start_cpu
    out, err = capsys.readouterr()
    assert code == 2, err
    if quiet:
        assert out == ""
    assert "Traceback" not in out + err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("hwsim: error: ")
    assert cpu_s < MAX_CPU_S, f"refusing took {cpu_s:.1f} s of CPU"
    assert wall_s < HANG_S, f"refusing took {wall_s:.1f} s"
    return err.strip().removeprefix("hwsim: error: ")


def _fill(words: list[str], tmp: Path) -> list[str]:
    return [w.replace("{tmp}", str(tmp)).replace("{py}", str(CORPUS / PY)) for w in words]


def _file_argv(name: str, tmp: Path) -> list[str]:
    before, after, _ = FILE_CASES[name]
    argv = [*before, str(CORPUS / name), *after]
    if before == ["run"]:
        argv += ["--config", "tiny"]
    return _fill(argv, tmp)


def test_every_corpus_file_is_a_case() -> None:
    files = {
        str(p.relative_to(CORPUS))
        for folder in (P, DB, TR, SPEC)
        for p in (CORPUS / folder).iterdir()
    }
    files |= {f"{RUN}/{p.name}" for p in (CORPUS / RUN).iterdir()}
    files |= {f"{PY}/{p.name}" for p in (CORPUS / PY).iterdir()}
    used = set(FILE_CASES) | {f"{PY}/{c.split(':')[0]}" for c in PYTHON_CASES}
    used |= {f"{PY}/{c.split(':')[0]}" for c in [*TORCH_CASES, *PYTHON_LIMIT_CASES]}
    used |= set(HOSTILE_CORPUS_FILES)  # the cases of test_hostile_inputs.py
    assert files - used == set() and used - files == {f"{PY}/missing.py"}


@pytest.mark.parametrize("name", sorted(FILE_CASES))
def test_bad_file_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    message = _refused(capsys, _file_argv(name, tmp_path))
    assert str(CORPUS / name) in message or name.startswith(SPEC)
    assert FILE_CASES[name][2] in message


@pytest.mark.parametrize("name", sorted(n for n in FILE_CASES if n.startswith(DB)))
@pytest.mark.parametrize("command", ["plot", "run"])
def test_bad_database_is_one_line_for_every_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, command: str
) -> None:
    db = str(CORPUS / name)
    if command == "plot":
        argv = ["sweep", "plot", db, "--kind", "line", "--x", "a", "--metric", "b"]
        argv += ["-o", str(tmp_path / "p.png")]
    else:
        (tmp_path / "one.yaml").write_text(ONE_RUN_SPEC)
        argv = ["sweep", str(tmp_path / "one.yaml"), "--db", db, "--jobs", "1", "--quiet"]
    before = (CORPUS / name).read_bytes()
    message = _refused(capsys, argv, quiet=command != "run")  # run prints its plan first
    assert message.startswith(db) and FILE_CASES[name][2] in message
    assert (CORPUS / name).read_bytes() == before, "a refused database is left as it was"


@pytest.mark.parametrize("case", sorted(PYTHON_CASES))
def test_bad_python_workload_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str
) -> None:
    message = _refused(capsys, ["run", str(CORPUS / PY / case), "--config", "tiny"])
    assert _fill([PYTHON_CASES[case]], tmp_path)[0] in message


@pytest.mark.parametrize("case", sorted(PYTHON_LIMIT_CASES))
def test_a_kernel_that_never_ends_is_stopped_with_one_line(
    capsys: pytest.CaptureFixture[str], case: str
) -> None:
    options, says = PYTHON_LIMIT_CASES[case]
    argv = ["run", str(CORPUS / PY / case), "--config", "tiny", "--timing-only", *options]
    assert says in _refused(capsys, argv)


@pytest.mark.parametrize("workload", sorted(WORKLOADS), ids=lambda w: w[:40])
def test_bad_workload_string_is_one_line(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    workload: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    message = _refused(capsys, ["run", workload, "--config", "tiny"] if workload else ["run"])
    assert WORKLOADS[workload] in message
    assert len(message) < 500, "a long string is shortened in the message"


@pytest.mark.parametrize("value", sorted(SET_VALUES), ids=lambda v: v[:40])
def test_bad_set_value_of_run_is_one_line(capsys: pytest.CaptureFixture[str], value: str) -> None:
    message = _refused(capsys, ["run", "softmax", "--config", "tiny", "--set", value])
    assert SET_VALUES[value] in message


@pytest.mark.parametrize("argv", sorted(ARGUMENTS), ids=" ".join)
def test_bad_arguments_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: tuple[str, ...]
) -> None:
    assert ARGUMENTS[argv] in _refused(capsys, _fill(list(argv), tmp_path))


@pytest.mark.parametrize("command", ["run", "demo"])
def test_bad_out_is_one_line_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    cases = _out_cases(tmp_path)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    for out, says in cases.items():
        argv = ["run", "gemm:32x32x32", "--timing-only"] if command == "run" else ["demo"]
        message = _refused(capsys, [*argv, "--config", "tiny", "--out", out])
        assert says in message, out[:80]
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert (tmp_path / "a_file").read_text() == "precious\n"
    assert (tmp_path / "unbound" / "thesis.tex").read_text() == "years of work\n"
    assert (tmp_path / "copied" / "summary.json").read_text() == "my notes\n"


@pytest.mark.parametrize(
    "name", sorted(p.name for p in (DATA / "bad_configs").iterdir()), ids=lambda n: n[:-5]
)
@pytest.mark.parametrize("command", ["run", "config peaks", "sweep"])
def test_bad_config_file_is_one_line_through_every_front_door(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, command: str
) -> None:
    path = DATA / "bad_configs" / name
    if command == "run":
        argv = ["run", "softmax", "--config", str(path)]
    elif command == "sweep":
        copy = tmp_path / "bad.yaml"
        copy.write_bytes(path.read_bytes())
        spec = tmp_path / "spec.yaml"
        spec.write_text("name: s\nbase: bad.yaml\nworkloads: [softmax]\n")
        argv = ["sweep", str(spec), "--dry-run"]
    else:
        argv = ["config", "peaks", str(path)]
    assert (name if command != "sweep" else "bad.yaml") in _refused(capsys, argv)


# ---- the torch commands (export, validate): importing torch is not timed ------------------------

#: FILE.py:FACTORY of `hwsim export` -> what the one line says
TORCH_CASES = {
    "not_callable.py:x": "'x' is a int, not a function",
    "not_callable.py:y": "not_callable.py defines no 'y'; it defines x",
    "missing.py:make": "no file {py}/missing.py",
    "raises_on_import.py:make": "failed: this module refuses to be imported",
    "syntax_error.py:make": "'(' was never closed",
    "factory_raises.py:make": "calling it raised KeyError: 'no model'",
    "factory_returns_int.py:make": "returned int; expected (model, args) or (model, args, kwargs)",
}

#: `hwsim export` / `hwsim validate` arguments -> what the one line says
TORCH_ARGUMENTS = {
    ("export", "nosuch", "-o", "{tmp}/x.hwprog"): "unknown model 'nosuch': use one of tiny-gpt2",
    ("export", "mlp", "-o", "{tmp}/x.txt"): "-o {tmp}/x.txt: saved programs end in .hwprog",
    ("export", "mlp", "-o", "{tmp}/d.hwprog"): "{tmp}/d.hwprog is a folder; name a file to write",
    (
        "export",
        "mlp",
        "-o",
        "{tmp}/f/x.hwprog",
    ): "cannot create {tmp}/f/x.hwprog: {tmp}/f is a file",
    ("export", "mlp", "-o", "{tmp}/x.hwprog", "--seq", "0"): "--seq 0: the built-in models take",
    ("export", "mlp", "-o", "{tmp}/x.hwprog", "--seq", "abc"): "--seq: invalid int value: 'abc'",
    ("export", "mlp", "-o", "{tmp}/x.hwprog", "--auto-cast-type", "fp64"): "invalid choice: 'fp64'",
    ("export", "mlp"): "the following arguments are required: -o/--out",
    ("export", "mlp", "-o", "{tmp}/x.hwprog", "--config", "trn9"): "trn9: not a preset",
    ("export", "mlp", "-o", "{tmp}/x.hwprog", "--set", "nokey=1"): "nokey: unknown key",
    ("validate",): "the following arguments are required: CHECK",
    ("validate", "nosuch"): "argument CHECK: invalid choice: 'nosuch'",
    ("validate", "opinfo", "--ops", "nosuch_op"): "--ops nosuch_op: no OpInfo entry or lowered",
    ("validate", "opinfo", "--config", "trn9", "--ops", "add"): "trn9: not a preset",
    ("validate", "opinfo", "--dtype", "float64"): "argument --dtype: invalid choice: 'float64'",
    ("validate", "opinfo", "--max-samples", "-1"): "--max-samples: expected at least 1, got -1",
    ("validate", "opinfo", "--max-elements", "0"): "--max-elements: expected at least 1, got 0",
    ("validate", "opinfo", "--ops", "add", "--docs", "/"): "/ is a folder; name a file to write",
    ("validate", "opinfo", "--ops", "add", "--json", "{tmp}/f/x.json"): "{tmp}/f is a file",
    ("export", "mlp", "-o", "{tmp}/x.hwprog", "--passes", "bogus"): (
        "--passes bogus: unknown hwsim pass 'bogus'"
    ),
}


@pytest.fixture(scope="module")
def _torch_commands_imported() -> None:
    pytest.importorskip("torch")
    for module in ("hwsim.bridge.export_cmd", "hwsim.bridge.validate_cmd", "hwsim.bridge.opinfo"):
        importlib.import_module(module)
    from hwsim.bridge.opinfo_map import opinfo_db

    opinfo_db()  # PyTorch's OpInfo database: its first import takes seconds


@pytest.mark.usefixtures("_torch_commands_imported")
@pytest.mark.parametrize("case", sorted(TORCH_CASES))
def test_bad_model_factory_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str
) -> None:
    argv = ["export", str(CORPUS / PY / case), "-o", str(tmp_path / "m.hwprog"), "--config", "tiny"]
    assert _fill([TORCH_CASES[case]], tmp_path)[0] in _refused(capsys, argv)
    assert not (tmp_path / "m.hwprog").exists()


@pytest.mark.usefixtures("_torch_commands_imported")
@pytest.mark.parametrize("argv", sorted(TORCH_ARGUMENTS), ids=" ".join)
def test_bad_torch_command_arguments_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: tuple[str, ...]
) -> None:
    (tmp_path / "f").write_text("a file, not a folder\n")
    (tmp_path / "d.hwprog").mkdir()
    message = _refused(capsys, _fill(list(argv), tmp_path))
    assert _fill([TORCH_ARGUMENTS[argv]], tmp_path)[0] in message


# ---- --debug, and the installed command's real exit status and stderr ---------------------------

#: one case of each class that fails inside a command (argparse errors have no traceback)
DEBUG_CASES: dict[str, Callable[[Path], list[str]]] = {
    "saved program": lambda tmp: _file_argv(f"{P}/pickle_renamed.hwprog", tmp),
    "sweep database": lambda tmp: _file_argv(f"{DB}/truncated.sqlite", tmp),
    "trace": lambda tmp: _file_argv(f"{TR}/summary_fields_wrong.json", tmp),
    "sweep spec": lambda tmp: _file_argv(f"{SPEC}/huge_grid.yaml", tmp),
    "user code": lambda tmp: ["run", f"{CORPUS / PY}/builder_raises.py:build", "--config", "tiny"],
    "workload string": lambda tmp: ["run", "gemm:1000000000x1000000000x128", "--config", "tiny"],
    "--out": lambda tmp: ["run", "gemm:32x32x32", "--config", "tiny", "--out", "/"],
}


@pytest.mark.parametrize("case", sorted(DEBUG_CASES))
def test_debug_raises_the_error_with_its_cause(tmp_path: Path, case: str) -> None:
    with pytest.raises(HwsimError) as info:
        main(["--debug", *DEBUG_CASES[case](tmp_path)])
    if case in ("user code", "trace"):  # the user's own exception is kept as the cause
        assert isinstance(info.value.__cause__, ValueError)


def _installed(*argv: str) -> subprocess.CompletedProcess[str]:
    entry = "import sys; from hwsim.cli import main; sys.exit(main())"
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run(
        [sys.executable, "-c", entry, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


@pytest.mark.parametrize("case", ["saved program", "trace", "user code"])
def test_the_installed_command_exits_2_with_one_line_and_debug_shows_the_traceback(
    tmp_path: Path, case: str
) -> None:
    argv = DEBUG_CASES[case](tmp_path)
    done = _installed(*argv)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("hwsim: error: ")
    debug = _installed("--debug", *argv)
    assert debug.returncode == 1
    assert debug.stderr.startswith("Traceback (most recent call last):")
    assert "HwsimError" in debug.stderr or "Error: " in debug.stderr.splitlines()[-1]


def test_a_usage_error_of_the_installed_command_is_one_line() -> None:
    done = _installed("sweep", "x.yaml", "--jobs", "x")
    assert done.returncode == 2
    assert done.stderr == (
        "hwsim: error: hwsim sweep: argument --jobs/-j: expected a whole number, got 'x' "
        "(see hwsim sweep --help)\n"
    )


NKI_FILE = str(DATA / "nki_never_seen.py")
#: ``hwsim nki`` argv -> what its one line says.
NKI_ARGUMENTS = {
    ("nki", "missing.py:kernel"): "no such file",
    ("nki", f"{NKI_FILE}:nope"): "no kernel 'nope'",
    ("nki", NKI_FILE): "write FILE.py:KERNEL",
    ("nki", f"{NKI_FILE}:scale_bias_relu", "--config", "nope"): "not a preset",
    ("nki", f"{NKI_FILE}:scale_bias_relu", "--shape", "x=abc"): "ASCII digits",
    ("nki", f"{NKI_FILE}:scale_bias_relu", "--shape", "x=１２８x4"): "ASCII digits",
    ("nki", f"{NKI_FILE}:scale_bias_relu", "--shape", "x=0x4"): "every dim >= 1",
    ("nki", f"{NKI_FILE}:scale_bias_relu", "--shape", "x=100000x100000"): "at most",
    ("nki", f"{NKI_FILE}:scale_bias_relu", "--shape", "x=4x4:fp99"): "unknown dtype",
    ("nki", f"{NKI_FILE}:scale_bias_relu", "--shape", "nosuch=4x4"): "a parameter of",
    ("nki", f"{NKI_FILE}:scale_bias_relu", "--shape", "x=4x4"): "drop --shape",
    ("nki", f"{NKI_FILE}:scale_bias_relu", "--out", "/"): "filesystem root",
}


@pytest.mark.parametrize("argv", sorted(NKI_ARGUMENTS), ids=" ".join)
def test_bad_nki_command_arguments_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    assert NKI_ARGUMENTS[argv] in _refused(capsys, list(argv))
