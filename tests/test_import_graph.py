"""trainscope's own import graph, read from the source (issue 40 item 2): no import circle among
the imports a module runs when it is loaded, none in the application layer even counting the
imports made for type checking only, and the imports hidden inside functions do not grow.

A circle among load-time imports makes the order in which modules are first imported matter (a
name not yet defined); the api layer's circle (``errors`` importing ``comparison`` for a type, while
every api module imports ``errors``) is what the issue named. In-function imports of trainscope's own
modules hide the graph from anyone reading the tops of files; the count may only go down
(:data:`IN_FUNCTION_LIMIT`): the ones left defer import cost for a command that does not need
them (the CLI's start-up) or are optional dependencies.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# setuptools' package-dir of pyproject.toml: the folder of each top package of the install.
PACKAGE_DIRS = {
    "trainscope": "trainscope",
    "trainscope.collectors": "collectors",
    "trainscope.traces": "traces",
    "trainscope.analyzers": "analyzers",
    "trainscope.reports": "reports",
    "trainscope.tui": "tui",
}
# In-function imports of trainscope's own modules (every import statement inside a function, in
# every module of the package), measured when the restructure landed: the move added none. Lower it
# when a change moves imports to the top; the aim is 20, each with its reason.
IN_FUNCTION_LIMIT = 19


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            if (
                package == "trainscope"
                and parts
                and parts[0] in ("collectors", "traces", "analyzers", "reports", "tui")
            ):
                continue  # not a folder of this package (package-dir maps these elsewhere)
            found[name] = path
    return found


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, here: str, known: dict[str, Path]) -> list[str]:
    """trainscope modules ``node`` imports (``from pkg import mod`` counts as ``pkg.mod``)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            pkg = here.split(".")
            keep = len(pkg) - node.level + (known[here].name == "__init__.py")  # a package is its own base
            pkg = pkg[:keep]
            base = ".".join(pkg + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = []
    for n in names:
        while n and n not in known:
            n = n.rpartition(".")[0]
        if n and n != here:
            out.append(n)
    return out


def import_graph(type_checking: bool) -> tuple[dict[str, set[str]], dict[str, int]]:
    """Load-time imports per module (module level, and ``if TYPE_CHECKING:`` blocks when asked) and
    the count of in-function imports of trainscope's own modules per module: one per function and
    module imported, however many names or import lines (one import per line is the house style)."""
    known = modules()
    graph: dict[str, set[str]] = {m: set() for m in known}
    hidden_sites: dict[str, set[tuple[int, str]]] = {}

    def visit(body: list[ast.stmt], here: str, scope: int | None) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                targets = _targets(node, here, known)
                if scope is None:
                    graph[here].update(targets)
                elif targets:
                    hidden_sites.setdefault(here, set()).update((scope, t) for t in targets)
            elif isinstance(node, ast.If) and _type_checking(node):
                if type_checking and scope is None:
                    visit(node.body, here, scope)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(node.body, here, node.lineno)
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list):
                        visit([n for n in inner if isinstance(n, ast.AST)], here, scope)  # type: ignore[misc]

    for name, path in known.items():
        visit(ast.parse(path.read_text(encoding="utf-8")).body, name, None)
    return graph, {m: len(sites) for m, sites in hidden_sites.items()}


def circles(graph: dict[str, set[str]], within: str = "") -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), among ``within``'s."""
    nodes = [m for m in graph if m.startswith(within)]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if not w.startswith(within):
                continue
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            strong(v)
    return out


def test_the_scan_sees_the_packages_and_their_imports():
    graph, hidden = import_graph(type_checking=False)
    assert "trainscope.analyzers.trace.steps" in graph and "trainscope.api.errors" in graph
    assert "trainscope.api.errors" in graph["trainscope.api.analysis"]  # a plain module-level import
    assert sum(hidden.values()) > 0


def test_no_import_circle_among_load_time_imports():
    graph, _ = import_graph(type_checking=False)
    assert circles(graph) == []


def test_the_api_layer_has_no_circle_even_with_type_only_imports():
    graph, _ = import_graph(type_checking=True)
    assert circles(graph, "trainscope.api") == []


def test_a_circle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("limit", [IN_FUNCTION_LIMIT])
def test_in_function_imports_of_own_modules_do_not_grow(limit):
    _, hidden = import_graph(type_checking=False)
    total = sum(hidden.values())
    worst = sorted(hidden.items(), key=lambda kv: -kv[1])[:5]
    assert total <= limit, f"{total} in-function imports of trainscope's own modules (limit {limit}); most: {worst}"


def test_every_in_function_import_of_own_modules_says_why():
    """Issue 40 item 2: an import left inside a function says why — a circle it breaks, a measured
    start-up cost, an optional dependency — in a comment on its line or right above its run of
    import lines."""
    known = modules()
    silent = []
    for name, path in known.items():
        lines = path.read_text(encoding="utf-8").split("\n")
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and _targets(node, name, known):
                    first = node.lineno - 1
                    while first > 0 and lines[first - 1].strip().startswith(("from ", "import ")):
                        first -= 1  # the run of import lines this one stands in
                    said = "#" in lines[node.lineno - 1] or lines[first - 1].strip().startswith("#")
                    if not said:
                        silent.append(f"{path.name}:{node.lineno}")
    assert not silent, silent
