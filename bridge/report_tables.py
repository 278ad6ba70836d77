"""Rich tables of a bridge ``Report`` (kept apart so the report's data stays readable)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from hwsim.units import size_text, time_text

if TYPE_CHECKING:
    from hwsim.bridge.report import OpRecord, Report


def _bytes(value: float | None) -> str:
    return "" if value is None else size_text(value)


def _peak(run: dict[str, Any]) -> str:
    """Peak HBM and its scratch part; with what the scratch would take without the memory plan
    (every scratch tensor at its own address) when that is more. Scratch the graph did not
    declare as tensors (the kernel arena) has no unplanned size, so none is shown for it."""
    if "hbm_peak_bytes" not in run:
        return ""
    scratch = run["hbm_scratch_peak_bytes"]
    unplanned = run["hbm_scratch_unplanned_bytes"]
    text = f"{_bytes(run['hbm_peak_bytes'])} (scratch {_bytes(scratch)}"
    if unplanned > scratch:
        text += f", {_bytes(unplanned)} without the memory plan"
    return text + ")"


def _op_name(op: object) -> str:
    """An op as a user reads it: ``getitem``, not ``<built-in function getitem>``."""
    text = str(op)
    for prefix in ("<built-in function ", "<function "):
        if text.startswith(prefix):
            return text[len(prefix) :].split()[0].rstrip(">")
    return text


def _err(value: float) -> str:
    return f"{value:.2e}"


#: Above this many nodes, ``report_tables(per_node=None)`` summarises by op instead.
PER_NODE_MAX = 40


def _auto_cast(report: Report) -> str:
    """'matmult/bf16' or 'none' from the report's precision entry."""
    given = report.precision
    mode = given.get("auto_cast", "none")
    return mode if mode == "none" else f"{mode}/{given.get('auto_cast_type', '?')}"


def report_tables(report: Report, per_node: bool | None = None) -> list[Table]:
    """The report's tables; ``per_node``: one row per node (None: if there are few)."""
    title = (
        f"hwsim bridge ({report.mode}) on {report.config}, auto-cast {_auto_cast(report)}, "
        f"fallback={report.fallback}"
        if report.mode != "analyze"
        else "hwsim op support (nothing has run yet)"
    )
    phases = list(dict.fromkeys(r.phase for r in report.ops))
    sections = [(title, report.ops)]
    if len(phases) > 1:  # training: forward, backward, optimizer each get their section
        sections = [
            (f"{title} — {phase or 'other'}", [r for r in report.ops if r.phase == phase])
            for phase in phases
        ]
    tables = []
    for heading, ops in sections:
        whole = len(ops) <= PER_NODE_MAX if per_node is None else per_node
        tables.append(
            _node_table(report, heading, ops) if whole else _op_table(report, heading, ops)
        )
    return [*tables, *_other_tables(report)]


def _op_table(report: Report, title: str, records: list[OpRecord]) -> Table:
    """One row per (op, where): how many nodes, their simulated time, their worst error."""
    ran = bool(report.runs)
    checked = any(r.error is not None for r in records)  # eager mode checks every op
    groups: dict[tuple[str, str], list[OpRecord]] = {}
    for r in records:
        where = r.status if r.status != "cpu" else f"cpu ({r.reason})"
        groups.setdefault((r.op, where), []).append(r)
    table = Table(title=f"{title} — {len(records)} nodes by op", title_justify="left")
    typed = any(r.compute_dtype for r in records)  # the dtype each op computed in (auto-cast)
    columns = (
        ["op", "where", "nodes"] + (["dtype"] if typed else []) + (["sim time"] if ran else [])
    )
    for column in columns + (["errors vs CPU"] if checked else []):
        table.add_column(column)
    order = sorted(groups.items(), key=lambda item: -sum(r.sim_ns for r in item[1]))
    for (op, where), records in order:
        row = [op, where, str(len(records))]
        if typed:
            row.append(", ".join(sorted({r.compute_dtype for r in records if r.compute_dtype})))
        if ran:
            sim_ns = sum(r.sim_ns for r in records)
            row.append(time_text(sim_ns) if sim_ns else "")
        if checked:
            errors = [r.error for r in records if r.error is not None]
            worst = max(errors, key=lambda e: (not e["ok"], e["max_abs"]), default=None)
            error = ""
            if worst is not None:
                error = ("ok " if worst["ok"] else "FAIL ") + _err(worst["max_abs"])
            row.append(error)
        table.add_row(*row)
    table.caption = "one row per node: report.txt, or Report.print(per_node=True)"
    return table


def _node_table(report: Report, title: str, records: list[OpRecord]) -> Table:
    ran = bool(report.runs)
    checked = any(r.error is not None for r in records)
    ops = Table(title=title, title_justify="left")
    sources = any(r.source for r in records)
    modules = any(r.module for r in records)
    columns = ["node", "op", "where", "shapes"] + (["from"] if sources else [])
    columns += ["module"] if modules else []
    columns += (["sim time"] if ran else []) + (["errors vs CPU"] if checked else [])
    for column in columns:
        ops.add_column(column)
    for r in records:
        where = r.status if r.status != "cpu" else f"cpu ({r.reason})"
        row = [r.node, r.op, where, r.shapes] + ([r.source] if sources else [])
        row += [r.module] if modules else []
        if ran:
            row.append(time_text(r.sim_ns) if r.sim_ns else "")
        if checked:
            error = ""
            if r.error is not None:
                error = ("ok " if r.error["ok"] else "FAIL ") + _err(r.error["max_abs"])
            row.append(error)
        ops.add_row(*row)
    return ops


def _other_tables(report: Report) -> list[Table]:
    """Decompositions, CPU fallbacks, outputs, top ops, torch.compile's graphs, runs: each
    only when there is something to show."""
    makers = (
        _decomposed,
        _fallbacks,
        _outputs,
        _versus_eager,
        _top_ops,
        _compiled,
        _phases,
        _runs,
    )
    return [table for make in makers if (table := make(report)) is not None]


def _decomposed(report: Report) -> Table | None:
    decomposed = report.decompositions()
    if not decomposed:
        return None
    table = Table(title="decomposed into Core ATen (by PyTorch's decompositions)")
    table.title_justify = "left"
    table.add_column("op")
    table.add_column("became")
    for original, into in sorted(decomposed.items()):
        became = ", ".join(f"{_op_name(op)} x{n}" for op, n in sorted(into.items()))
        table.add_row(_op_name(original), became)
    return table


def _fallbacks(report: Report) -> Table | None:
    if not report.fallbacks():
        return None
    table = Table(title="run on the CPU", title_justify="left")
    for column in ("node", "op", "reason", "detail", "host time"):
        table.add_column(column)
    for r in report.fallbacks():
        table.add_row(r.node, r.op, r.reason, r.detail, time_text(r.host_ns) if r.host_ns else "")
    return table


def _outputs(report: Report) -> Table | None:
    if not report.outputs:
        return None
    table = Table(
        title="outputs against the CPU at matched precision (judged) and in fp32",
        title_justify="left",
    )
    judged = ("output", "shape", "dtype", "computed in", "max abs", "max rel", "ok")
    for column in (*judged, "vs fp32: max abs", "max rel"):
        table.add_column(column)
    problems: dict[str, list[str]] = {}
    for o in report.outputs:
        wide = o.vs_fp32
        ok = "yes" if o.stats.ok else f"NO ({o.stats.mismatched} elements)"
        if o.stats.relative:
            ok += " (relative: tiny output)"
        if o.reference_error:  # judged against another reference than the matched one
            problems.setdefault(o.reference_error, []).append(o.name)
            ok += f" — REFERENCE FAILED [{list(problems).index(o.reference_error) + 1}]"
        table.add_row(
            o.name,
            str(list(o.shape)),
            o.dtype,
            o.computed_in,
            _err(o.stats.max_abs),
            _err(o.stats.max_rel),
            escape(ok),
            _err(wide.max_abs) if wide is not None else "n/a",
            _err(wide.max_rel) if wide is not None else "n/a",
        )
    if problems:
        table.caption = escape(
            "; ".join(
                f"[{i}] {problem} ({len(names)} outputs)"
                for i, (problem, names) in enumerate(problems.items(), 1)
            )
        )
    return table


#: Rows of the eager-check table when every record passed (the worst ones first).
EAGER_ROWS = 12


def _versus_eager(report: Report) -> Table | None:
    """Outputs and input gradients of each compiled graph against eager PyTorch: every failure,
    then the closest calls to failing."""
    records = [*report.eager_outputs, *report.gradients]
    if not records:
        return None
    wrong = [r for r in records if not r.stats.ok or r.reference_error]
    rest = sorted((r for r in records if r not in wrong), key=lambda r: -r.stats.max_abs)
    shown = wrong + rest[: max(0, EAGER_ROWS - len(wrong))]
    table = Table(
        title=(
            f"against eager PyTorch (the model's own code): {len(report.eager_outputs)} outputs, "
            f"{len(report.gradients)} gradients, {len(wrong)} wrong"
            + (f"; {len(records) - len(shown)} more passed" if len(records) > len(shown) else "")
        ),
        title_justify="left",
    )
    for column in ("output / gradient", "shape", "computed in", "max abs", "max rel", "ok"):
        table.add_column(column)
    for r in shown:
        ok = "yes" if r.stats.ok else f"NO ({r.stats.mismatched} elements)"
        if r.reference_error:
            ok = f"NO ({r.reference_error})"
        table.add_row(
            escape(r.name),  # gradient names hold [brackets], rich's markup
            str(list(r.shape)),
            r.computed_in,
            _err(r.stats.max_abs),
            _err(r.stats.max_rel),
            ok,
        )
    return table


def _top_ops(report: Report) -> Table | None:
    top = [r for r in report.top_ops() if r.sim_ns > 0]
    if not top:
        return None
    table = Table(title="top ops by simulated time", title_justify="left")
    for column in ("node", "op", "sim time", "span", "instructions"):
        table.add_column(column)
    for r in top:
        table.add_row(r.node, r.op, time_text(r.sim_ns), time_text(r.span_ns), str(r.instructions))
    return table


def _compiled(report: Report) -> Table | None:
    if report.mode != "compile" or not report.compile_ids:
        return None
    dynamo = report.dynamo_summary()
    table = Table(
        title=f"torch.compile: {dynamo['graphs_compiled']} graphs from {dynamo['frames']} "
        f"frames, {dynamo['graph_breaks']} graph breaks, {dynamo['recompiles']} recompiles, "
        f"{dynamo['shape_recompiles']} programs lowered again for new shapes",
        title_justify="left",
    )
    table.add_column("graph break reason")
    table.add_column("count")
    for reason, count in dynamo["break_reasons"].items():
        table.add_row(reason, str(count))
    if not dynamo["break_reasons"]:
        table.add_row("(none: every graph is whole)", "0")
    return table


def _phases(report: Report) -> Table | None:
    """Per phase (forward, backward, optimizer): its graphs, nodes by where they ran, and its
    simulated time (the runs of its graphs) and CPU host time (CPU ops between partitions)."""
    phases = list(dict.fromkeys(r.phase for r in report.ops if r.phase))
    if not phases:
        return None
    times = report.phase_times()
    host: dict[str, float] = {}
    for timeline in report.timelines:
        phase = report.phase_of(str(timeline.get("graph", "")))
        host[phase] = host.get(phase, 0.0) + float(timeline.get("cpu_host_ns", 0.0))
    table = Table(title="time per phase (all calls)", title_justify="left")
    for column in ("phase", "graphs", "simulator nodes", "cpu nodes", "simulated", "cpu host"):
        table.add_column(column)
    for phase in phases:
        records = [r for r in report.ops if r.phase == phase]
        graphs = [g for g in report.graphs if report.phase_of(str(g["graph"])) == phase]
        table.add_row(
            phase,
            str(len(graphs)),
            str(sum(r.status == "simulator" for r in records)),
            str(sum(r.status == "cpu" for r in records)),
            time_text(times.get(phase, 0.0)),
            time_text(host[phase]) if phase in host else "",
        )
    return table


def _cores_text(run: dict[str, Any]) -> str:
    """The physical cores a run's program used, "(chosen)" when the bridge chose them."""
    cores = run.get("cores")
    if cores is None:  # a host transfer, an eager op
        return ""
    return f"{cores} (chosen)" if run.get("cores_chosen") else str(cores)


def _runs(report: Report) -> Table | None:
    if not report.runs:
        return None
    table = Table(title="simulator runs", title_justify="left")
    for column in ("graph", "phase", "cores", "total", "instructions", "MFU %", "HBM traffic"):
        table.add_column(column)
    table.add_column("HBM peak")
    table.add_column("bottleneck")
    for run in report.runs[-10:]:
        table.add_row(
            str(run.get("graph", "")),
            str(run.get("phase", "")),
            _cores_text(run),
            time_text(run.get("total_ns", 0.0)),
            str(run.get("instructions", "")),
            f"{run.get('mfu_pct', 0.0):.2f}",
            _bytes(run.get("hbm_bytes")),
            _peak(run),
            str(run.get("bottleneck", "")),
        )
    if len(report.runs) > 10:
        table.caption = (
            f"last 10 of {len(report.runs)} runs; total {time_text(report.total_sim_ns)}"
        )
    return table
