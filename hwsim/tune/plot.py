"""The convergence plot of a tuning run: best simulated time against candidates tried."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def convergence_plot(result: Any, path: str | Path) -> Path:
    """Write a PNG: each candidate's time (dots; infeasible ones marked at the top) and the best
    so far (a step line), against the candidate's index."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hwsim.outputs_guard import output_file

    trials = result.trials
    ok = [(t.index, t.outcome.total_ns / 1e6) for t in trials if t.outcome.ok]
    best = [(t.index, t.best_ns / 1e6) for t in trials if t.best_ns is not None]
    failed = [t.index for t in trials if not t.outcome.ok]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    if ok:
        xs, ys = zip(*ok, strict=True)
        ax.scatter(xs, ys, s=14, color="#9ab", label="candidate", zorder=2)
    if best:
        bx, by = zip(*best, strict=True)
        ax.step(bx, by, where="post", color="#c33", label="best so far", zorder=3)
    if failed:
        top = max((ms for _, ms in ok), default=1.0)
        ax.scatter(
            failed,
            [top] * len(failed),
            marker="x",
            color="#888",
            s=14,
            label="infeasible",
            zorder=1,
        )
    ax.set_yscale("log")
    from matplotlib.ticker import ScalarFormatter

    for axis_formatter in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        axis_formatter(ScalarFormatter())
    ax.set_xlabel("candidates tried")
    ax.set_ylabel("simulated time (ms)")
    ax.set_title(f"hwsim tune {result.target} on {result.config}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with output_file(path, "wb") as stream:
        fig.savefig(stream, format="png")
    plt.close(fig)
    return Path(path)
