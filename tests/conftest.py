"""Shared test fixtures: a private copy of the shipped site, and `--update-golden`; and the
pytest-xdist groups that let the e2e tier run in parallel (`scripts/test` runs
`-n auto --dist loadgroup`)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: the parts of the repository that make up the shipped site
SITE_GLOBS = ("baselines/*.yaml", "baselines/sparkbase.lock", "inventory/*.yaml", "lanes/*.yaml")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/ from the shipped site instead of comparing against it",
    )


#: the xdist group of every e2e test that uses the session-wide `lab` (they share its nodes)
SESSION_LAB_GROUP = "e2e-session-lab"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put each e2e module in an xdist group of its own (its lab and ports are the module's:
    never split over two workers), and every e2e test using the session `lab` in one group.

    Unit tests stay ungrouped: `--dist loadgroup` spreads them one by one. Without xdist the
    groups are inert marks.
    """
    for item in items:
        path = Path(str(item.path))
        if "e2e" not in path.relative_to(REPO).parts:
            continue
        item.add_marker(pytest.mark.xdist_group(_e2e_group(item, path)))


def _e2e_group(item: pytest.Item, path: Path) -> str:
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.get("lab", ()) if info is not None else ()
    if definitions and definitions[-1].scope == "session":
        return SESSION_LAB_GROUP
    return f"e2e-{path.stem}"


def copy_shipped_site(destination: Path) -> Path:
    """Copy the shipped site's files (baselines, inventory, lanes, lock) to `destination`."""
    for pattern in SITE_GLOBS:
        for source in sorted(REPO.glob(pattern)):
            target = destination / source.relative_to(REPO)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    return destination


@pytest.fixture
def make_site() -> Callable[[Path], Path]:
    """`make_site(dir)`: copy the shipped site into `dir` and return it."""
    return copy_shipped_site


@pytest.fixture
def site_copy(tmp_path: Path) -> Path:
    """A private, writable copy of the shipped site."""
    return copy_shipped_site(tmp_path / "site")


@pytest.fixture
def shipped_site() -> Path:
    """The shipped site itself (read-only use)."""
    return REPO
