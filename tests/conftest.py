"""Shared unit-test fixtures: a private copy of the shipped site, and `--update-golden`."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: the parts of the repository that make up the shipped site
SITE_GLOBS = ("baselines/*.yaml", "baselines/sparkbase.lock", "inventory/*.yaml", "lanes/*.yaml")
#: the slowest test files, slowest first (each file's time run alone, docs/benchmarks/suite.md,
#: "Two speeds"). pytest-xdist hands whole files to workers in collection order when told
#: `--no-loadscope-reorder` (scripts/test), so these start first and the short files fill the
#: gaps at the end instead of one long file running alone on a machine otherwise idle. The
#: first module to ask for a shared image (conftest.py in tests/e2e) builds it and the others
#: wait for it, so the image builders (test_deploy_apply: converged; test_fan_modeset_e2e:
#: variant) come before the modules that only clone. Order only: every file still runs.
SLOWEST_FIRST = (
    "test_deploy_apply", "test_lab_as_found_e2e", "test_hardening_links", "test_hardening_apply",
    "test_fact_read_e2e", "test_ownership_apply", "test_tuning_apply", "test_hardening_secrets",
    "test_wheel", "test_qualify_containers_e2e", "test_hardening_switch", "test_fan_modeset_e2e",
    "test_hardening_converge", "test_hardening_bounds", "test_hardening_disk", "test_day_one_e2e",
    "test_capture_lab", "test_lane_runtime", "test_factory_swap_fallback_e2e", "test_lane_safety",
    "test_mok_pending_e2e", "test_swap_by_page_size_e2e", "test_properties", "test_invalid_corpus",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/ from the shipped site instead of comparing against it",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the slowest files first (`SLOWEST_FIRST`); every other file keeps its place."""
    rank = {name: index for index, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))


@pytest.fixture(scope="session", autouse=True)
def no_gevent_patching_in_xdist_workers() -> Iterator[None]:
    """In a pytest-xdist worker, a `plan` or `apply` run in-process does not patch the
    standard library with gevent (`gevent.monkey.patch_all` is a no-op): the worker talks to
    the controller from a thread of its own, which a patched `threading` stalls (the worker
    crashes). pyinfra then runs its hosts one after another; the CLI in a subprocess (the
    e2e tier) still patches. Without xdist nothing changes."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    from gevent import monkey

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(monkey, "patch_all", lambda *args, **kwargs: None)
        yield


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
