"""Writes the binary files of ``tests/data/bad_inputs/`` (saved programs, sweep databases).

Run from the repository root after a change to the ``.hwprog`` or sweep-DB formats:

    .venv/bin/python tests/data/make_bad_inputs.py

Each file is one damaged or hostile input of its class, derived from a small valid one (a
32x32x32 gemm saved for ``tiny``; an hwsim sweep database created by the sweep store), so each
stays a few KiB. The text files of the corpus (traces, specs, Python files) are written by hand
and are not touched here. ``tests/unit/test_bad_input_corpus.py`` runs the CLI on every file.
"""

from __future__ import annotations

import io
import json
import pickle
import sqlite3
import sys
import zipfile
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from hwsim.config import config_hash, load_config  # noqa: E402
from hwsim.config.loader import canonical_json  # noqa: E402
from hwsim.sweep.db import open_database  # noqa: E402
from hwsim.workloads.program_archive import write_entries  # noqa: E402
from hwsim.workloads.resolve import resolve_workload  # noqa: E402
from hwsim.workloads.saved import LOWERED_FOR, save_program  # noqa: E402
from hwsim.workloads.saved_meta import EXPECTED_OUTPUTS  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "bad_inputs"
PROGRAMS = CORPUS / "programs"
DATABASES = CORPUS / "sweep_dbs"

Document = dict[str, Any]


def _valid_program(path: Path) -> Path:
    program = resolve_workload("gemm:32x32x32:bf16").program(load_config("tiny"))
    return save_program(program, path)


def _entries(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _raw_zip(path: Path, entries: dict[str, bytes]) -> None:
    """A zip of ``entries`` as given (no new hash: what a hand edit or a newer writer makes)."""
    path.unlink(missing_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries.items():
            archive.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)


def _rehashed(path: Path, document: Document, arrays: dict[str, bytes]) -> None:
    """A well-formed, correctly hashed file holding ``document``: only its fields are wrong."""
    path.unlink(missing_ok=True)
    write_entries(path, json.dumps(document).encode(), arrays)


def _first(document: Document, opcode: str) -> Document:
    for stream in document["cores"][0]["streams"].values():
        for instruction in stream:
            if instruction["opcode"] == opcode:
                return instruction  # type: ignore[no-any-return]
    raise AssertionError(opcode)


def _hbm_load(document: Document) -> Document:
    """The first DMA that reads an HBM tensor."""
    for stream in document["cores"][0]["streams"].values():
        for instruction in stream:
            if instruction["opcode"] == "dma_copy" and instruction["src"]["memory"] == "HBM":
                return instruction  # type: ignore[no-any-return]
    raise AssertionError("no HBM load")


def _hbm(document: Document, name: str) -> Document:
    return next(d for d in document["hbm"] if d["name"] == name)  # type: ignore[no-any-return]


def _rename_stream(document: Document) -> None:
    streams = document["cores"][0]["streams"]
    streams["vectr"] = streams.pop(next(iter(streams)))


def _first_with(document: Document, field: str) -> Document:
    """The first instruction with a wait (``waits``) or an increment (``signals``)."""
    for stream in document["cores"][0]["streams"].values():
        for instruction in stream:
            if instruction[field]:
                return instruction  # type: ignore[no-any-return]
    raise AssertionError(field)


def _semaphore(field: str, value: int) -> Callable[[Document], None]:
    def edit(document: Document) -> None:
        _first_with(document, field)[field][0][1] = value

    return edit


def _lowered_for_trn1(document: Document) -> None:
    document["meta"][LOWERED_FOR] = {
        "config": "trn1",
        "config_hash": "0",
        "generation": "v2",
        "geometry": {"tensor_engine.rows": 16},
        "requires": {"dma.queues_per_engine": 1},
    }


def _set(path: str, value: Any) -> Callable[[Document], None]:
    """Set ``opcode/key/key...`` (the first instruction of that opcode) or ``hbm:NAME/key``."""

    def edit(document: Document) -> None:
        head, *keys = path.split("/")
        node: Any = _hbm(document, head[4:]) if head.startswith("hbm:") else _first(document, head)
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return edit


#: file -> edit of the valid program's document (each file rehashed: the fields are what's wrong)
FIELD_EDITS: dict[str, Callable[[Document], None]] = {
    "unknown_engine_stream.hwprog": _rename_stream,
    "unknown_opcode.hwprog": _set("dma_copy/opcode", "dma_cpy"),
    "field_wrong_type.hwprog": _set("dma_copy/queue", "0"),
    "field_missing.hwprog": lambda d: _first(d, "dma_copy").pop("src"),
    "sizes_not_a_list.hwprog": _set("nc_matmul/stationary/free_sizes", "32"),
    "shape_mismatch.hwprog": _set("hbm:a/shape", [16, 64]),
    "negative_address.hwprog": _set("hbm:a/address_bytes", -64),
    "huge_shape.hwprog": _set("hbm:c/shape", [2**40, 2**20]),
    "missing_array.hwprog": _set("hbm:a/values/npy", "arrays/7.npy"),
    "undeclared_tensor.hwprog": lambda d: _hbm_load(d)["src"].update(tensor="weights"),
    "lowered_for_another_config.hwprog": _lowered_for_trn1,
    # a wait every count meets at once, and an increment that counts down: ordering gone
    "negative_semaphore_wait.hwprog": _semaphore("waits", -5),
    "negative_semaphore_increment.hwprog": _semaphore("signals", -1),
}


def write_programs() -> list[Path]:
    PROGRAMS.mkdir(parents=True, exist_ok=True)
    for old in PROGRAMS.glob("*.hwprog"):
        old.unlink()
    valid = _valid_program(CORPUS / "valid.tmp.hwprog")
    data, entries = valid.read_bytes(), _entries(valid)
    document = json.loads(entries["program.json"])
    arrays = {n: d for n, d in entries.items() if n.startswith("arrays/")}
    written = []

    def out(name: str) -> Path:
        written.append(PROGRAMS / name)
        return PROGRAMS / name

    # containers: what the file is
    out("pickle_renamed.hwprog").write_bytes(  # the old format: a pickle (of data only, here)
        pickle.dumps({"format": "hwsim.program/1", "program": None}, protocol=5)
    )
    out("truncated_zip.hwprog").write_bytes(data[: len(data) // 2])
    out("empty.hwprog").write_bytes(b"")
    out("yaml_text.hwprog").write_bytes(b"name: gemm\nshape: [32, 32]\n")
    _raw_zip(out("zip_without_manifest.hwprog"), {"a.npy": b""})
    _raw_zip(out("unexpected_entry.hwprog"), {**entries, "run_me.py": b"print('hi')\n"})
    # manifest and hash
    edited = entries["program.json"].replace(b'"tiny"', b'"trn2"', 1)
    if edited == entries["program.json"]:
        edited = entries["program.json"].replace(b'"a"', b'"z"', 1)
    _raw_zip(out("bad_manifest_hash.hwprog"), {**entries, "program.json": edited})
    manifest = json.loads(entries["manifest.json"])
    newer = {"manifest.json": json.dumps({**manifest, "version": 7}).encode()}
    _raw_zip(out("newer_format.hwprog"), {**newer, "program.json": b"{a newer format"})
    # fields (each rehashed, so only the field check can catch it)
    for name, edit in FIELD_EDITS.items():
        changed = json.loads(entries["program.json"])
        edit(changed)
        _rehashed(out(name), changed, arrays)
    # an array entry whose header declares 4 TiB and holds 16 bytes
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<u2", "fortran_order": False, "shape": (2**41,)}
    )
    first = _hbm(document, "a")["values"]["npy"]
    _rehashed(
        out("huge_array_header.hwprog"), document, {**arrays, first: header.getvalue() + b"\0" * 16}
    )
    # a number JSON can spell but a float cannot hold (read as infinity before)
    raw = json.dumps(document).replace('"model_flops": ', '"note": 1e309, "model_flops": ', 1)
    _rehashed_raw(out("number_too_large.hwprog"), raw.encode(), arrays)
    _expected_shape_contradicts(out("expected_shape_contradicts.hwprog"))
    valid.unlink()
    return written


def _rehashed_raw(path: Path, document: bytes, arrays: dict[str, bytes]) -> None:
    path.unlink(missing_ok=True)
    write_entries(path, document, arrays)


def _expected_shape_contradicts(path: Path) -> None:
    """A program carrying expected outputs whose declared shape [32, 32] (1024 values) holds
    only 16: the check compared those 16 and said OK."""
    from hwsim.machine.simulator import run

    config = load_config("tiny")
    program = resolve_workload("gemm:32x32x32:bf16").program(config)
    values = run(program, config).outputs["c"].astype(np.float32).reshape(-1)
    program.meta[EXPECTED_OUTPUTS] = {
        "c": {"values": values, "rtol": 0.02, "atol": 0.02, "shape": (32, 32)}
    }
    whole = save_program(program, path.with_suffix(".tmp.hwprog"))
    entries = _entries(whole)
    whole.unlink()
    document = json.loads(entries["program.json"])
    expected = document["meta"]["expected_outputs"]["c"]["values"]["$array"]["npy"]
    part = io.BytesIO()
    np.save(part, values[:16], allow_pickle=False)
    arrays = {n: d for n, d in entries.items() if n.startswith("arrays/")}
    arrays[expected] = part.getvalue()
    _rehashed_raw(path, entries["program.json"], arrays)


def write_databases() -> list[Path]:
    DATABASES.mkdir(parents=True, exist_ok=True)
    for old in DATABASES.glob("*.sqlite*"):
        old.unlink()
    written = [DATABASES / n for n in ("not_sqlite.sqlite", "foreign.sqlite")]
    written[0].write_bytes(b"name,total_ns\ngemm,12\n")
    foreign = sqlite3.connect(written[1])
    foreign.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, path TEXT)")
    foreign.commit()
    foreign.close()
    ours = DATABASES / "ours.tmp.sqlite"
    open_database(ours, write=True).close()
    with sqlite3.connect(ours) as conn:  # one file, no WAL beside it
        conn.execute("PRAGMA journal_mode=DELETE")
    data = ours.read_bytes()
    newer = DATABASES / "newer_schema.sqlite"
    newer.write_bytes(data)
    with sqlite3.connect(newer) as conn:
        conn.execute("PRAGMA user_version = 99")
    truncated = DATABASES / "truncated.sqlite"
    truncated.write_bytes(data[: len(data) // 2])
    page = int.from_bytes(data[16:18], "big")
    damaged = DATABASES / "damaged_pages.sqlite"  # the header intact, the schema page garbage
    damaged.write_bytes(data[:100] + bytes(i * 7 % 256 for i in range(page - 100)) + data[page:])
    view_only = DATABASES / "only_a_view.sqlite"  # no tables: it was taken as a new database
    with closing(sqlite3.connect(view_only)) as conn:
        conn.execute("CREATE VIEW notes AS SELECT 'mine' AS text")
        conn.commit()
    trigger = DATABASES / "trigger_added.sqlite"  # ours, with a trigger deleting every result
    trigger.write_bytes(data)
    with closing(sqlite3.connect(trigger)) as conn:
        conn.execute("CREATE TRIGGER wipe AFTER INSERT ON runs BEGIN DELETE FROM runs; END")
        conn.commit()
    edited = DATABASES / "config_edited.sqlite"  # a stored config that is not its hash's
    edited.write_bytes(data)
    config = load_config("tiny")
    text = canonical_json(config).replace('"rows":32', '"rows":31', 1)
    with closing(sqlite3.connect(edited)) as conn:
        conn.execute("INSERT INTO configs VALUES (?, ?)", (config_hash(config), text))
        conn.commit()
    ours.unlink()
    return [*written, newer, truncated, damaged, view_only, trigger, edited]


if __name__ == "__main__":
    for path in write_programs() + write_databases():
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")
