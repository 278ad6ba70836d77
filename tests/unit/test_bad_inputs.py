"""Hostile and broken inputs (``tests/data/bad_configs/``, bad ``--set`` values, bad sweep specs):
each fails with exit code 2 and one line naming the file, line and dotted path, in seconds.

The same bad YAML is also given to the sweep-spec loader, behind three lines of spec, so both
front doors are held to the same contract (and the line numbers move by exactly three).
"""

from __future__ import annotations

import importlib
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hwsim.cli.main import main
from hwsim.config.yaml_safe import MAX_FILE_BYTES

BAD_CONFIGS = Path(__file__).resolve().parents[1] / "data" / "bad_configs"
#: CPU-time bound of one refusal: anything that expands or recurses takes far longer. CPU time,
#: not wall time, so that a loaded machine cannot fail it; a wall bound far above it (``HANG_S``)
#: still catches a refusal that waits instead of computing.
MAX_CPU_S = 5.0
HANG_S = 60.0
#: What makes a config file a sweep spec; the corpus's own lines follow it.
SPEC_HEAD = b"name: bad\nbase: tiny\nworkloads: [softmax]\n"

#: file -> (line of the error, what the message says there; {first} is a line it names)
CORPUS = {
    "alias_bomb.yaml": (9, "alias *a5 expands past 100000 values at chip.l6[0]"),
    "recursive_alias.yaml": (2, "recursive alias *a at chip.name"),
    "deep_nesting.yaml": (33, "nesting deeper than 32 levels at k0.k1.k2"),
    "non_utf8.yaml": (3, "not UTF-8 text: byte 0xe9 at offset"),
    "utf16.yaml": (1, "not UTF-8 text: byte 0xff at offset"),
    "date_value.yaml": (3, "2024-01-01 reads as a date or time at chip.name"),
    "timestamp_value.yaml": (3, "2024-01-01 12:30:00 reads as a date or time at chip.built"),
    "binary_value.yaml": (2, "binary data (!!binary) at chip.name"),
    "set_value.yaml": (3, "a set (!!set) at dma"),
    "omap_value.yaml": (1, "an ordered map (!!omap) at chip"),
    "python_tag.yaml": (3, "a value tagged !!python/object/apply:os.system at chip.name"),
    "custom_tag.yaml": (2, "a value tagged !include at chip.name"),
    "duplicate_keys.yaml": (4, "duplicate key 'rows' at tensor_engine.rows (first at line {2}"),
    "duplicate_sections.yaml": (5, "duplicate key 'chip' at chip (first at line {1}"),
    "huge_integer.yaml": (2, "an integer of 5000 digits at vector_engine.pipeline_latency_cycles"),
    "infinite_float.yaml": (2, "'.inf' is not a finite number at dma.bandwidth_bytes_per_ns"),
    "nan_float.yaml": (2, "'.nan' is not a finite number at dma.bandwidth_bytes_per_ns"),
    "non_string_key.yaml": (3, "key '1' reads as an integer at tensor_engine.cycles_multiplier"),
    "boolean_key.yaml": (3, "key 'on' reads as a boolean at chip"),
    "undefined_alias.yaml": (2, "alias *nowhere names no anchor at chip.name"),
    "two_documents.yaml": (3, "not valid YAML at column 1 (expected a single document"),
    "control_character.yaml": (2, "not valid YAML at column 11"),
    "tab_indent.yaml": (2, "not valid YAML at column 1"),
}


@pytest.fixture(autouse=True, scope="module")
def _commands_imported() -> None:
    """The commands import their modules on first use (the simulator, for sweeps: seconds); the
    wall-time bound is for refusing the input, so that happens before any test is timed."""
    for module in ("hwsim.cli.config_cmd", "hwsim.sweep.execute", "hwsim.sweep.spec"):
        importlib.import_module(module)


def _expected(name: str, shift: int = 0) -> tuple[int, str]:
    """The error's line and text for a corpus file whose lines moved down by ``shift``."""
    line, what = CORPUS[name]
    return line + shift, re.sub(r"\{(\d+)\}", lambda m: str(int(m[1]) + shift), what)


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the CLI, check the contract (exit 2, nothing on stdout, one stderr line, quickly)."""
    start, start_cpu = time.perf_counter(), time.process_time()
    code = main(list(argv))
    wall_s, cpu_s = time.perf_counter() - start, time.process_time() - start_cpu
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith("hwsim: error: ")
    assert "Traceback" not in err
    assert cpu_s < MAX_CPU_S, f"refusing took {cpu_s:.1f} s of CPU"
    assert wall_s < HANG_S, f"refusing took {wall_s:.1f} s"
    return err.strip().removeprefix("hwsim: error: ")


def test_the_corpus_is_complete() -> None:
    assert sorted(p.name for p in BAD_CONFIGS.iterdir()) == sorted(CORPUS)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_bad_config_file_is_one_line(capsys: pytest.CaptureFixture[str], name: str) -> None:
    line, what = _expected(name)
    path = BAD_CONFIGS / name
    message = _refused(capsys, "config", "show", str(path))
    assert message.startswith(f"{path}:{line}: {what}")


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_bad_sweep_spec_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    line, what = _expected(name, shift=3)
    path = tmp_path / name
    path.write_bytes(SPEC_HEAD + (BAD_CONFIGS / name).read_bytes())
    message = _refused(capsys, "sweep", str(path), "--db", str(tmp_path / "db.sqlite"))
    assert message.startswith(f"{path}:{line}: {what}")
    assert not (tmp_path / "db.sqlite").exists(), "nothing runs before the spec is checked"


@pytest.mark.parametrize("command", ["config", "sweep"])
def test_a_huge_file_is_refused_before_it_is_parsed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as file:
        file.write(SPEC_HEAD)
        file.write(b"x: [" + b"1, " * (4 * MAX_FILE_BYTES // 3) + b"]\n")
    argv = ["config", "show", str(path)] if command == "config" else ["sweep", str(path)]
    message = _refused(capsys, *argv)
    assert message.startswith(f"{path}: ")
    assert "is larger than 2 MiB" in message


@pytest.mark.parametrize(
    ("override", "what"),
    [
        ("tensor_engine.rows=" + "9" * 5000, "an integer of 5000 digits at tensor_engine.rows"),
        (
            "vector_engine.pipeline_latency_cycles=18446744073709551617",  # 2**64 + 1
            "tiny: vector_engine.pipeline_latency_cycles: input should be less than or equal "
            "to 1000000, got 18446744073709551617 (allowed: 0 <= value <= 1000000)",
        ),
        ("chip.name=2024-01-01", "2024-01-01 reads as a date or time at chip.name"),
        ("chip.name=!!binary aGk=", "binary data (!!binary) at chip.name"),
        ("chip.name=!!set {a}", "a set (!!set) at chip.name"),
        ("tensor_engine.rows=!!python/object/apply:os.system [ls]", "a value tagged !!python"),
        ("dma.bandwidth_bytes_per_ns=.inf", "'.inf' is not a finite number at dma.bandwidth"),
        ("chip.name=*a", "alias *a names no anchor at chip.name"),
        ("chip.name=" + "[" * 40 + "]" * 40, "nesting deeper than 32 levels at chip.name[0]"),
        (
            "tensor_engine.cycles_multiplier_by_dtype={bf16: 1, bf16: 2}",
            "duplicate key 'bf16' at tensor_engine.cycles_multiplier_by_dtype.bf16",
        ),
        ("tensor_engine.rows=[1,", "value is not valid YAML ("),
    ],
)
def test_bad_set_value_is_one_line(
    capsys: pytest.CaptureFixture[str], override: str, what: str
) -> None:
    message = _refused(capsys, "config", "show", "tiny", "--set", override)
    assert what in message
    assert len(message) < 400, "a long value is shortened in the message"


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (
            "set: {tensor_engine.rows: " + "9" * 30 + "}\n",
            "bad.yaml:4: an integer of 30 digits at set.tensor_engine.rows",
        ),
        (
            "x: &x [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
            + "".join(
                f"x{i}: &x{i} [{', '.join(['*x' if i == 0 else f'*x{i - 1}'] * 10)}]\n"
                for i in range(6)
            )
            + "parameters: {grid: {dma.engines: *x5}}\n",
            # 12,358 nodes when x3's list opens, 11,111 per alias of x2: the eighth crosses
            "bad.yaml:8: alias *x2 expands past 100000 values at x3[7] (use fewer aliases",
        ),
        (
            "parameters:\n  grid:\n    dma.engines: [1, 2]\n    dma.engines: [4]\n",
            "bad.yaml:7: duplicate key 'dma.engines' at parameters.grid.dma.engines",
        ),
        (
            "parameters: {random: {samples: 3, seed: 0, parameters: "
            "{dma.bandwidth_bytes_per_ns: {low: 1.0, high: .inf}}}}\n",
            "bad.yaml:4: '.inf' is not a finite number at "
            "parameters.random.parameters.dma.bandwidth_bytes_per_ns.high",
        ),
    ],
)
def test_bad_values_inside_a_sweep_spec_name_their_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, body: str, what: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(SPEC_HEAD + body.encode())
    assert _refused(capsys, "sweep", str(path)).startswith(f"{tmp_path}/{what}")


def _children_cpu_s() -> float:
    """CPU seconds used so far by this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _limit_memory() -> None:
    one_gib = 1 << 30
    resource.setrlimit(resource.RLIMIT_AS, (one_gib, one_gib))


def test_the_alias_bomb_is_refused_by_the_installed_command_within_1_gib() -> None:
    # Before the bounded loader, this file loaded and then expanded (2.2 GB and still running
    # after 120 s; under this 1 GiB cap: a MemoryError traceback after 38 s).
    entry = "import sys; from hwsim.cli import main; sys.exit(main())"
    children_cpu = _children_cpu_s()
    done = subprocess.run(
        [sys.executable, "-c", entry, "config", "show", str(BAD_CONFIGS / "alias_bomb.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limit_memory,
        check=False,
    )
    assert _children_cpu_s() - children_cpu < MAX_CPU_S + 5  # + the interpreter's start-up
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"hwsim: error: {BAD_CONFIGS / 'alias_bomb.yaml'}:9: alias *a5 expands past 100000 "
        "values at chip.l6[0] (use fewer aliases or write the values out)"
    ]


@pytest.mark.parametrize(
    ("condition", "what"),
    [
        ("dma.engines=[1,", "--where 'dma.engines=[1,': value is not valid YAML ("),
        ("dma.engines=2024-01-01", "2024-01-01 reads as a date or time at dma.engines"),
        (
            "dma.engines=" + "9" * 5000,
            "(5012 characters): an integer of 5000 digits at dma.engines",
        ),
    ],
)
def test_bad_where_values_of_sweep_plots_are_one_line(condition: str, what: str) -> None:
    from hwsim.sweep.errors import SweepError
    from hwsim.sweep.table import Results, select

    results = Results(
        [{"workload": "w", "dma.engines": 8, "total_ns": 1.0}], ["dma.engines"], ["total_ns"]
    )
    assert len(select(results, where=["dma.engines=8"])) == 1
    with pytest.raises(SweepError) as info:
        select(results, where=[condition])
    assert what in str(info.value)
    assert len(str(info.value)) < 300
