"""The one YAML loader of hwsim: bounded, strict, JSON-typed (configs, sweep specs, ``--set``).

A file is at most ``MAX_FILE_BYTES`` of UTF-8 (an error names the byte offset otherwise); its
one document goes through the checking composer of ``yaml_compose`` (depth, alias expansion,
duplicate keys, JSON types only) before anything is constructed, so a hostile file costs at most
the bounded work of reading it. Only str, int, float, bool, None, list and dict come out, as a
tree: changing one place of the result never changes another.

Every error is one line, ``SOURCE:LINE: what was wrong at dotted.path (what would be right)``,
raised as the caller's ``HwsimError`` subclass (``ConfigError``, ``SpecError``, ...).
"""

from __future__ import annotations

from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml

from hwsim.config.yaml_compose import construct, make_loader_class
from hwsim.errors import HwsimError

#: Largest file read; presets are ~5 KiB, the largest sweep spec a few hundred KiB.
MAX_FILE_BYTES = 2 << 20
#: The loader class: the checking composer over libyaml's parser (PyYAML's where absent).
_LOADER = make_loader_class(c_parser=True)


def read_yaml_file(path: Path | Traversable, error: type[HwsimError], what: str = "file") -> Any:
    """The JSON-typed content of a YAML file (a ``Path`` or an ``importlib.resources`` file)."""
    return load_yaml(read_text_file(path, error, what), str(path), error)


def read_text_file(path: Path | Traversable, error: type[HwsimError], what: str = "file") -> str:
    """A file's text: at most ``MAX_FILE_BYTES``, UTF-8. ``what`` names it in the messages.
    Only a regular file is read: reading a FIFO would wait for a writer that never comes."""
    if isinstance(path, Path) and path.exists() and not path.is_file():
        kind = "folder" if path.is_dir() else "special file (a FIFO, socket or device)"
        raise error(f"{path}: cannot read {what} (it is a {kind}, not a regular file)")
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    if len(data) > MAX_FILE_BYTES:
        raise error(
            f"{path}: {what} is larger than {MAX_FILE_BYTES >> 20} MiB (a YAML {what} this "
            "large is not one a person wrote; split it or generate the values in code)"
        )
    return decode_utf8(data, str(path), error)


def decode_utf8(data: bytes, source: str, error: type[HwsimError]) -> str:
    """``data`` as text; an error names the line and byte offset of the first non-UTF-8 byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(
            f"{source}:{line}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start} (save the file as UTF-8)"
        ) from None


def load_yaml(
    text: str,
    source: str,
    error: type[HwsimError],
    *,
    path: tuple[str | int, ...] = (),
    show_lines: bool = True,
) -> Any:
    """The JSON-typed content of one YAML document (``None`` if it is empty).

    ``source`` starts every message (a file name, or ``--set 'KEY=VALUE'``); ``path`` is where
    the document sits in a larger one (an override's dotted key), so messages name the full
    path; ``show_lines=False`` leaves the line number out (a one-line value has only line 1).
    """
    if len(text) > MAX_FILE_BYTES:
        raise error(f"{source}: longer than {MAX_FILE_BYTES >> 20} MiB of YAML")
    try:
        loader = _LOADER(text, source, error, path, show_lines)  # PyYAML's reader checks here
        node = loader.get_single_node()
    except yaml.YAMLError as exc:
        raise error(_syntax_message(exc, text, source, show_lines)) from None
    return None if node is None else construct(loader, node)


def _syntax_message(exc: yaml.YAMLError, text: str, source: str, show_lines: bool) -> str:
    """A parser's error as ``SOURCE:LINE: not valid YAML at column C (problem)``."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc)
    context = getattr(exc, "context", None)
    if context:  # "expected a single document in the stream, but found another document"
        problem = f"{context}, {problem}"
    position = getattr(exc, "position", None)  # a ReaderError: an index into the text
    if mark is not None:
        line, column = mark.line + 1, mark.column + 1
    elif isinstance(position, int):
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
    else:
        return f"{source}: not valid YAML ({problem})"
    if not show_lines:
        return f"{source}: value is not valid YAML ({problem})"
    return f"{source}:{line}: not valid YAML at column {column} ({problem})"
