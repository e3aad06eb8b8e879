"""The comparison suite: the audit's checks written the way a plain pytest-testinfra suite
would write them (one remote command per assertion). Expected values come from the same
sparkbase site, so both sides check the same things.

    pytest bench/plain_testinfra --hosts=paramiko://spark1,... --ssh-config=LAB/ssh_config \
        --sparkbase-site=SITE
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sparkbase-site", default=".", help="site directory")


@pytest.fixture(scope="session")
def site(request: pytest.FixtureRequest) -> Any:
    from sparkbase.model.site import load_site

    return load_site(Path(request.config.getoption("--sparkbase-site")))


@pytest.fixture()
def node(host: Any) -> str:
    return str(host.backend.hostname)


@pytest.fixture()
def baseline(site: Any, node: str) -> Any:
    return site.baseline_of(node)
