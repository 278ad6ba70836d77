"""The MCP server: run, report, advise, tune, fuzz and sweep as tools with typed arguments and
JSON results, on the Model Context Protocol SDK (``mcp``), so an agent can drive the loop.

Read-only by default: the tools simulate and answer, and write nothing. Given a folder
(``hwsim mcp --write-root DIR``), tools that write (a run's trace folder, a tuner cache, fuzz
reproductions, a sweep database) write only below it: every path an agent names is taken
relative to that folder, must stay inside it, and is written through the same output guard as
the CLI. Counts have the CLI's bounds and a ceiling per call (``LIMITS``); errors come back as
tool errors with the CLI's one-line message.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hwsim.errors import HwsimError

#: Ceilings per call, so one request cannot hold the server for hours.
LIMITS = {"trials": 500, "cases": 2000, "jobs": 64}
F = TypeVar("F", bound=Callable[..., Any])


class WriteRefused(HwsimError):
    """A tool was asked to write where the server may not."""


class Workspace:
    """Where the tools may write: nowhere (None), or below ``root``."""

    def __init__(self, root: str | Path | None) -> None:
        self.root = Path(os.path.abspath(os.path.expanduser(root))) if root else None
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)

    def path(self, name: str | None, what: str) -> Path | None:
        """The path for ``name`` inside the root (None: nothing to write)."""
        if name is None:
            return None
        if self.root is None:
            raise WriteRefused(
                f"{what}: this server is read-only; start it with --write-root DIR to let tools "
                "write below DIR"
            )
        candidate = Path(os.path.abspath(self.root / name))
        if candidate != self.root and self.root not in candidate.parents:
            raise WriteRefused(f"{what}: {name!r} is outside the write root {self.root}")
        if candidate.is_symlink():
            raise WriteRefused(f"{what}: {name!r} is a symbolic link")
        return candidate


def _bounded(name: str, value: int) -> int:
    if value < 1 or value > LIMITS[name]:
        raise HwsimError(f"{name} must be between 1 and {LIMITS[name]}, got {value}")
    return value


def make_server(write_root: str | Path | None = None) -> Any:
    """The MCPServer with the loop's tools (see the module docstring)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations

    space = Workspace(write_root)
    server = MCPServer(
        "hwsim",
        log_level="WARNING",
        instructions=(
            "Cycle-level simulator of AWS Trainium NeuronCores. run simulates a workload and "
            "returns its summary; advise names the bottleneck and ranks what to change with "
            "gains the simulator estimates; tune searches a kernel's declared space; fuzz checks "
            "generated kernels; sweep runs a sweep spec; report reads a run folder. "
            + ("Writing is allowed below the write root only." if space.root else "Read-only.")
        ),
    )
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    writes = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)

    def tool(annotations: Any) -> Callable[[F], F]:
        def wrap(fn: F) -> F:
            import functools

            @functools.wraps(fn)
            def guarded(*args: Any, **kwargs: Any) -> Any:
                try:
                    return fn(*args, **kwargs)
                except (HwsimError, OSError) as exc:
                    raise ToolError(f"hwsim: error: {exc}") from None

            server.tool(annotations=annotations)(guarded)
            return fn

        return wrap

    @tool(writes if space.root else read_only)
    def run(
        workload: str,
        config: str = "trn2",
        overrides: list[str] | None = None,
        numerics: bool = True,
        out: str | None = None,
    ) -> dict[str, Any]:
        """Simulate a workload (gemm:MxKxN[:dtype], a library kernel name, or a saved program)
        on a config (trn1, trn2, trn3, tiny) with --set style overrides; returns the run summary
        (total_ns, engines, mfu_pct, bottleneck, numerics_ok...). out: a run folder to write
        below the write root."""
        from hwsim.workloads.cli_run import run_workload

        target = space.path(out, "run out")
        result, summary = run_workload(workload, config, overrides or [], numerics=numerics)
        if target is not None:
            from hwsim.trace.outputs import write_run_outputs

            write_run_outputs(result.trace, target, summary=summary)
            summary.out_dir = str(target)
        return summary.to_dict()

    @tool(read_only)
    def report(path: str) -> dict[str, Any]:
        """The summary of a saved run folder or trace.json."""
        from hwsim.trace.outputs import load_summary

        return load_summary(path).to_dict()

    @tool(read_only)
    def advise(
        target: str, config: str = "trn2", overrides: list[str] | None = None
    ) -> dict[str, Any]:
        """The bottleneck and ranked recommendations (evidence, action, expected gain) for a run
        folder, or for a workload simulated here (gains then re-simulated)."""
        from hwsim.advise.cli import advise_target

        return advise_target(target, config, overrides or []).to_dict()

    @tool(writes if space.root else read_only)
    def tune(
        target: str,
        inputs: list[str] | None = None,
        config: str = "trn2",
        overrides: list[str] | None = None,
        trials: int = 20,
        jobs: int = 1,
        seed: int = 0,
        db: str | None = None,
        advise_best: bool = True,
    ) -> dict[str, Any]:
        """Search a kernel's declared space (a library kernel such as matmul_tiled_blocked, or
        FILE.py:NAME) with inputs as SHAPE:DTYPE; returns the path, the best point and, with
        advise_best, what changed between the start and the best point. db: a result cache
        below the write root."""
        import argparse

        from hwsim.tune.cli import run_tune

        cache = space.path(db, "tune db")
        args = argparse.Namespace(
            target=target,
            input=list(inputs or []),
            config=config,
            overrides=list(overrides or []),
            trials=_bounded("trials", trials),
            jobs=_bounded("jobs", jobs),
            backend="loky",
            address=None,
            seed=seed,
            db=str(cache) if cache else None,
            start=None,
            plot=None,
            no_advise=not advise_best,
            json=True,
        )
        data = run_tune(args, echo=False)
        data.pop("trials", None)  # the path and the best point say it; the cache keeps all
        if "loop" in data:
            data["loop"].pop("lines", None)
        return data

    @tool(writes if space.root else read_only)
    def fuzz(
        cases: int = 20,
        seed: int = 0,
        config: str = "trn2",
        jobs: int = 1,
        db: str | None = None,
        out: str | None = None,
    ) -> dict[str, Any]:
        """Generate cases 0..cases-1 of a seed and check each (numerics, determinism, races,
        timing invariants); failures come shrunk. out/db: below the write root."""
        from hwsim.fuzz.runner import fuzz as run_fuzz

        return run_fuzz(
            _bounded("cases", cases),
            seed,
            config,
            jobs=_bounded("jobs", jobs),
            db=space.path(db, "fuzz db"),
            out=space.path(out, "fuzz out"),
        )

    @tool(writes)
    def sweep(spec: str, db: str, jobs: int = 1) -> dict[str, Any]:
        """Run a sweep spec (YAML) into a results database below the write root; returns the
        counts of runs done, failed and skipped."""
        from hwsim.sweep.execute import run_sweep
        from hwsim.sweep.spec import load_sweep

        path = space.path(db, "sweep db")
        plan = load_sweep(spec)
        outcome = run_sweep(plan, path, jobs=_bounded("jobs", jobs), progress=False)
        return {
            "db": str(outcome.db),
            "planned": outcome.planned,
            "ran": outcome.ran,
            "skipped": outcome.skipped,
            "ok": outcome.ok,
            "failed": outcome.failed,
            "elapsed_s": round(outcome.elapsed_s, 2),
        }

    return server
