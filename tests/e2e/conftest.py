"""End-to-end fixtures: real emulated fleets, made once and cloned.

`lab` (session scope) is a `sparkbase_lab.fleet.Lab` with four factory-fresh nodes
spark1..spark4 on 127.0.0.1:2301..2304 (+10 per xdist worker) in a fresh temporary
directory, torn down at the end. Use `lab.run(node, "command")` -> (exit status, stdout,
stderr) over OpenSSH, or `lab.ssh_config_path` / `lab.known_hosts_path` / `lab.key_path` for
pyinfra, testinfra and paramiko. Tests that change a node should say which node they own
(see test_lab_*.py). Under xdist each worker has its own, on its own ports (ports.py).

`converged_image` (session scope, one per run, shared by the xdist workers) is four nodes
converged once to the shipped site by a real `apply` (fleets.converge_image); a module that
needs a converged fleet boots its own independent copy with `fleets.clone_fleet`.
`variant_image` (the same way) is spark1 as the factory made it and spark2 converged to the
variant (fleets.variant_image), for the modules that read a node on the variant.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fleets import ConvergedImage, converge_image, copy_site, require_root
from fleets import variant_image as variant_image_of
from ports import port_base, session_port_base

from sparkbase_lab.fleet import Lab

LAB_PORT_BASE = session_port_base("SPARKBASE_TEST_LAB_PORT_BASE", 2301)
#: one worker at a time builds the image (under a lock), so one base serves every worker
IMAGE_PORT_BASE = port_base("SPARKBASE_TEST_IMAGE_PORT_BASE", 2461)
VARIANT_IMAGE_PORT_BASE = port_base("SPARKBASE_TEST_VARIANT_IMAGE_PORT_BASE", 3461)


def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory every xdist worker of this run shares (the base temp dir without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_image(tmp_path_factory: pytest.TempPathFactory, name: str, port_base: int,
                 build: Callable[[Path, int], ConvergedImage]) -> ConvergedImage:
    """The run's image `name`, built once by `build(directory, port_base)`: the first worker
    to ask builds it, under a lock; the others wait and use it (or fail at once with the
    builder's error)."""
    require_root()
    root = run_root(tmp_path_factory)
    directory = root / name
    report_path, failed_path = directory / "report.json", root / f"{name}.failed"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if failed_path.exists():
            pytest.fail(f"the {name} could not be built:\n{failed_path.read_text()}")
        if report_path.exists():
            report: dict[str, Any] = json.loads(report_path.read_text())
            built = Lab(directory / "lab", port_base=port_base)
            return ConvergedImage(built, directory / "site", report)
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir()
        try:
            image = build(directory, port_base)
        except Exception as exc:
            failed_path.write_text(f"{type(exc).__name__}: {exc}")
            raise
        report_path.write_text(json.dumps(image.report))
        return image


@pytest.fixture(scope="session")
def converged_image(tmp_path_factory: pytest.TempPathFactory) -> ConvergedImage:
    """Four nodes converged to the shipped site once per run (fleets.converge_image)."""
    return shared_image(tmp_path_factory, "converged-image", IMAGE_PORT_BASE, converge_image)


@pytest.fixture(scope="session")
def variant_image(tmp_path_factory: pytest.TempPathFactory) -> ConvergedImage:
    """spark1 factory-fresh, spark2 converged to the variant, once per run (fleets.variant_image)."""
    return shared_image(tmp_path_factory, "variant-image", VARIANT_IMAGE_PORT_BASE, variant_image_of)


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """Four emulated Sparks, factory-fresh, for the whole session (of this worker)."""
    require_root()
    os.environ.setdefault("SPARKBASE_LAB_BOOT_DELAY", "0.3")
    fleet = Lab(tmp_path_factory.mktemp("lab"), port_base=LAB_PORT_BASE)
    fleet.up(4, fresh=True)
    try:
        yield fleet
    finally:
        fleet.down()


@pytest.fixture(scope="session")
def site_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the shipped site, so tests never write locks or logs into the repository."""
    return copy_site(tmp_path_factory.mktemp("site"))
