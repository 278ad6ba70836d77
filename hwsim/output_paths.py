"""Checks of an output path before anything is made there: length limits, places hwsim never
writes into, and whether a missing folder can be created (``hwsim.outputs_guard`` uses them)."""

from __future__ import annotations

import os
from pathlib import Path

from hwsim.errors import HwsimError
from hwsim.run_marker import kind_of_mode

#: Paths longer than this are shown shortened in messages (an error stays one readable line).
_SHOWN_CHARS = 120


class OutputError(HwsimError):
    """An output path hwsim refuses or fails to write; the message says why and what would do."""


def shown(path: str | Path) -> str:
    """A path for a one-line message: long ones keep their start and end."""
    text = str(path)
    if len(text) <= _SHOWN_CHARS:
        return text
    return f"{text[:60]}...{text[-40:]} ({len(text)} characters)"


def resolved(path: str | Path) -> Path:
    """``path`` absolute (``~`` expanded) and resolved, after the length and place checks."""
    absolute = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
    check_limits(absolute)
    folder = resolve_links(absolute)
    check_limits(folder)
    what = _forbidden(folder)
    if what:
        raise OutputError(
            f"refusing to write into {shown(folder)} ({what}): name a new folder inside it"
        )
    return folder


def resolve_links(path: Path) -> Path:
    """``path.resolve()``, a symlink loop being one line (``OutputError``), not a traceback."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:  # a symlink loop (RuntimeError before Python 3.13)
        raise OutputError(
            f"{shown(path)} cannot be resolved ({exc}): a symlink loop? name another path"
        ) from None


def check_limits(path: Path) -> None:
    anchor = _deepest_existing(path)
    path_max = _pathconf(anchor, "PC_PATH_MAX", 4096)
    name_max = _pathconf(anchor, "PC_NAME_MAX", 255)
    size = len(os.fsencode(path))
    if size >= path_max:
        raise OutputError(
            f"{shown(path)}: the path is {size} bytes, over this system's limit of {path_max} "
            "(PATH_MAX); name a shorter one"
        )
    for part in path.parts:
        if len(os.fsencode(part)) > name_max:
            raise OutputError(
                f"{shown(path)}: the name '{shown(part)}' is {len(os.fsencode(part))} bytes, over "
                f"this filesystem's limit of {name_max} (NAME_MAX)"
            )


def _deepest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.isdir(candidate):
            return candidate
    return Path(path.anchor or "/")


def _pathconf(path: Path, name: str, default: int) -> int:
    try:
        return int(os.pathconf(path, name))
    except (OSError, ValueError):
        return default


def _forbidden(folder: Path) -> str:
    """Why ``folder`` may never receive outputs, or ''."""
    if folder == Path(folder.anchor):
        return "the filesystem root"
    try:
        if folder == Path.home().resolve():
            return "your home directory"
    except RuntimeError:  # no home directory known
        pass
    if os.path.ismount(folder):
        return "the root of a mounted filesystem"
    return ""


def check_creatable(folder: Path) -> None:
    """The nearest existing ancestor of a missing folder is a writable folder."""
    for parent in folder.parents:
        if os.path.lexists(parent):
            if not parent.is_dir():
                raise OutputError(f"cannot create {shown(folder)}: {shown(parent)} is a file")
            if not os.access(parent, os.W_OK | os.X_OK) or _no_storage(parent):
                raise OutputError(f"cannot create {shown(folder)}: {shown(parent)} is not writable")
            return


def _no_storage(folder: Path) -> bool:
    """Whether ``folder`` is on a filesystem of no blocks (the kernel's /proc, /sys), where
    ``os.access`` says yes to root but nothing can be created."""
    try:
        return os.statvfs(folder).f_blocks == 0
    except OSError:
        return False


def _special_kind(path: Path) -> str:
    """What ``path`` is if it exists and is neither a regular file, a folder nor a link."""
    try:
        kind = kind_of_mode(os.lstat(path).st_mode)
    except OSError:
        return ""
    return "" if kind in ("file", "folder", "link") else kind


def not_regular(path: Path, kind: str) -> str:
    """The message refusing to replace something that is not a regular file."""
    return (
        f"{shown(path)} is a {kind}, not a regular file; hwsim replaces only regular files: "
        "name another path"
    )


def check_output_file(path: str | Path) -> Path:
    """``path`` absolute, after the checks ``outputs_guard.output_file`` makes before writing
    (limits, not a link, not a folder, its folder writable or creatable): commands that work
    for minutes before they write call it first, so a bad ``-o`` fails at once."""
    target = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
    check_limits(target)
    if target.is_symlink():
        raise OutputError(
            f"{shown(target)} is a symlink; hwsim replaces output files rather than write "
            "through links: remove it or name the file it points to"
        )
    if target.is_dir():
        raise OutputError(f"{shown(target)} is a folder; name a file to write")
    kind = _special_kind(target)
    if kind:
        raise OutputError(not_regular(target, kind))
    parent = target.parent
    if not parent.is_dir():
        check_creatable(target)
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write into {shown(parent)}: it is not writable")
    return target
