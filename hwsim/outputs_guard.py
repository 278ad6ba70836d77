"""The one guard of every folder and file hwsim writes results to: no clobbering, no escaping.

Every writer goes through it: ``hwsim run/demo --out``, ``hwsim plot -o``, the sweep's ``-o`` and
trace folders, the bridge's ``trace=`` folder and ``Report.save``.

- ``claim_folder(path)`` admits a folder for a run's outputs. Refused outright (``--force`` does
  not change it): ``/``, the home directory, the root of a mounted filesystem, an existing file, a
  path over PATH_MAX or with a name over NAME_MAX, a parent that cannot be written. A non-empty
  folder must be a run folder of ours, holding ``.hwsim-run`` (a format line, then the files and
  folders hwsim wrote there), unless forced. Re-running into one of ours first removes exactly
  what its marker lists; nothing else in it is touched, and a file of another name is never
  replaced unless forced.
- The folder you name is resolved once: a symlink *you name* is followed to the folder it names.
  Inside it nothing is followed. Subfolders are opened relative to the folder's descriptor with
  ``O_NOFOLLOW``; each file is written to a fresh ``O_EXCL`` temporary and renamed over its name,
  so a symlink planted at that name is replaced and its target is left untouched; and names are
  single plain names (no ``/``, no ``..``), so nothing lands outside the folder.
- ``output_file(path)`` writes one file the user named (``-o results.csv``) the same way. An
  existing regular file there is replaced, as any ``-o`` does; a folder or symlink there is
  refused. A file written into a run folder of ours joins its marker. ``named=False`` is a path
  hwsim chose (a figure beside its trace): an existing file there is replaced only if hwsim
  wrote it (its folder's marker lists it, or it is a PNG with hwsim's mark, ``hwsim.png_mark``).
- Only regular files (and, inside a claimed folder, symlinks, unfollowed) are ever replaced or
  removed: a device node, FIFO or socket at an output path is refused, ``--force`` or not.

POSIX only: it relies on ``dir_fd`` and ``O_NOFOLLOW``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from hwsim.output_paths import (
    OutputError,
    check_creatable,
    check_limits,
    check_output_file,
    not_regular,
    resolve_links,
    resolved,
    shown,
)
from hwsim.png_mark import marked_as_ours
from hwsim.run_marker import (
    DIR_FLAGS,
    MARKER,
    append_entry,
    clear_listed,
    file_kind,
    inspect_folder,
    open_marker,
    plain_name,
    replacing,
    write_marker,
)

__all__ = [
    "MARKER",
    "OutputError",
    "OutputFolder",
    "check_output_folder",
    "claim_folder",
    "output_file",
    "session_folder",
    "shown",
]


# ---- checking a path ----------------------------------------------------------------------------


def check_output_folder(path: str | Path, *, force: bool = False, flag: str = "--force") -> Path:
    """Every check ``claim_folder`` makes, creating nothing; returns the folder resolved.

    CLIs call it before a long simulation so a bad ``--out`` fails first. ``flag`` is how the
    caller spells forcing, for the message (``--force``, ``force=True``).
    """
    folder = resolved(path)
    if os.path.lexists(folder):
        if not folder.is_dir():
            raise OutputError(
                f"{shown(folder)} exists and is a file, not a folder; name a folder for the outputs"
            )
        fd = _open_user_dir(folder)
        try:
            _admit(fd, folder, force, flag)
        finally:
            os.close(fd)
    else:
        check_creatable(folder)
    return folder


def _open_user_dir(folder: Path) -> int:
    try:
        return os.open(folder, DIR_FLAGS)
    except OSError as exc:
        raise OutputError(f"cannot open {shown(folder)}: {exc.strerror}") from None


# ---- what is in a folder ------------------------------------------------------------------------


def _admit(fd: int, folder: Path, force: bool, flag: str) -> list[str]:
    """What a claim of this open folder must clear first (its marker's names), or refuse."""
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{shown(folder)} is not writable")
    kind, entries, why = inspect_folder(fd)
    if kind == "ours":
        return entries
    if kind == "foreign" and not force:
        raise OutputError(
            f"{shown(folder)} {why}; name a new or empty folder, or pass {flag} to write into it"
        )
    return []


def _enter(fd: int, leaf: str, path: Path) -> int:
    """The folder ``leaf`` in the open folder ``fd``, made if missing, opened without following a
    link (``path`` is its name for messages)."""
    try:
        os.mkdir(leaf, dir_fd=fd)
    except FileExistsError:
        pass
    except OSError as exc:
        raise OutputError(f"cannot create {shown(path)}: {exc.strerror}") from None
    try:
        return os.open(leaf, DIR_FLAGS, dir_fd=fd)
    except OSError:
        raise OutputError(
            f"{shown(path)} is a symlink or a file, not a folder; hwsim does not write through "
            "links: move it away"
        ) from None


# ---- a claimed folder ---------------------------------------------------------------------------


class OutputFolder:
    """A folder admitted for outputs: writes files in it and nowhere else (see the module doc).

    ``open(name)`` writes one file; ``subdir(name)`` is a plain folder inside it (listed in this
    folder's marker); ``child(name)`` is a run folder of its own inside it (its own marker).
    Close it (or use ``with``) when done: it holds the folder's descriptor.
    """

    def __init__(
        self,
        fd: int,
        path: Path,
        *,
        force: bool,
        flag: str,
        owner: OutputFolder | None = None,
        prefix: str = "",
        marker: int | None = None,
        mine: list[str] | None = None,
        default: bool = False,
    ) -> None:
        self.path = path
        self._fd = fd
        self._force, self._flag = force, flag
        self._default = default  # a path hwsim chose: only a file of its own is replaced
        self._owner = owner or self  # the folder whose marker lists what is written here
        self._prefix = prefix
        self._marker = marker  # the open marker names are appended to (the owner's only)
        self._mine: dict[str, None] = dict.fromkeys(mine or [])

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._marker is not None:
            os.close(self._marker)
            self._marker = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @property
    def closed(self) -> bool:
        return self._fd < 0

    @contextmanager
    def open(self, name: str, mode: str = "w", **open_args: Any) -> Iterator[IO[Any]]:
        """A new file ``name`` (text in UTF-8 unless ``mode`` has 'b'), in place when the block
        ends. ``open_args`` go to ``open`` (``newline``, ``buffering``)."""
        leaf = self._leaf(name)
        self._may_replace(leaf)
        try:
            with replacing(self._fd, leaf, mode, name=str(self.path / leaf), **open_args) as file:
                yield file
        except OSError as exc:
            raise OutputError(f"cannot write {shown(self.path / leaf)}: {exc.strerror}") from None
        self._owner._record(self._prefix + leaf)

    def write_text(self, name: str, text: str) -> Path:
        with self.open(name) as file:
            file.write(text)
        return self.path / name

    def subdir(self, name: str) -> OutputFolder:
        """The plain folder ``name`` inside this one (made if missing), listed in our marker."""
        leaf = self._leaf(name)
        fd = _enter(self._fd, leaf, self.path / leaf)
        self._owner._record(f"{self._prefix}{leaf}/")
        return OutputFolder(
            fd,
            self.path / leaf,
            force=self._force,
            flag=self._flag,
            owner=self._owner,
            prefix=f"{self._prefix}{leaf}/",
        )

    def child(self, name: str) -> OutputFolder:
        """A run folder ``name`` of its own inside this one: admitted and cleared as a claim."""
        leaf = self._leaf(name)
        child = _claimed(
            _enter(self._fd, leaf, self.path / leaf), self.path / leaf, self._force, self._flag
        )
        self._owner._record(f"{self._prefix}{leaf}/")
        return child

    def _leaf(self, name: str) -> str:
        if not plain_name(name) or name == MARKER:
            raise OutputError(f"{name!r}: not a plain file name inside {shown(self.path)}")
        if self.closed:
            raise OutputError(f"{shown(self.path)}: this output folder was already closed")
        return name

    def _may_replace(self, leaf: str) -> None:
        kind = file_kind(self._fd, leaf)
        if kind == "missing":
            return
        if kind == "folder":
            raise OutputError(f"{shown(self.path / leaf)} is a folder; move it away")
        if kind not in ("file", "link"):
            raise OutputError(not_regular(self.path / leaf, kind))
        if self._force or self._prefix + leaf in self._owner._mine:
            return
        if self._default and kind == "file" and marked_as_ours(self._fd, leaf):
            return
        if self._default:
            raise OutputError(
                f"{shown(self.path / leaf)} exists and was not written by hwsim; name where "
                "the output goes (-o PATH), or move the file away"
            )
        raise OutputError(
            f"{shown(self.path / leaf)} exists and was not written by hwsim (not in {MARKER}); "
            f"move it away or pass {self._flag}"
        )

    def _record(self, entry: str) -> None:
        if entry in self._mine:
            return
        self._mine[entry] = None
        if self._marker is not None:
            try:
                append_entry(self._marker, entry)
            except OSError as exc:
                raise OutputError(
                    f"cannot write {shown(self.path / MARKER)}: {exc.strerror}"
                ) from None


def claim_folder(
    path: str | Path,
    *,
    force: bool = False,
    flag: str = "--force",
    within: str | Path | None = None,
) -> OutputFolder:
    """Admit ``path`` for a run's outputs (creating it), clear what an earlier run of ours left.

    ``within``: ``path`` was derived (not named by the user) below this folder, so every folder
    from there down is opened without following links, as inside a claimed folder.
    """
    if within is not None:
        return _claim_within(Path(path), Path(within), force, flag)
    folder = check_output_folder(path, force=force, flag=flag)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {shown(folder)}: {exc.strerror}") from None
    return _claimed(_open_user_dir(folder), folder, force, flag)


def _claim_within(path: Path, within: Path, force: bool, flag: str) -> OutputFolder:
    # The base is where the user put something (a sweep's database): it is only reached, not
    # written into, so it may be any folder (their home too); the folder made below it is claimed.
    given = Path(os.path.abspath(os.path.expanduser(within)))
    check_limits(given)
    base = resolve_links(given)
    try:
        parts = Path(os.path.abspath(path)).relative_to(given).parts
    except ValueError:
        raise OutputError(f"{shown(path)} is not inside {shown(within)}") from None
    if not parts or not all(plain_name(part) for part in parts):
        raise OutputError(f"{shown(path)}: name a folder inside {shown(within)}")
    check_limits(base.joinpath(*parts))
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {shown(base)}: {exc.strerror}") from None
    fd, here = _open_user_dir(base), base
    try:
        for part in parts:
            inner = _enter(fd, part, here / part)
            os.close(fd)
            fd, here = inner, here / part
    except BaseException:
        os.close(fd)
        raise
    return _claimed(fd, here, force, flag)


def _claimed(fd: int, folder: Path, force: bool, flag: str) -> OutputFolder:
    try:
        clear_listed(fd, _admit(fd, folder, force, flag))
        write_marker(fd, [])
        marker = open_marker(fd)
    except OSError as exc:
        os.close(fd)
        raise OutputError(f"cannot write into {shown(folder)}: {exc.strerror}") from None
    except BaseException:
        os.close(fd)
        raise
    return OutputFolder(fd, folder, force=force, flag=flag, marker=marker)


#: Folders claimed once per process (``session_folder``), by resolved path.
_SESSIONS: dict[Path, OutputFolder] = {}


def session_folder(
    path: str | Path, *, force: bool = False, flag: str = "force=True"
) -> OutputFolder:
    """``claim_folder`` once per process and folder: every later claim of it in this process
    (each graph of a compiled model, each ``HwsimMode`` block) shares it rather than clearing
    what the earlier ones wrote. Never closed: it lives as long as the process."""
    folder = resolved(path)
    known = _SESSIONS.get(folder)
    if known is not None and not known.closed and _same_folder(known, folder):
        return known
    claimed = claim_folder(folder, force=force, flag=flag)
    _SESSIONS[folder] = claimed
    return claimed


def _same_folder(known: OutputFolder, folder: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(known._fd), os.stat(folder))
    except OSError:
        return False


# ---- one named file -----------------------------------------------------------------------------


@contextmanager
def output_file(
    path: str | Path, mode: str = "w", *, named: bool = True, **open_args: Any
) -> Iterator[IO[Any]]:
    """Write the file the user named (``-o PATH``), in place when the block ends (see the module
    doc); its folder is made if missing. ``named=False``: hwsim chose the path (a default), so
    an existing file is replaced only if hwsim wrote it. ``open_args`` go to ``open``."""
    target = check_output_file(path)
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {shown(parent)}: {exc.strerror}") from None
    fd = _open_user_dir(parent)
    try:
        kind, entries, _ = inspect_folder(fd)
        # A file written into a run folder of ours joins its marker; elsewhere it is just written.
        marker = open_marker(fd) if kind == "ours" else None
    except OSError as exc:
        os.close(fd)
        raise OutputError(f"cannot write into {shown(parent)}: {exc.strerror}") from None
    folder = OutputFolder(
        fd, parent, force=named, flag="", marker=marker, mine=entries, default=not named
    )
    with folder, folder.open(target.name, mode, **open_args) as file:
        yield file
