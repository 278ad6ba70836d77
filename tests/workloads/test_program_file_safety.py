"""Loading a saved program runs no code and trusts nothing: old pickles are refused unread, newer
formats and edited or corrupted files are named, and every malformed field is one line naming
the file and the field path (``hwsim.errors.SavedProgramError``), never a Python exception."""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import json
import pickle
import random
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hwsim.dtypes import DTYPES
from hwsim.engines import engine_names
from hwsim.errors import HwsimError, SavedProgramError
from hwsim.isa import ISA
from hwsim.kernels.ops import ActivationFunction, AluOp, ReduceOp
from hwsim.machine.simulator import run
from hwsim.workloads import program_archive
from hwsim.workloads.program_archive import write_entries
from hwsim.workloads.saved import EXPECTED_OUTPUTS, LOWERED_FOR, load_program, save_program
from tests.workloads.program_examples import every_op_program

cli = importlib.import_module("hwsim.cli.main")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    program = every_op_program()
    program.meta[LOWERED_FOR] = {
        "config": "tiny",
        "config_hash": "0",
        "generation": "v3",
        "geometry": {"tensor_engine.rows": 32},
        "requires": {"dma.queues_per_engine": 1},
    }
    program.meta[EXPECTED_OUTPUTS] = {
        "out": {"values": np.zeros(512, np.float32), "rtol": 0.0, "atol": 1e-5, "shape": (32, 16)}
    }
    return save_program(program, tmp_path_factory.mktemp("safety") / "every_op.hwprog")


def _entries(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _document(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(_entries(path)["program.json"])
    return document


def _rewrite(
    path: Path, target: Path, document: Any, arrays: dict[str, bytes] | None = None
) -> Path:
    """``target``: ``path`` with ``document`` instead, hashed as the writer would (so what is
    tested is the field checks, not the hash)."""
    entries = _entries(path)
    if arrays is None:
        arrays = {n: data for n, data in entries.items() if n.startswith("arrays/")}
    write_entries(target, json.dumps(document).encode(), arrays)
    return target


def _load_error(path: Path) -> str:
    with pytest.raises(SavedProgramError) as error:
        load_program(path)
    message = str(error.value)
    assert "\n" not in message and message.startswith(str(path)), message
    return message


# ---- old pickles --------------------------------------------------------------------------------


class _WritesMarker:
    """Unpickling this creates the marker file: what any pickle may do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def test_an_old_pickle_is_refused_without_being_unpickled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "code-ran"
    payload = pickle.dumps({"format": "hwsim.program/1", "program": _WritesMarker(marker)}, 5)
    path = tmp_path / "old.hwprog"
    path.write_bytes(payload)
    code = cli.main(["run", str(path), "--config", "tiny"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err == (
        f"hwsim: error: {path} is an old pickle-format saved program (hwsim.program/1); pickles "
        "can run code and are no longer loaded: export it again with `hwsim export`\n"
    )
    assert not marker.exists()
    pickle.loads(payload)  # the control: this file really runs code when unpickled
    assert marker.exists()


def test_no_code_loading_deserializer_remains_in_the_packages() -> None:
    forbidden = re.compile(
        r"pickle\.loads?\(|cPickle|dill\.loads?\(|cloudpickle\.loads?\(|joblib\.load\(|"
        r"marshal\.loads?\(|shelve\.open\(|read_pickle\(|allow_pickle\s*=\s*True|"
        r"yaml\.unsafe_load|yaml\.load\((?![^)]*SafeLoader)|torch\.load\((?![^)]*weights_only=True)"
    )
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in ("hwsim", "bridge", "kernels")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if forbidden.search(line)
    ]
    assert found == []


# ---- versions, hashes, containers ---------------------------------------------------------------


def test_a_newer_format_is_named_with_both_versions(saved: Path, tmp_path: Path) -> None:
    entries = _entries(saved)
    manifest = json.loads(entries["manifest.json"])
    manifest["version"] = 7
    path = tmp_path / "newer.hwprog"
    with zipfile.ZipFile(path, "w") as archive:  # a newer hwsim may change all but the manifest
        archive.writestr("manifest.json", json.dumps(manifest))
        archive.writestr("program.json", b"{a format this hwsim cannot read")
    assert _load_error(path) == (
        f"{path}: written by a newer hwsim (format 7; this hwsim reads up to 3): upgrade hwsim, "
        "or export the program again with this one"
    )


def test_an_edited_file_fails_its_content_hash(saved: Path, tmp_path: Path) -> None:
    entries = _entries(saved)
    entries["program.json"] = entries["program.json"].replace(b'"tiny"', b'"trn2"', 1)
    path = tmp_path / "edited.hwprog"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    assert "corrupted or edited: content hash mismatch" in _load_error(path)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "not a saved hwsim program (saved programs are zip archives"),
        (b"name: gemm\n", "not a saved hwsim program"),
        (b"PK\x03\x04garbage", "corrupted: not a readable zip archive"),
    ],
)
def test_files_that_are_not_saved_programs(tmp_path: Path, content: bytes, says: str) -> None:
    path = tmp_path / "x.hwprog"
    path.write_bytes(content)
    assert says in _load_error(path)


def test_zips_that_are_not_saved_programs(saved: Path, tmp_path: Path) -> None:
    path = tmp_path / "npz.hwprog"
    np.savez(io.BytesIO(), a=np.ones(2))
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a.npy", b"")
    assert "no manifest.json in the archive" in _load_error(path)
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in _entries(saved).items():
            archive.writestr(name, data)
        archive.writestr("run_me.py", "print('hi')")
    assert "unexpected entry 'run_me.py'" in _load_error(path)


def test_sizes_are_refused_before_anything_is_read(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(program_archive, "MAX_PROGRAM_BYTES", 1000)
    assert "more than the 1000 a saved program may (MAX_PROGRAM_BYTES); refused before" in (
        _load_error(saved)
    )


# ---- every field checked ------------------------------------------------------------------------


def _first(document: dict[str, Any], opcode: str) -> tuple[str, int, dict[str, Any]]:
    for engine, stream in document["cores"][0]["streams"].items():
        for pc, instruction in enumerate(stream):
            if instruction["opcode"] == opcode:
                return engine, pc, instruction
    raise AssertionError(opcode)


def _at(opcode: str, edit: Callable[[dict[str, Any]], Any], tail: str) -> Any:
    """A case editing the first ``opcode`` instruction; its path prefix is filled in by the test."""

    def mutate(document: dict[str, Any]) -> str:
        engine, pc, instruction = _first(document, opcode)
        edit(instruction)
        return f"cores[0].streams.{engine}[{pc}]{tail}"

    return mutate


def _hbm(index_of: str, edit: Callable[[dict[str, Any]], Any], tail: str) -> Any:
    def mutate(document: dict[str, Any]) -> str:
        index = next(i for i, d in enumerate(document["hbm"]) if d["name"] == index_of)
        edit(document["hbm"][index])
        return f"hbm[{index}]{tail}"

    return mutate


def _top(edit: Callable[[dict[str, Any]], Any], path: str) -> Any:
    def mutate(document: dict[str, Any]) -> str:
        edit(document)
        return path

    return mutate


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        node = data
        *parents, last = key.split("/")
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value

    return edit


def _move_to_unknown_stream(document: dict[str, Any]) -> None:
    streams = document["cores"][0]["streams"]
    streams["vectr"] = streams.pop("vector")


MALFORMED = {
    "free sizes not a list": (
        _at("tensor_tensor", _set("src0/free_sizes", "16"), ".src0.free_sizes"),
        "expected a list of ints, got the string '16'",
    ),
    "free size not an int": (
        _at("tensor_tensor", _set("src0/free_sizes", [16.0]), ".src0.free_sizes[0]"),
        "expected an int, got the number 16.0",
    ),
    "unknown opcode": (
        _at("tensor_tensor", _set("opcode", "tensor_tensr"), ".opcode"),
        "unknown opcode 'tensor_tensr'; did you mean 'tensor_tensor'?",
    ),
    "unknown enum name": (
        _at("tensor_tensor", _set("op", "plus"), ".op"),
        "unknown AluOp 'plus'",
    ),
    "enum as a number": (
        _at("tensor_tensor", _set("op", 0), ".op"),
        "expected an AluOp name, got the number 0",
    ),
    "bad dtype": (
        _at("tensor_tensor", _set("dst/dtype", "fp33"), ".dst.dtype"),
        "unknown dtype 'fp33' (did you mean 'fp32'?)",
    ),
    "bad memory": (
        _at("tensor_tensor", _set("dst/memory", "L2"), ".dst.memory"),
        "unknown MemorySpace 'L2' (valid: HBM, SBUF, PSUM)",
    ),
    "semaphore value a string": (
        _at("nc_matmul", _set("waits/0/1", "1"), ".waits[0][1]"),
        "expected an int, got the string '1'",
    ),
    "semaphore name a number": (
        _at("nc_matmul", _set("signals/0/0", 3), ".signals[0][0]"),
        "expected a string, got the number 3",
    ),
    "semaphore pair of three": (
        _at("nc_matmul", _set("signals/0", ["S.tensor", 1, 2]), ".signals[0]"),
        "expected a [string, int] list, got a list of 3",
    ),
    "bool as an int": (
        _at("nc_matmul", _set("accumulate", 1), ".accumulate"),
        "expected true or false, got the number 1",
    ),
    "int as a bool": (
        _at("dma_copy", _set("queue", True), ".queue"),
        "expected an int, got true",
    ),
    "int beyond int64": (
        _at("dma_copy", _set("queue", 2**64), ".queue"),
        "18446744073709551616 is outside the int64 range",
    ),
    "missing field": (
        _at("dma_copy", lambda i: i.pop("src"), ".src"),
        "missing (every field of a dma_copy instruction is required)",
    ),
    "unknown field": (
        _at("dma_copy", _set("priority", 1), ".priority"),
        "unknown field (the fields are dge_mode, dst, engine, name, opcode, queue, signals, "
        "src, tag, waits)",
    ),
    "strides and sizes disagree": (
        _at("tensor_tensor", _set("src0/free_strides", [1, 1]), ".src0.free_strides"),
        "has 2 strides for 1 free sizes (one per free dim)",
    ),
    "no free dims": (
        _at("tensor_tensor", _set("src0/free_sizes", []), ".src0.free_sizes"),
        "has 0 free dims (1 to 4)",
    ),
    "huge operand": (
        _at("tensor_tensor", _set("src0/free_sizes", [2**36]), ".src0.free_sizes"),
        "the operand covers 8796093022208 bytes, more than MAX_PROGRAM_BYTES",
    ),
    "huge offset": (
        _at("tensor_tensor", _set("src0/offset_bytes", -(2**60)), ".src0.offset_bytes"),
        "-1152921504606846976 is beyond ±MAX_PROGRAM_BYTES",
    ),
    "scalar neither number nor pattern": (
        _at("activation", _set("scale", [1]), ".scale"),
        'expected a number (or "Infinity", "-Infinity", "NaN") or an AccessPattern object, '
        "got a list of 1",
    ),
    "non-finite float misspelt": (
        _at("memset", _set("value", "-inf"), ".value"),
        'expected a number (or "Infinity", "-Infinity", "NaN"), got the string \'-inf\'',
    ),
    "undeclared HBM tensor": (
        _at("dma_copy", _set("src/tensor", "weights"), ".src.tensor"),
        "names HBM tensor 'weights', which the program does not declare",
    ),
    "instruction on another engine's stream": (
        _at("tensor_tensor", _set("engine", "scalar"), ".engine"),
        "the tensor_tensor says engine 'scalar' but sits in the vector stream",
    ),
    "unknown engine stream": (
        _top(_move_to_unknown_stream, "cores[0].streams.vectr"),
        "unknown engine 'vectr' (the engines are tensor, vector, scalar, gpsimd, sync, collective)",
    ),
    "instruction not an object": (
        _top(_set("cores/0/streams/vector/0", "tensor_tensor"), "cores[0].streams.vector[0]"),
        "expected an instruction object, got the string 'tensor_tensor'",
    ),
    "negative shape": (
        _hbm("x", _set("shape", [-32, 16]), ".shape"),
        "[-32, 16] has a negative size",
    ),
    "huge shape": (
        _hbm("out", _set("shape", [2**40, 2**20]), ".shape"),
        "[1099511627776, 1048576] fp32 is 4611686018427387904 bytes, more than MAX_PROGRAM_BYTES",
    ),
    "values do not match the shape": (
        _hbm("x", _set("shape", [16, 32]), ".values"),
        "the array has shape [32, 16], the tensor is declared [16, 32]",
    ),
    "values of another dtype than stored": (
        _hbm("x", _set("values/dtype", "int32"), ".values.npy"),
        "arrays/0.npy: holds float32, expected int32",
    ),
    "values naming no entry": (
        _hbm("x", _set("values/npy", "../../etc/passwd"), ".values.npy"),
        "names no array entry of the file: the string '../../etc/passwd'",
    ),
    "negative address": (
        _hbm("x", _set("address_bytes", -64), ".address_bytes"),
        "-64 is outside 0..",
    ),
    "unknown tensor kind": (
        _hbm("x", _set("kind", "weights"), ".kind"),
        "unknown value 'weights' (valid: input, output, scratch)",
    ),
    "tensor declared twice": (
        _hbm("out", _set("name", "x"), ".name"),
        "HBM tensor 'x' is declared twice",
    ),
    "allocation in HBM": (
        _top(_set("allocations/0/memory", "hbm"), "allocations[0].memory"),
        "unknown memory 'hbm' (allocations are in sbuf or psum)",
    ),
    "allocation of another core": (
        _top(_set("allocations/0/core", 3), "allocations[0].core"),
        "core 3 does not exist (the program has 1)",
    ),
    "document key missing": (
        _top(lambda d: d.pop("allocations"), "allocations"),
        "missing (a program has hbm, cores, allocations, meta)",
    ),
    "geometry of an unknown field": (
        _top(_set("meta/lowered_for/geometry/sbuf.size", 4), "meta.lowered_for.geometry.sbuf.size"),
        "not a config field this check knows",
    ),
    "geometry not an int": (
        _top(
            _set("meta/lowered_for/geometry/tensor_engine.rows", "32"),
            "meta.lowered_for.geometry.tensor_engine.rows",
        ),
        "expected an int, got the string '32'",
    ),
    "expected outputs of an input": (
        _top(
            lambda d: d["meta"][EXPECTED_OUTPUTS].update(x=d["meta"][EXPECTED_OUTPUTS].pop("out")),
            "meta.expected_outputs.x",
        ),
        "not an output HBM tensor of the program (outputs: out, red)",
    ),
    "negative tolerance": (
        _top(_set("meta/expected_outputs/out/atol", -1), "meta.expected_outputs.out.atol"),
        "expected a finite number >= 0, got the number -1",
    ),
    "unknown meta tag": (
        _top(_set("meta/when", {"$date": "today"}), "meta.when.$date"),
        "unknown tag (meta tags are $tuple, $array and $float)",
    ),
    "summary dtype": (
        _top(_set("meta/dtype", ["bf16"]), "meta.dtype"),
        "unknown dtype a list of 1",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_field_is_one_line_naming_file_and_path(
    saved: Path, tmp_path: Path, case: str
) -> None:
    mutate, says = MALFORMED[case]
    document = _document(saved)
    path = mutate(document)
    target = _rewrite(saved, tmp_path / "bad.hwprog", document)
    assert _load_error(target).startswith(f"{target}: {path}: {says}")


@pytest.mark.parametrize(
    ("arrays", "says"),
    [
        ({"arrays/9.npy": b"\x93NUMPY\x01\x00"}, "array entry arrays/9.npy is not referenced"),
        ({"arrays/0.npy": b"not an npy"}, "not a valid .npy array"),
    ],
)
def test_array_entries_are_checked(
    saved: Path, tmp_path: Path, arrays: dict[str, bytes], says: str
) -> None:
    entries = _entries(saved)
    merged = {n: d for n, d in entries.items() if n.startswith("arrays/")} | arrays
    target = _rewrite(saved, tmp_path / "a.hwprog", _document(saved), merged)
    assert says in _load_error(target)


def test_an_array_whose_header_lies_about_its_size_or_holds_objects_is_refused(
    saved: Path, tmp_path: Path
) -> None:
    document = _document(saved)
    index = next(i for i, d in enumerate(document["hbm"]) if d["name"] == "x")
    name = document["hbm"][index]["values"]["npy"]
    arrays = {n: d for n, d in _entries(saved).items() if n.startswith("arrays/")}
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (2**40,)}
    )
    arrays[name] = header.getvalue() + b"\0" * 16  # claims 4 TiB, holds 16 bytes
    target = _rewrite(saved, tmp_path / "lie.hwprog", document, arrays)
    assert "needs 4398046511104 bytes, the entry holds 16" in _load_error(target)
    objects = io.BytesIO()
    np.save(objects, np.array([_WritesMarker(tmp_path / "m")], dtype=object), allow_pickle=True)
    arrays[name] = objects.getvalue()
    target = _rewrite(saved, tmp_path / "objects.hwprog", document, arrays)
    assert "holds object, expected float32" in _load_error(target)
    assert not (tmp_path / "m").exists()


# ---- fuzzing: whatever the damage, one clear error ----------------------------------------------


def _strict_objects(document: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every value outside the free-form meta (whose every value is valid), with the
    meta entries hwsim checks."""
    if path[:1] == ("meta",) and not (
        path[1:2] in (("lowered_for",), (EXPECTED_OUTPUTS,)) or len(path) == 1
    ):
        return []
    out = [path] if path else []
    if isinstance(document, dict):
        for key, value in document.items():
            out += _strict_objects(value, (*path, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            out += _strict_objects(value, (*path, index))
    return out


def _get(document: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        document = document[part]
    return document


def test_fuzzed_documents_always_fail_with_one_clear_line(saved: Path, tmp_path: Path) -> None:
    """Drop a key of a checked object, or give a value another JSON kind: always an error."""
    original = _document(saved)
    paths = _strict_objects(original)
    rng = random.Random(15)
    target = tmp_path / "fuzzed.hwprog"
    tried = 0
    for path in rng.sample(paths, 150):
        document = copy.deepcopy(original)
        parent, key = _get(document, path[:-1]), path[-1]
        value = parent[key]
        if isinstance(parent, dict) and rng.random() < 0.4:
            if path[:2] == ("meta", EXPECTED_OUTPUTS) and len(path) == 3:
                continue  # an output without expected values is valid
            del parent[key]
        elif isinstance(value, str):
            if value in ("Infinity", "-Infinity", "NaN"):
                continue  # a float field: a number is valid there
            parent[key] = 5
        else:
            parent[key] = "x"
        _rewrite(saved, target, document)
        _load_error(target)
        tried += 1
    assert tried > 120


def test_truncated_or_flipped_bytes_fail_cleanly_or_load_the_same_program(
    saved: Path, tmp_path: Path
) -> None:
    data = saved.read_bytes()
    original = load_program(saved)
    rng = random.Random(15)
    target = tmp_path / "damaged.hwprog"
    cuts = [*sorted(rng.sample(range(len(data)), 20)), 0, 1, 4, len(data) - 1]
    for cut in cuts:
        target.write_bytes(data[:cut])
        _load_error(target)
    loaded_anyway = 0
    for _ in range(80):
        damaged = bytearray(data)
        for position in rng.sample(range(len(data)), rng.randint(1, 3)):
            damaged[position] ^= 1 << rng.randrange(8)
        target.write_bytes(bytes(damaged))
        try:
            program = load_program(target)
        except SavedProgramError as exc:
            assert "\n" not in str(exc)
            continue
        # a flipped bit in zip metadata no check covers (an entry's date): the same program
        loaded_anyway += 1
        assert program.cores[0].streams == original.cores[0].streams
        assert program.meta.keys() == original.meta.keys()
    assert loaded_anyway < 20


def _replacement(rng: random.Random, key: Any, value: Any) -> Any:
    """A value of the same JSON kind as ``value`` (so it passes the type checks), often odd."""
    names = {
        "op": [*AluOp.__members__, *ReduceOp.__members__],
        "op0": list(AluOp.__members__),
        "op1": list(AluOp.__members__),
        "cmp_op": list(AluOp.__members__),
        "func": list(ActivationFunction.__members__),
        "dtype": list(DTYPES),
        "memory": ["HBM", "SBUF", "PSUM"],
        "engine": list(engine_names()),
        "opcode": list(ISA),
    }
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return rng.choice([-1, 0, 1, 3, 31, 33, 129, 2**20, 2**31, 2**37, -(2**37), value + 1])
    if isinstance(value, float):
        return rng.choice([0.0, -1.0, 1e300, "NaN", "Infinity"])
    if isinstance(value, str):
        return rng.choice(names.get(key, ["", "S.other", "out", "x", "red"]))
    return value


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # overflowing numerics of odd values
def test_well_typed_but_wrong_values_fail_as_hwsim_errors_when_simulated(
    saved: Path, tmp_path: Path
) -> None:
    """A file can pass every type check and still say nonsense (a queue that does not exist, a
    partition past the end, another dtype): loading or simulating it is then an ``HwsimError``
    (one line from the CLI), never another exception."""
    original = _document(saved)
    leaves = [
        path
        for path in _strict_objects({k: original[k] for k in ("hbm", "cores", "allocations")})
        if not isinstance(_get(original, path), dict | list)
    ]
    rng = random.Random(15)
    target = tmp_path / "odd.hwprog"
    simulated = 0
    for path in rng.sample(leaves, 300):
        document = copy.deepcopy(original)
        parent = _get(document, path[:-1])
        key = path[-1] if isinstance(path[-1], str) else path[-2]
        parent[path[-1]] = _replacement(rng, key, parent[path[-1]])
        _rewrite(saved, target, document)
        try:
            program = load_program(target)
        except HwsimError:
            continue
        simulated += 1
        for numerics in (True, False):
            with contextlib.suppress(HwsimError):
                run(program, "tiny", numerics=numerics, race_check=numerics)
    assert simulated > 150  # most odd values pass the loader: the simulator's checks are tested
