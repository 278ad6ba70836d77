"""Writing hwsim's PNG figures with hwsim's mark, and reading the mark back: how a default path
(``hwsim plot``'s ``<kind>.png`` beside a trace, ``hwsim sweep plot``'s ``<db>-<kind>.png``) tells
a figure of ours, which a re-run may replace, from a user's file of the same name, which it may not.

The mark is the PNG's ``Software`` text chunk, ``hwsim <version>`` (matplotlib writes the
``metadata`` it is given as ``tEXt`` chunks before the image data). It says who wrote a file, not
who may delete it: it is only consulted for default paths, never to clear a folder.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import IO, TYPE_CHECKING

from hwsim import __version__

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: ``savefig(..., metadata=PNG_METADATA)`` marks a figure as hwsim's.
PNG_METADATA = {"Software": f"hwsim {__version__}"}
_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_KEY = b"Software\x00hwsim "
#: The mark is in the first chunks; a file is read no further than this.
_MAX_READ_BYTES = 1 << 16


def save_png(fig: Figure, target: str | Path | IO[bytes], dpi: int) -> Path:
    """Write ``fig`` as a marked PNG to ``target``: a path (written through the output guard, as
    a file the user named) or an open binary stream (``hwsim.outputs_guard.output_file``'s)."""
    if not isinstance(target, (str, Path)):
        fig.savefig(target, format="png", dpi=dpi, metadata=PNG_METADATA)
        return Path(target.name)
    from hwsim.outputs_guard import output_file

    with output_file(target, "wb") as out:
        fig.savefig(out, format="png", dpi=dpi, metadata=PNG_METADATA)
    return Path(target)


def marked_as_ours(fd: int, name: str) -> bool:
    """Whether the regular file ``name`` in the open folder ``fd`` is a PNG carrying hwsim's mark
    (read without following a link; any failure to read it means no)."""
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return False
    with os.fdopen(descriptor, "rb") as file:
        try:
            head = file.read(_MAX_READ_BYTES)
        except OSError:
            return False
    return _has_mark(head)


def _has_mark(data: bytes) -> bool:
    if not data.startswith(_SIGNATURE):
        return False
    at = len(_SIGNATURE)
    while at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        if kind == b"IDAT":  # the text chunks matplotlib writes come before the image data
            return False
        if kind == b"tEXt" and data[at + 8 : at + 8 + length].startswith(_KEY):
            return True
        at += 12 + length
    return False
