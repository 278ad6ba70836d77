"""Runs the public NKI kernels of ``catalog.py`` unmodified on the simulator and checks their
numerics against the references; prints the tally.

    .venv/bin/python -m tests.nki_upstream.harness            # all 63 (a few minutes)
    .venv/bin/python -m tests.nki_upstream.harness --fast     # the default test run's subset
    .venv/bin/python -m tests.nki_upstream.harness -k mamba   # those whose id contains "mamba"

A kernel passes when it runs and every output is within the case's tolerance of the reference;
"wrong" is a run whose numbers differ (never silent: it fails the test); "error" is a run that
stopped with an error (the first line is printed); "skip" is a source that is not here (the
course's files are read from a local mirror only).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hwsim.nki import upstream
from hwsim.nki.kernel import simulate
from tests.nki_upstream.catalog import Case, cases

#: Host frameworks some upstream files import but whose kernels do not use (torch_xla for the
#: device, loguru for logging): empty stand-ins, so the files import unmodified.
STUBS = Path(__file__).parent / "stubs"


@dataclass
class Result:
    case: Case
    status: str  # pass | wrong | error | skip
    detail: str
    seconds: float


def case_file(case: Case) -> Path | None:
    """The kernel's file: vendored, or the course's read from the mirror (None: no mirror)."""
    if isinstance(case.file, str):
        return upstream.source(case.file)
    repo, path = case.file
    git_dir = upstream.MIRROR / repo / "repo"
    if not git_dir.is_dir():
        return None
    text = subprocess.run(
        ["git", "-C", str(git_dir), "show", f"HEAD:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    folder = Path(tempfile.gettempdir()) / "hwsim_nki_course"
    folder.mkdir(exist_ok=True)
    target = folder / Path(path).name
    target.write_text(text)
    return target


def _outputs(value: Any) -> list[np.ndarray]:
    items = value if isinstance(value, (tuple, list)) else (value,)
    return [np.asarray(v, dtype=np.float32) for v in items]


def compare(case: Case, got: Any, want: Any) -> str | None:
    """None when every output is within tolerance (NaN in the reference: not compared)."""
    got_list, want_list = _outputs(got), _outputs(want)
    if len(got_list) != len(want_list):
        return f"{len(got_list)} outputs, the reference has {len(want_list)}"
    for i, (g, w) in enumerate(zip(got_list, want_list, strict=True)):
        if g.shape != w.shape:
            return f"output {i}: shape {g.shape}, expected {w.shape}"
        keep = ~np.isnan(w)
        if not np.allclose(g[keep], w[keep], atol=case.atol, rtol=case.rtol):
            err = np.abs(g[keep] - w[keep])
            return f"output {i}: max abs error {err.max():.3g} (atol {case.atol}, rtol {case.rtol})"
    return None


def run_case(case: Case) -> Result:
    start = time.perf_counter()
    if str(STUBS) not in sys.path:
        sys.path.append(str(STUBS))
    try:
        path = case_file(case)
        if path is None:
            repo = case.file[0]
            return Result(case, "skip", f"no local mirror of {repo} ({upstream.MIRROR})", 0.0)
        if case.inputs is None:  # the file runs and checks its kernel itself at import
            upstream.load(path)
            return Result(case, "pass", "the file's own check", time.perf_counter() - start)
        fn = upstream.kernel(path, case.kernel)
        args, kwargs = case.inputs()
        golden = {k: kwargs.pop(k) for k in list(kwargs) if k.startswith("_")}
        if case.host:  # a host function that launches the kernel (the SPMD tutorials)
            got = fn(*args, **kwargs)
        else:
            target = fn[case.grid] if case.grid else fn
            got = simulate(target, **case.options)(*args, **kwargs)
        got = case.post(got) if case.post is not None else got
        problem = compare(case, got, case.reference(*args, **kwargs, **golden))
    except Exception as exc:  # the tally reports every kind of failure
        line = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        where = traceback.extract_tb(exc.__traceback__)[-1]
        detail = f"{line} [{Path(where.filename).name}:{where.lineno}]"
        return Result(case, "error", detail, time.perf_counter() - start)
    status = "pass" if problem is None else "wrong"
    return Result(case, status, problem or "", time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fast", action="store_true", help="only the cases not marked slow")
    parser.add_argument("-k", default="", help="only cases whose id contains this")
    parser.add_argument("--record", action="store_true", help="keep the outcomes for the docs")
    args = parser.parse_args(argv)
    selected = [c for c in cases() if args.k in c.id and not (args.fast and c.slow)]
    results = []
    for case in selected:
        result = run_case(case)
        results.append(result)
        print(f"{result.status:5} {result.seconds:6.1f}s {case.id}  {result.detail}", flush=True)
    tally = {s: sum(r.status == s for r in results) for s in ("pass", "wrong", "error", "skip")}
    print(
        f"\n{tally['pass']} of {len(results)} kernels run unmodified with correct numerics; "
        f"{tally['wrong']} wrong, {tally['error']} stop with an error, {tally['skip']} skipped"
    )
    if args.record:
        from tests.nki_upstream import record

        outcomes = {r.case.id: record.kernel_outcome(r.case, r.status, r.detail) for r in results}
        record.update("kernels", outcomes)
        record.fill_unrun(
            "kernels", {c.id: {"file": record.kernel_outcome(c, "", "")["file"]} for c in cases()}
        )
    return 1 if tally["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
