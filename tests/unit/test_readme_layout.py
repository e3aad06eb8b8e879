"""The README's "Layout of the code" table matches the tree: every package is listed, and every
module or folder the table names exists where its row says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "sparkbase"
SECTION = "## Layout of the code"


def layout_rows() -> list[tuple[list[str], str]]:
    """(the folders or modules a row is about, what the row says lives there)."""
    text = (REPO / "README.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith(("`src/sparkbase/", "`lab/src/sparkbase_lab/")):
            continue
        rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[1]))
    return rows


def resolved(names: list[str]) -> list[Path]:
    """A row's names as paths: the first from the repository's root, the others beside it
    (`src/sparkbase/release.py`, `compare.py` are siblings)."""
    first = REPO / names[0]
    return [first, *(first.parent / name if "/" not in name.rstrip("/") else REPO / name
                     for name in names[1:])]


def row_roots(names: list[str]) -> list[Path]:
    """The folders the modules a row mentions live under: its folders, else its modules'
    folder; and the repository's root (`setup.py`)."""
    paths = resolved(names)
    return [path for path in paths if path.is_dir()] or [paths[0].parent]


def test_the_table_is_found() -> None:
    assert len(layout_rows()) >= 10


def test_every_package_and_top_level_module_has_a_row() -> None:
    listed = {str(path.relative_to(REPO)) for names, _ in layout_rows() for path in resolved(names)}
    missing = []
    for entry in sorted(PACKAGE.iterdir()):
        relative = str(entry.relative_to(REPO))
        if entry.name.startswith(("_", ".")) or entry.name in ("py.typed", "errors.py"):
            continue
        if entry.is_dir() and relative not in listed:
            missing.append(relative + "/")
        elif entry.suffix == ".py" and relative not in listed:
            missing.append(relative)
    assert not missing, f"README layout table lacks {missing}"


@pytest.mark.parametrize("names,says", layout_rows(), ids=lambda value: str(value)[:40])
def test_every_module_a_row_names_exists_under_it(names: list[str], says: str) -> None:
    for path in resolved(names):
        assert path.exists(), path
    roots = [*row_roots(names), REPO]
    for named in re.findall(r"`([\w/]+\.(?:py|c))`", says):
        found = [root / named for root in roots if (root / named).exists()]
        found += [hit for root in roots[:-1] for hit in root.rglob(Path(named).name)
                  if str(hit.relative_to(root)).endswith(named)]
        assert found, f"{named} (in the row for {names}) is not under {[str(r) for r in roots]}"
