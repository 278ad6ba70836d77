"""No import cycles among hwsim's modules (``hwsim``, ``hwsim.kernels``, ``hwsim.bridge``).

The graph is read statically from the sources: an edge for every import a module runs when it
is imported (module level, including inside ``if``/``try``; not under ``TYPE_CHECKING``, not in
functions). Importing ``a.b.c`` imports the packages ``a`` and ``a.b`` too, so those are edges
as well, except to the module's own enclosing packages (Python has them importing already). A
cycle means the result of an import depends on which module of the cycle is imported first.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Repository folder -> the import name it installs as.
FOLDERS = {"hwsim": "hwsim", "kernels": "hwsim.kernels", "bridge": "hwsim.bridge"}
#: Packages that import nothing of the others even inside functions: the cycles issue 16 found
#: (library.workloads <-> workloads.registry, workloads.cli_run -> cli.report_cmd) ran there.
STRICT_PACKAGES = ("hwsim.workloads", "hwsim.library")


def _modules() -> dict[str, Path]:
    found = {}
    for folder, import_name in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([import_name, *parts])] = path
    return found


def _import_nodes(tree: ast.Module, module_level: bool) -> list[ast.Import | ast.ImportFrom]:
    if not module_level:
        return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(tree.body)
    return found


def _imported_names(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    # ``from pkg import name`` imports pkg.name if it is a module
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


@functools.cache
def import_graph(module_level: bool = True) -> dict[str, set[str]]:
    """Module -> the hwsim modules importing it imports (see the module docstring)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in _import_nodes(ast.parse(path.read_text()), module_level):
            for imported in _imported_names(node, package):
                parts = imported.split(".")
                for i in range(1, len(parts) + 1):
                    target = ".".join(parts[:i])
                    enclosing = name.startswith(target + ".")
                    if target in modules and target != name and not enclosing:
                        edges.add(target)
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles found by a depth-first search (each as the modules along it, first repeated)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return cycles


def cycle_through(graph: dict[str, set[str]], module: str) -> list[str] | None:
    """A cycle from ``module`` back to itself (breadth-first: a shortest one), or None."""
    came_from: dict[str, str] = {}
    frontier = [module]
    while frontier:
        following = []
        for current in frontier:
            for target in sorted(graph[current]):
                if target == module:
                    cycle = [current, module]
                    while cycle[0] != module:
                        cycle.insert(0, came_from[cycle[0]])
                    return cycle
                if target not in came_from:
                    came_from[target] = current
                    following.append(target)
        frontier = following
    return None


def test_the_search_finds_a_cycle_and_ignores_enclosing_packages() -> None:
    graph = {"a": {"a.b"}, "a.b": {"c"}, "c": {"a.b"}, "d": set()}
    assert find_cycles(graph) == [["a.b", "c", "a.b"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
    assert cycle_through(graph, "c") == ["c", "a.b", "c"]
    assert cycle_through(graph, "a") is None


def test_the_graph_sees_the_imports_of_this_repository() -> None:
    graph = import_graph()
    assert "hwsim.workloads.registry" in graph["hwsim.library.workloads"]
    assert "hwsim.library" in graph["hwsim.workloads.resolve"]  # the package of library.workloads
    assert "hwsim.library.workloads" in graph["hwsim.workloads.resolve"]
    assert "hwsim.report.run_summary" in graph["hwsim.workloads.cli_run"]


def test_no_import_cycles_at_import_time() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_workloads_and_library_are_in_no_cycle_even_through_function_level_imports() -> None:
    graph = import_graph(module_level=False)
    strict = [m for m in graph if any(m == p or m.startswith(p + ".") for p in STRICT_PACKAGES)]
    assert len(strict) > 10
    cycles = [c for c in (cycle_through(graph, m) for m in strict) if c]
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)
