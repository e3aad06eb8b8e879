"""Shared unit-test fixtures: a private copy of the shipped site, and `--update-golden`."""

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
