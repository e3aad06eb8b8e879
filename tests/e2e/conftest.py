"""End-to-end fixtures: a real emulated fleet for the session.

`lab` (session scope) is a `sparkbase.lab.fleet.Lab` with four nodes spark1..spark4 on
127.0.0.1:2301..2304 in a fresh temporary directory, torn down at the end. Use
`lab.run(node, "command")` -> (exit status, stdout, stderr) over OpenSSH, or
`lab.ssh_config_path` / `lab.known_hosts_path` / `lab.key_path` for pyinfra, testinfra and
paramiko. Tests that change a node should say which node they own (see test_lab_*.py).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from ports import port_base

from sparkbase.lab.fleet import Lab

REPO = Path(__file__).resolve().parents[2]
LAB_PORT_BASE = port_base("SPARKBASE_TEST_LAB_PORT_BASE", 2301)


def _require_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("end-to-end tests need root (namespaces, mounts); run them as root")


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """Four emulated Sparks, factory-fresh, for the whole session."""
    _require_root()
    os.environ.setdefault("SPARKBASE_LAB_BOOT_DELAY", "0.3")
    directory: Path = tmp_path_factory.mktemp("lab")
    fleet = Lab(directory, port_base=LAB_PORT_BASE)
    fleet.up(4, fresh=True)
    try:
        yield fleet
    finally:
        fleet.down()


@pytest.fixture(scope="session")
def site_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the shipped site, so tests never write locks or logs into the repository."""
    site = tmp_path_factory.mktemp("site")
    for part in ("baselines", "inventory", "lanes"):
        shutil.copytree(REPO / part, site / part)
    return site
