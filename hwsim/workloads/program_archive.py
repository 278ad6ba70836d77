"""The ``.hwprog`` container: a zip of a manifest, one JSON document and ``.npy`` arrays.

Entries (docs/export.md):

- ``manifest.json``: ``{"format": "hwsim.program", "version": 3, "sha256": ..., "hwsim": ...}``;
- ``program.json``: the program as data (``hwsim.workloads.program_codec``);
- ``arrays/<n>.npy``: every array the document references as ``{"npy": NAME, "dtype": D}``,
  written by ``np.save`` without pickles and read by ``np.load(allow_pickle=False)`` after its
  header was checked (dtype one of ``ARRAY_DTYPES``, byte count matching the shape), so a file
  can neither run code nor make the reader allocate more than the file holds. bf16 and fp8
  arrays are stored as the unsigned ints of their bits.

``sha256`` is the content hash: SHA-256 over every entry but the manifest, in name order, each
as its UTF-8 name, a NUL byte, its length as 8 bytes little-endian, then its bytes. Reading
checks, in order: that the file is a zip (an old pickle is named and refused, never unpickled),
the entry names and sizes (``MAX_PROGRAM_BYTES`` in all, before anything is read), the format
and version, then the hash, and only then parses the document.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
import zlib
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
from numpy.lib import format as npy_format

from hwsim import __version__, strict_json
from hwsim.errors import SavedProgramError
from hwsim.workloads.typed_json import FieldError, describe

FORMAT = "hwsim.program"
#: Version 1 was a pickle (``hwsim.program/1``); 2 is this zip of JSON and arrays; 3 adds the
#: tags' origins (``program_codec``: a format 2 file reads as one without them).
FORMAT_VERSION = 3
#: The oldest version this hwsim reads.
OLDEST_ZIP_VERSION = 2
MANIFEST, DOCUMENT = "manifest.json", "program.json"
_ARRAY_NAME = re.compile(r"arrays/(0|[1-9][0-9]{0,8})\.npy")
#: More than any Trainium chip's HBM (trn3: 144 GiB): the uncompressed entries of a file, and the
#: HBM tensors a program declares, are refused past it before anything is allocated.
MAX_PROGRAM_BYTES = 256 * 2**30
_MAX_MANIFEST_BYTES = 4096
_DATE = (1980, 1, 1, 0, 0, 0)  # fixed entry times: the same program gives the same bytes

#: Array dtypes a file may hold, by name, with how they are stored in the ``.npy`` entry.
_ML_DTYPES = {
    np.dtype(t).name: np.dtype(t)
    for t in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3, ml_dtypes.float8_e5m2)
}
_PLAIN_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_PLAIN_DTYPES = {
    name: np.dtype(name).newbyteorder("<")
    for name in (*_PLAIN_NAMES, "float16", "float32", "float64")
}
ARRAY_DTYPES = {**_PLAIN_DTYPES, **_ML_DTYPES}
_STORAGE = {
    **_PLAIN_DTYPES,
    **{name: np.dtype(f"<u{d.itemsize}") for name, d in _ML_DTYPES.items()},
}


def content_hash(entries: dict[str, bytes]) -> str:
    """SHA-256 of the entries (the manifest excluded), as the module docstring defines it."""
    digest = hashlib.sha256()
    for name in sorted(entries):
        if name == MANIFEST:
            continue
        digest.update(name.encode() + b"\0" + len(entries[name]).to_bytes(8, "little"))
        digest.update(entries[name])
    return digest.hexdigest()


# ---- writing ------------------------------------------------------------------------------------


class ArrayWriter:
    """Collects a document's arrays as ``.npy`` entries; ``add`` returns the reference to store."""

    def __init__(self) -> None:
        self.entries: dict[str, bytes] = {}

    def add(self, array: Any) -> dict[str, str]:
        if not isinstance(array, np.ndarray):
            raise FieldError(f"expected a numpy array, got {type(array).__name__}")
        name = array.dtype.name
        if name not in ARRAY_DTYPES:
            raise FieldError(
                f"arrays of dtype {array.dtype} cannot be saved (supported: "
                f"{', '.join(ARRAY_DTYPES)})"
            )
        stored = np.ascontiguousarray(array).astype(ARRAY_DTYPES[name], copy=False)
        stored = stored.view(_STORAGE[name])
        buffer = io.BytesIO()
        np.save(buffer, stored, allow_pickle=False)
        entry = f"arrays/{len(self.entries)}.npy"
        self.entries[entry] = buffer.getvalue()
        return {"npy": entry, "dtype": name}


def write_archive(path: Path, document: dict[str, Any], arrays: ArrayWriter) -> None:
    """Write the file atomically, through the output guard (a temporary renamed over ``path``;
    never through a link planted there)."""
    text = json.dumps(document, allow_nan=False, separators=(",", ":")).encode()
    write_entries(path, text, arrays.entries)


def write_entries(path: Path, document: bytes, arrays: dict[str, bytes]) -> None:
    """Write ``document`` and ``arrays`` (entry name -> ``.npy`` bytes) with their manifest."""
    entries = {DOCUMENT: document, **arrays}
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "sha256": content_hash(entries),
        "hwsim": __version__,
    }
    from hwsim.outputs_guard import output_file  # the one guard of files users name

    with output_file(path, "wb") as out, zipfile.ZipFile(out, "w") as archive:
        _write(archive, MANIFEST, json.dumps(manifest).encode(), zipfile.ZIP_DEFLATED)
        _write(archive, DOCUMENT, document, zipfile.ZIP_DEFLATED)
        for name, data in arrays.items():
            _write(archive, name, data, zipfile.ZIP_STORED)


def _write(archive: zipfile.ZipFile, name: str, data: bytes, compression: int) -> None:
    info = zipfile.ZipInfo(name, _DATE)
    info.compress_type = compression
    archive.writestr(info, data)


# ---- reading ------------------------------------------------------------------------------------


class ArrayReader:
    """The ``.npy`` entries of a file, parsed when the document references them."""

    def __init__(self, entries: dict[str, bytes]) -> None:
        self.entries = entries
        self.used: set[str] = set()

    def take(self, reference: Any) -> np.ndarray:
        """The array a ``{"npy": NAME, "dtype": D}`` reference names (each once)."""
        if type(reference) is not dict or set(reference) != {"npy", "dtype"}:
            raise FieldError(
                f'expected an array reference {{"npy": ..., "dtype": ...}}, got '
                f"{describe(reference)}"
            )
        name, dtype_name = reference["npy"], reference["dtype"]
        if type(dtype_name) is not str or dtype_name not in ARRAY_DTYPES:
            raise FieldError(
                f"unknown array dtype {dtype_name!r} (valid: {', '.join(ARRAY_DTYPES)})"
            ).inside("dtype")
        if type(name) is not str or name not in self.entries:
            raise FieldError(f"names no array entry of the file: {describe(name)}").inside("npy")
        if name in self.used:
            raise FieldError(f"{name} is referenced twice").inside("npy")
        self.used.add(name)
        try:
            stored = _read_npy(self.entries[name], _STORAGE[dtype_name])
        except FieldError as exc:
            raise FieldError(f"{name}: {exc.message}").inside("npy") from None
        return stored.view(ARRAY_DTYPES[dtype_name])

    def unused(self) -> list[str]:
        return sorted(set(self.entries) - self.used)


def _read_npy(data: bytes, storage: np.dtype) -> np.ndarray:
    """An ``.npy`` entry whose header promises ``storage`` and exactly the bytes it holds."""
    stream = io.BytesIO(data)
    try:
        version = npy_format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = npy_format.read_array_header_1_0(stream)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = npy_format.read_array_header_2_0(stream)
        else:
            raise FieldError(f"unsupported .npy version {version}")
    except (ValueError, TypeError, SyntaxError, OverflowError, MemoryError) as exc:
        raise FieldError(f"not a valid .npy array ({exc})") from None
    if dtype != storage:
        raise FieldError(f"holds {dtype}, expected {storage}")
    count = 1
    for n in shape:
        count *= n
    if any(n < 0 for n in shape) or count * storage.itemsize != len(data) - stream.tell():
        raise FieldError(
            f"shape {shape} needs {count * storage.itemsize} bytes, the entry holds "
            f"{len(data) - stream.tell()}"
        )
    stream.seek(0)
    try:
        array = np.load(stream, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise FieldError(f"not a valid .npy array ({exc})") from None
    return np.ascontiguousarray(array) if fortran else array


def read_archive(path: Path) -> tuple[dict[str, Any], ArrayReader]:
    """The checked document and arrays of a file (``SavedProgramError`` naming what is wrong)."""
    _refuse_non_zip(path)
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            _check_entries(path, infos)
            manifest = _read_manifest(path, archive.read(MANIFEST))
            entries = {i.filename: archive.read(i) for i in infos if i.filename != MANIFEST}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError) as exc:
        raise SavedProgramError(f"{path}: corrupted: not a readable zip archive ({exc})") from exc
    except (OSError, NotImplementedError, RuntimeError, ValueError) as exc:
        raise SavedProgramError(f"{path}: cannot read the saved program ({exc})") from exc
    except MemoryError:
        raise SavedProgramError(f"{path}: the saved program does not fit in memory") from None
    if content_hash(entries) != manifest["sha256"]:
        raise SavedProgramError(
            f"{path}: corrupted or edited: content hash mismatch (the manifest's sha256 is not "
            "that of the file's contents); export the program again"
        )
    try:
        document = strict_json.loads(entries.pop(DOCUMENT))
    except (ValueError, RecursionError, MemoryError) as exc:
        raise SavedProgramError(f"{path}: {DOCUMENT} is not valid JSON ({exc})") from None
    return document, ArrayReader(entries)


def _refuse_non_zip(path: Path) -> None:
    try:
        with path.open("rb") as file:
            head = file.read(4)
    except OSError as exc:
        raise SavedProgramError(f"{path}: cannot read the saved program ({exc})") from exc
    if head[:2] == b"PK":
        return
    if head[:1] == b"\x80":  # PROTO, the first opcode of every pickle since protocol 2
        raise SavedProgramError(
            f"{path} is an old pickle-format saved program (hwsim.program/1); pickles can run "
            "code and are no longer loaded: export it again with `hwsim export`"
        )
    raise SavedProgramError(
        f"{path}: not a saved hwsim program (saved programs are zip archives; this file starts "
        f"with {head!r})"
    )


def _check_entries(path: Path, infos: list[zipfile.ZipInfo]) -> None:
    names = [i.filename for i in infos]
    if MANIFEST not in names or DOCUMENT not in names:
        missing = MANIFEST if MANIFEST not in names else DOCUMENT
        raise SavedProgramError(f"{path}: not a saved hwsim program (no {missing} in the archive)")
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise SavedProgramError(f"{path}: corrupted: entry {twice[0]} appears twice")
    for name in names:
        if name not in (MANIFEST, DOCUMENT) and not _ARRAY_NAME.fullmatch(name):
            raise SavedProgramError(f"{path}: unexpected entry {name!r} in the archive")
    total = sum(i.file_size for i in infos)
    if total > MAX_PROGRAM_BYTES:
        raise SavedProgramError(
            f"{path}: its entries hold {total} bytes uncompressed, more than the "
            f"{MAX_PROGRAM_BYTES} a saved program may (MAX_PROGRAM_BYTES); refused before reading"
        )
    manifest = next(i for i in infos if i.filename == MANIFEST)
    if manifest.file_size > _MAX_MANIFEST_BYTES:
        raise SavedProgramError(f"{path}: {MANIFEST} is {manifest.file_size} bytes: corrupted")


def _read_manifest(path: Path, data: bytes) -> dict[str, Any]:
    try:
        manifest = strict_json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise SavedProgramError(
            f"{path}: corrupted: {MANIFEST} is not valid JSON ({exc})"
        ) from None
    if type(manifest) is not dict or manifest.get("format") != FORMAT:
        raise SavedProgramError(f"{path}: not a saved hwsim program ({MANIFEST} names no {FORMAT})")
    version = manifest.get("version")
    if type(version) is not int:
        raise SavedProgramError(
            f"{path}: {MANIFEST}: version: expected an int, got {describe(version)}"
        )
    if version > FORMAT_VERSION:
        raise SavedProgramError(
            f"{path}: written by a newer hwsim (format {version}; this hwsim reads up to "
            f"{FORMAT_VERSION}): upgrade hwsim, or export the program again with this one"
        )
    if version < OLDEST_ZIP_VERSION:
        raise SavedProgramError(
            f"{path}: format {version} is not a zip format (this hwsim reads formats "
            f"{OLDEST_ZIP_VERSION} to {FORMAT_VERSION}); export the program again"
        )
    known = {"format", "version", "sha256", "hwsim"}
    if set(manifest) != known:
        odd = sorted(set(manifest) ^ known)[0]
        raise SavedProgramError(f"{path}: {MANIFEST}: unexpected or missing key {odd!r}")
    digest = manifest["sha256"]
    if type(digest) is not str or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise SavedProgramError(f"{path}: {MANIFEST}: sha256: expected 64 hex digits")
    if type(manifest["hwsim"]) is not str:
        raise SavedProgramError(f"{path}: {MANIFEST}: hwsim: expected the version string")
    return manifest
