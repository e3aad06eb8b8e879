"""The layers a reader can see (issue 14): production code never imports the emulated
fleet, which is not even in the product package (issue 23: its own distribution,
`sparkbase-lab`, package `sparkbase_lab` under `lab/src/`), and command-line code (argparse)
lives in `cli/` only.

Every import counts: module level, inside functions, and under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "sparkbase"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, by absolute name (relative imports resolved)."""
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


MODULES = {_module_name(path): _imports(path) for path in sorted(PACKAGE.rglob("*.py"))}


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def test_production_code_never_imports_the_lab() -> None:
    """Not even the `sparkbase lab` command: its module is the lab's own (`sparkbase_lab.cli`),
    which the product's CLI names (a string) and imports only when it is installed."""
    offenders = {
        module: sorted(name for name in imports if _within(name, ("sparkbase_lab",)))
        for module, imports in MODULES.items()
    }
    assert {module: names for module, names in offenders.items() if names} == {}


def test_the_product_package_holds_no_lab() -> None:
    """The wheel a site installs is built from src/sparkbase: no emulator module in it."""
    assert [m for m in MODULES if _within(m, ("sparkbase.lab", "sparkbase_lab"))] == []
    assert not (PACKAGE / "lab").exists()
    assert not (REPO / "src" / "sparkbase_lab").exists()
    assert (REPO / "lab" / "src" / "sparkbase_lab" / "fleet.py").is_file()


def test_argparse_lives_in_cli_only() -> None:
    outside_cli = [m for m in MODULES if not _within(m, ("sparkbase.cli",))]
    assert [m for m in outside_cli if "argparse" in MODULES[m]] == []


def test_the_walk_sees_an_import_of_the_lab(tmp_path: Path) -> None:
    """The rule above can fail: a module importing the lab is seen to."""
    module = tmp_path / "driver.py"
    module.write_text("def run() -> None:\n    from sparkbase_lab.fleet import Lab\n")
    assert any(_within(name, ("sparkbase_lab",)) for name in _imports(module))
