"""No import cycles among sparkbase's modules (issue 14: "no import cycles").

Every import statement counts, wherever it stands: at module level, inside a function (a
lazy import), under `if TYPE_CHECKING:`. `from pkg import name` is an edge to `pkg.name`
when that is a module of ours, else to `pkg`. Importing `pkg.sub` also runs
`pkg/__init__.py`, but that implied edge is not drawn: a package's `__init__` may import
(re-export) its own modules. A submodule that imports a name from its package's
`__init__`, which imports that submodule, is a cycle like any other.

The walker is checked on small made-up trees first, so the real check cannot pass by
finding nothing.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


@dataclass(frozen=True)
class Edge:
    """One import: `source` imports `target` at `file:line`."""

    source: str
    target: str
    file: Path
    line: int


def modules_under(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of `package` under `root`."""
    found: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement may load (absolute, relative made absolute)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, *([node.module] if node.module else [])])
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def import_edges(modules: dict[str, Path]) -> list[Edge]:
    """Every import of one of `modules` by another, at any depth of the file."""
    edges: list[Edge] = []
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names = _imported_names(node, module, is_package)
            if isinstance(node, ast.ImportFrom):  # `from pkg import mod` is pkg.mod when that exists
                submodules = [name for name in names[:-1] if name in modules]
                names = submodules if len(submodules) == len(names) - 1 else [*submodules, names[-1]]
            for name in dict.fromkeys(names):
                if name in modules and name != module:
                    edges.append(Edge(module, name, path, node.lineno))
    return edges


def cycles(edges: list[Edge]) -> list[list[Edge]]:
    """The strongly connected groups of two or more modules, each as the edges inside it."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm (the module graph is small)
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [[e for e in edges if e.source in group and e.target in group] for group in groups]


def _shown(found: list[list[Edge]], root: Path) -> str:
    return "\n".join(
        "cycle: " + "; ".join(f"{e.file.relative_to(root)}:{e.line} {e.source} -> {e.target}" for e in group)
        for group in found
    )


#: made-up trees: file -> text, and the modules each cycle found holds (none: no cycle)
CASES = {
    "function-level import back": (
        {"a.py": "import pkg.b\n", "b.py": "def f():\n    from pkg import a\n"},
        [{"pkg.a", "pkg.b"}],
    ),
    "TYPE_CHECKING import back": (
        {"a.py": "from pkg.b import X\n", "b.py": "if TYPE_CHECKING:\n    from pkg.a import Y\n"},
        [{"pkg.a", "pkg.b"}],
    ),
    "relative imports, three modules": (
        {"a.py": "from .b import x\n", "b.py": "from . import c\n", "c.py": "from .a import y\n"},
        [{"pkg.a", "pkg.b", "pkg.c"}],
    ),
    "a package's __init__ re-exports its own modules": (
        {"__init__.py": "from pkg.a import x\nfrom pkg import b\n", "a.py": "from pkg import b\n",
         "b.py": ""},
        [],
    ),
    "a submodule takes a name from the __init__ that imports it": (
        {"__init__.py": "def f():\n    from pkg import a\n", "a.py": "from pkg import NAME\n"},
        [{"pkg", "pkg.a"}],
    ),
    "a chain is no cycle": (
        {"a.py": "import pkg.b\n", "b.py": "from pkg.c import z\n", "c.py": "import os\n"},
        [],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_walker_finds_each_made_up_cycle(name: str, tmp_path: Path) -> None:
    files, expected = CASES[name]
    (tmp_path / "pkg").mkdir()
    for file, text in {"__init__.py": "", **files}.items():
        (tmp_path / "pkg" / file).write_text(text)
    found = cycles(import_edges(modules_under(tmp_path, "pkg")))
    assert [{e.source for e in group} | {e.target for e in group} for group in found] == expected


def test_sparkbase_has_no_import_cycle() -> None:
    """Put a shared piece where its data lives (a lower module both import), or let the caller
    above both pass what is needed; a lazy import does not hide a cycle from this test."""
    modules = modules_under(SRC, "sparkbase")
    assert len(modules) > 100  # the walk saw the package
    found = cycles(import_edges(modules))
    assert not found, _shown(found, SRC)
