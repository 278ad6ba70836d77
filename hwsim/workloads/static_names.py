"""What a user's Python file defines at its top level, read without running it.

A sweep spec is data (SECURITY.md): validating one, with ``--dry-run`` too, must not import the
``FILE.py`` workloads it names, since importing runs the file. So a spec's ``FILE.py:NAME`` is
checked here from the file's syntax tree (``ast.parse`` runs nothing): the file exists, parses,
and binds NAME at its top level. Whether NAME is a kernel, a function or a model factory is known
only by importing it, which happens when the runs are executed.
"""

from __future__ import annotations

import ast
import difflib
from pathlib import Path

from hwsim.errors import WorkloadError, shorten

#: A workload file larger than this is not read for its names (a source file of megabytes is
#: generated, not written): its check is left to the import when the runs execute.
MAX_SOURCE_BYTES = 16 * 2**20


def check_defines(path: Path, name: str, text: str) -> None:
    """Raise ``WorkloadError`` unless the file at ``path`` parses and binds ``name`` at its top
    level (``text``: the workload as the user spelled it). A file that binds names in ways the
    syntax tree cannot follow (``from x import *``, assigning through ``globals()``) passes."""
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            return
        source = path.read_bytes()
    except OSError as exc:
        raise WorkloadError(f"{shorten(text)}: cannot read {path} ({exc.strerror})") from None
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise WorkloadError(
            f"{shorten(text)}: {path.name}, line {exc.lineno}: {exc.msg} (the file does not parse)"
        ) from None
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, nesting too deep
        raise WorkloadError(f"{shorten(text)}: {path.name} does not parse ({exc})") from None
    names, opaque = _top_level_names(tree)
    if name in names or opaque:
        return
    public = sorted(n for n in names if not n.startswith("_"))
    close = difflib.get_close_matches(name, public, n=3)
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    defined = ", ".join(public[:12]) + (", ..." if len(public) > 12 else "")
    raise WorkloadError(
        f"{shorten(text)}: {path.name} defines no '{name}'{hint}; it defines {defined or 'nothing'}"
    )


def _top_level_names(tree: ast.Module) -> tuple[set[str], bool]:
    """(names bound by the module's top-level statements, whether it binds names the tree
    cannot follow)."""
    names: set[str] = set()
    opaque = False
    statements = list(tree.body)
    while statements:
        node = statements.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    opaque = True
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, (ast.If, ast.Try, ast.For, ast.While, ast.With, ast.ExceptHandler)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                statements.extend(getattr(node, field, []))
        names |= _bound_by(node)
        opaque = opaque or _uses_globals(node)
    return names, opaque


def _bound_by(node: ast.AST) -> set[str]:
    """Names a statement binds: assignment, loop and ``with`` targets, walrus expressions."""
    targets: list[ast.AST] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For)):
        targets = [node.target]
    elif isinstance(node, ast.With):
        targets = [item.optional_vars for item in node.items if item.optional_vars]
    bound = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    walrus = (n for n in _own_expressions(node) if isinstance(n, ast.NamedExpr))
    return bound | {n.target.id for n in walrus if isinstance(n.target, ast.Name)}


def _own_expressions(node: ast.AST) -> list[ast.AST]:
    """The nodes a top-level statement runs itself: not the bodies of the functions and
    classes it defines (nor a compound statement's body, which is visited on its own)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [n for d in node.decorator_list for n in ast.walk(d)]
    found: list[ast.AST] = []
    stack = [child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.stmt)]
    while stack:
        current = stack.pop()
        found.append(current)
        if not isinstance(current, ast.Lambda):
            stack.extend(ast.iter_child_nodes(current))
    return found


def _uses_globals(node: ast.AST) -> bool:
    """Whether a top-level statement calls ``globals()``, ``vars()``, ``setattr`` or ``exec``
    (it may bind any name)."""
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id in ("globals", "setattr", "exec", "vars")
        for n in _own_expressions(node)
    )
