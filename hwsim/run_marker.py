"""A run folder's marker (``.hwsim-run``) and the file operations under the output guard.

The marker says a folder is a run folder of ours and lists what hwsim wrote in it, one relative
name a line (folders end in ``/``), after the format line ``hwsim-run format N`` and the line
``folder inode N`` that binds it to its folder: a marker copied or unpacked into another folder
(with its list) is not that folder's, so the folder is foreign. Of the names a marker lists only
those hwsim itself writes (``OUTPUT_NAMES``) are trusted, to be cleared by a re-run or replaced:
a forged or edited list naming anything else (``thesis.tex``) is ignored. Format 1 markers were
not bound to their folder and are foreign now. Only regular files and symlinks are ever removed
or replaced; a device node, FIFO or socket is left as it is.

Everything here works on open folder descriptors and never follows a symlink:
``hwsim.outputs_guard`` decides what may be written and turns the ``OSError`` these raise into
one-line messages.
"""

from __future__ import annotations

import io
import os
import re
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import IO, Any

MARKER = ".hwsim-run"
#: Format of the marker (its first line is ``hwsim-run format N``); a newer one is refused.
#: 2: bound to its folder by the ``folder inode N`` line; 1 (unbound) is no longer trusted.
MARKER_FORMAT = 2
_MARKER_HEAD = "hwsim-run format "
_BINDING_HEAD = "folder inode "
#: Every name hwsim writes into a run folder, relative to it (folders end in ``/``): the trace
#: and summary (``hwsim.trace.outputs``), the tables (``hwsim.trace.tables``), the four figures,
#: the bridge's report and its per-call run folders (``<graph>_call<N>[_timeline]/``). A marker's
#: entry of any other name is never cleared or replaced (a test checks the writers against it).
OUTPUT_NAMES = re.compile(
    r"(trace\.json|summary\.json|report\.json|report\.txt"
    r"|(timeline|util|memory|roofline)\.png"
    r"|tables/|tables/(Instruction|DmaPacket|SemaphoreUpdate|Summary)\.(csv|parquet)"
    r"|[A-Za-z0-9_.-]+_call[0-9]+(_timeline)?/)"
)
_MARKER_NOTE = "# written by hwsim: what it wrote here; a re-run replaces exactly these"
#: A marker longer than this is not one of ours (a run folder lists a few dozen names).
_MARKER_MAX_BYTES = 1 << 20
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def inspect_folder(fd: int) -> tuple[str, list[str], str]:
    """('empty' | 'ours' | 'foreign', the marker's trusted names, why it is foreign) of an open
    folder. Trusted names are those of ``OUTPUT_NAMES``; the others a marker lists are dropped."""
    names = os.listdir(fd)
    if not names:
        return "empty", [], ""
    if MARKER not in names:
        return "foreign", [], f"is not empty and is not an hwsim run folder (no {MARKER} in it)"
    try:
        marker = os.open(MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        with os.fdopen(marker, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise OSError("not a regular file")
            data = file.read(_MARKER_MAX_BYTES + 1)
    except OSError:
        return "foreign", [], f"is not empty and its {MARKER} is not a readable file"
    lines = data.decode("utf-8", "replace").splitlines()
    version = lines[0].removeprefix(_MARKER_HEAD) if lines else ""
    if len(data) > _MARKER_MAX_BYTES or not lines or version == lines[0] or not version.isdigit():
        return "foreign", [], f"is not empty and its {MARKER} was not written by hwsim"
    if int(version) > MARKER_FORMAT:
        return "foreign", [], f"was written by a newer hwsim (run folder format {version})"
    if int(version) < MARKER_FORMAT:
        return (
            "foreign",
            [],
            (
                f"is not empty and its {MARKER} is of an older hwsim, not bound to this folder "
                f"(format {version})"
            ),
        )
    if len(lines) < 2 or lines[1] != f"{_BINDING_HEAD}{os.fstat(fd).st_ino}":
        return (
            "foreign",
            [],
            (
                f"is not empty and its {MARKER} was made for another folder (copied or unpacked "
                "here?)"
            ),
        )
    entries = [line for line in lines[2:] if line and not line.startswith("#")]
    if not all(_plain_path(entry.removesuffix("/")) for entry in entries):
        return "foreign", [], f"is not empty and its {MARKER} names paths outside the folder"
    return "ours", [entry for entry in entries if trusted_name(entry)], ""


def trusted_name(entry: str) -> bool:
    """Whether a marker's entry is a name hwsim writes (``OUTPUT_NAMES``): the only ones a
    re-run clears or replaces."""
    return OUTPUT_NAMES.fullmatch(entry) is not None


def plain_name(name: str) -> bool:
    """One name inside a folder: not empty, not '.' or '..', no '/', NUL or newline."""
    return name not in ("", ".", "..") and not any(c in name for c in "/\0\n")


def _plain_path(relative: str) -> bool:
    return all(plain_name(part) for part in relative.split("/"))


def clear_listed(fd: int, entries: list[str]) -> None:
    """Remove what a marker lists (files, then folders deepest first); never follows a link."""
    files = [e for e in entries if not e.endswith("/")]
    folders = sorted((e.removesuffix("/") for e in entries if e.endswith("/")), key=_depth)
    for entry in files:
        with _parent_of(fd, entry) as (parent, leaf):
            if parent is not None and replaceable(parent, leaf):
                quietly(os.unlink, leaf, parent)
    for entry in reversed(folders):
        with _parent_of(fd, entry) as (parent, leaf):
            if parent is None:
                continue
            try:
                sub = os.open(leaf, DIR_FLAGS, dir_fd=parent)
            except OSError:  # a link or file now sits where our folder was: it goes, unfollowed
                if replaceable(parent, leaf):
                    quietly(os.unlink, leaf, parent)
                continue
            try:
                kind, inner, _ = inspect_folder(sub)
                if kind == "ours":  # a run folder of ours inside this one (bridge call folders)
                    clear_listed(sub, inner)
                    quietly(os.unlink, MARKER, sub)
                    if os.listdir(sub):  # someone else's files stay, and so does our mark
                        write_marker(sub, [])
            finally:
                os.close(sub)
            quietly(os.rmdir, leaf, parent)  # not empty: what is left is not ours


def _depth(entry: str) -> int:
    return entry.count("/")


@contextmanager
def _parent_of(fd: int, entry: str) -> Iterator[tuple[int | None, str]]:
    """(descriptor of the folder holding ``entry``, its last name); None if a folder on the way
    is missing or is not a real folder (a symlink is never entered)."""
    *folders, leaf = entry.split("/")
    opened: list[int] = []
    current: int | None = fd
    try:
        for name in folders:
            try:
                current = os.open(name, DIR_FLAGS, dir_fd=current)
            except OSError:
                current = None
                break
            opened.append(current)
        yield current, leaf
    finally:
        for descriptor in opened:
            os.close(descriptor)


def file_kind(fd: int, name: str) -> str:
    """What is at ``name`` in the open folder ``fd``, unfollowed: 'missing', 'file', 'link',
    'folder', or what else it is ('character device', 'FIFO', ...)."""
    try:
        mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return "missing"
    return kind_of_mode(mode)


def kind_of_mode(mode: int) -> str:
    """'file', 'link', 'folder', or what else an ``st_mode`` says ('character device', ...)."""
    return next((kind for test, kind in _KINDS if test(mode)), "special file")


_KINDS = (
    (stat.S_ISREG, "file"),
    (stat.S_ISLNK, "link"),
    (stat.S_ISDIR, "folder"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISFIFO, "FIFO (named pipe)"),
    (stat.S_ISSOCK, "socket"),
)


def replaceable(fd: int, name: str) -> bool:
    """Whether what is at ``name`` may be removed or replaced: a regular file or a symlink (never
    followed), nothing else."""
    return file_kind(fd, name) in ("file", "link")


def quietly(operation: Any, name: str, fd: int) -> None:
    """``operation(name, dir_fd=fd)`` (unlink, rmdir), ignoring a failure: what is left stays."""
    with suppress(OSError):
        operation(name, dir_fd=fd)


def write_marker(fd: int, entries: list[str]) -> None:
    """A new marker in the open folder ``fd`` listing ``entries``, bound to that folder."""
    binding = f"{_BINDING_HEAD}{os.fstat(fd).st_ino}"
    text = "\n".join([f"{_MARKER_HEAD}{MARKER_FORMAT}", binding, _MARKER_NOTE, *entries]) + "\n"
    with replacing(fd, MARKER, "w") as file:
        file.write(text)


def open_marker(fd: int) -> int:
    """The marker of the open folder ``fd``, open for appending names (``append_entry``): one
    write per file written, rather than a new marker each time."""
    return os.open(MARKER, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)


def append_entry(marker: int, entry: str) -> None:
    os.write(marker, f"{entry}\n".encode())


@contextmanager
def replacing(
    fd: int, leaf: str, mode: str, *, name: str = "", **open_args: Any
) -> Iterator[IO[Any]]:
    """A new file written to an exclusive temporary, renamed over ``leaf`` when the block ends
    (removed if it raises). Nothing at ``leaf`` is opened, so a link there is never followed.
    ``name`` is what the file object's ``name`` says (its final path)."""
    temporary = f".{leaf}.{secrets.token_hex(4)}.tmp"
    descriptor = os.open(temporary, _NEW_FILE_FLAGS, 0o666, dir_fd=fd)
    renamed = False
    try:
        text = "b" not in mode
        try:
            file = os.fdopen(descriptor, mode, encoding="utf-8" if text else None, **open_args)
        except BaseException:
            os.close(descriptor)
            raise
        with file:
            raw: Any = file
            while not isinstance(raw, io.FileIO):  # under the text and buffer layers
                raw = getattr(raw, "buffer", None) or raw.raw
            raw.name = name or leaf
            yield file
        os.rename(temporary, leaf, src_dir_fd=fd, dst_dir_fd=fd)
        renamed = True
    finally:
        if not renamed:
            quietly(os.unlink, temporary, fd)
