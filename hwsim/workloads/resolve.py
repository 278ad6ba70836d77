"""The one resolver of workload strings, for ``hwsim run``, sweeps and benchmarks.

Forms (DESIGN.md "Command line"):

- ``gemm:MxKxN[:dtype]``: C[M, N] = A[M, K] @ B[K, N] with the blocked matmul kernel
  (``hwsim.workloads.gemm``), seeded inputs, checked against numpy;
- a built-in kernel name, ``hwsim run --list`` (``hwsim.library.workloads.WORKLOADS``);
- ``FILE.py:NAME``: a kernel, a ``Workload``, a function ``config -> Program``, or a function
  returning a torch model and example inputs (``hwsim.workloads.file_workload``);
- ``FILE.hwprog``: a saved program (``hwsim.workloads.saved``, e.g. from ``hwsim export``).

``parse_workload`` checks a string (its syntax, bounded dimensions, that files exist) and says
what it names: a ``WorkloadRef``, plain data that travels to sweep workers. ``load_workload``
makes the runnable ``Workload`` from it, once per process (importing FILE.py runs its code, by
design; loading a saved program runs none). Paths are relative to ``base_dir``: the working
directory for ``hwsim run``, the spec's folder for sweeps. Every error is one line naming the
string and what would be right.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hwsim.errors import WorkloadError, shorten
from hwsim.library.workloads import WORKLOADS, LibraryWorkload
from hwsim.workloads.file_workload import file_workload
from hwsim.workloads.gemm import FORM, GemmSpec, build_gemm, build_gemm_timing, check_result
from hwsim.workloads.registry import Workload
from hwsim.workloads.saved import PROGRAM_SUFFIX, saved_workload

Kind = Literal["gemm", "builtin", "file", "program"]
#: The built-in kernels by name.
BUILTINS: dict[str, LibraryWorkload] = {w.name: w for w in WORKLOADS}
#: The forms, for errors.
FORMS = f"{FORM}, a built-in kernel (hwsim run --list), FILE.py:NAME or FILE{PROGRAM_SUFFIX}"
_PYTHON_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class WorkloadRef:
    """What a workload string names. ``name``: its canonical spelling (a run's ``workload``, a
    sweep database's workload column); ``path``: absolute, for the file and program kinds;
    ``attribute``: NAME of ``FILE.py:NAME``."""

    text: str
    kind: Kind
    name: str
    path: str = ""
    attribute: str = ""

    @property
    def hbm_bytes(self) -> int | None:
        """HBM the workload's tensors need, if the string alone tells (a gemm's shapes)."""
        return GemmSpec.parse(self.name).hbm_bytes if self.kind == "gemm" else None


def parse_workload(text: str, base_dir: Path | None = None) -> WorkloadRef:
    """Check ``text`` and say what it names (raises ``WorkloadError`` saying why not)."""
    base = Path.cwd() if base_dir is None else base_dir
    if text.startswith("gemm:"):
        return WorkloadRef(text, "gemm", GemmSpec.parse(text).name)
    if text in BUILTINS:
        return WorkloadRef(text, "builtin", text)
    if text.endswith(PROGRAM_SUFFIX):
        return WorkloadRef(text, "program", text, str(_existing(base, text, "saved program")))
    file, colon, attribute = text.rpartition(":")
    if colon and file.endswith(".py"):
        if not _PYTHON_NAME.fullmatch(attribute):
            raise WorkloadError(
                f"'{shorten(text)}': after {file}: comes the name of a kernel or function in it "
                "(ASCII letters, digits and _)"
            )
        path = _existing(base, file, "workload file")
        return WorkloadRef(text, "file", text, str(path), attribute)
    if text.endswith(".py"):
        raise WorkloadError(f"'{shorten(text)}': name the kernel or function in it: {text}:NAME")
    raise WorkloadError(f"unknown workload '{shorten(text)}'{_did_you_mean(text)}; use {FORMS}")


def _did_you_mean(text: str) -> str:
    candidates = {name: name for name in BUILTINS}
    candidates["gemm"] = FORM
    close = difflib.get_close_matches(text, list(candidates), n=1)
    return f" (did you mean '{candidates[close[0]]}'?)" if close else ""


def _existing(base_dir: Path, text: str, what: str) -> Path:
    path = Path(text).expanduser()
    path = path if path.is_absolute() else base_dir / path
    if not path.is_file():
        raise WorkloadError(f"{what} '{shorten(text)}' not found (looked for {path})")
    return path.resolve()


@functools.cache
def load_workload(ref: WorkloadRef) -> Workload:
    """The runnable workload ``ref`` names, made once per process."""
    if ref.kind == "gemm":
        spec = GemmSpec.parse(ref.name)
        return Workload(
            spec.name,
            "blocked TensorE matmul",
            functools.partial(build_gemm, spec),
            lambda outputs: check_result(spec, outputs["c"]),
            functools.partial(build_gemm_timing, spec),
            spec.hbm_bytes,
        )
    if ref.kind == "builtin":
        return BUILTINS[ref.name].workload()
    if ref.kind == "program":
        return saved_workload(ref.path, ref.name)
    return file_workload(Path(ref.path), ref.attribute, ref.text)


def resolve_workload(text: str, base_dir: Path | None = None) -> Workload:
    """``load_workload(parse_workload(text, base_dir))``."""
    return load_workload(parse_workload(text, base_dir))


def list_workloads() -> list[tuple[str, str]]:
    """(name or pattern, description) of every form, built-in kernels by name."""
    rows = [(FORM, "C = A @ B with the blocked TensorE matmul kernel, vs numpy")]
    rows += [(name, workload.description) for name, workload in sorted(BUILTINS.items())]
    rows.append(("FILE.py:NAME", "a kernel (inputs from NAME_inputs()), or a torch model factory"))
    rows.append(
        (f"FILE{PROGRAM_SUFFIX}", "a saved program (hwsim export), vs its expected outputs")
    )
    return rows
