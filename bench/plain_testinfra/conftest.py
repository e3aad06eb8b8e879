"""The comparison suite: the audit's checks written the way a plain pytest-testinfra suite
would write them (one remote command per assertion). Expected values come from the same
sparkbase site, so both sides check the same things.

    pytest bench/plain_testinfra --hosts=paramiko://spark1,... --ssh-config=LAB/ssh_config \
        --sparkbase-site=SITE

testinfra's paramiko backend accepts unknown host keys (WarningPolicy); like any careful
suite, this one gives each backend a client that loads the ssh_config's
`UserKnownHostsFile` and refuses any other key, so both sides of the benchmark pay for the
same host-key checking.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sparkbase-site", default=".", help="site directory")


def _strict_client(backend: Any, ssh_config: str) -> Any:
    """A connected paramiko client for `backend`'s host, known_hosts loaded, RejectPolicy."""
    import paramiko

    entry = paramiko.SSHConfig.from_path(ssh_config).lookup(backend.host.name)
    client = paramiko.SSHClient()
    for known_hosts in str(entry.get("userknownhostsfile", "")).split():
        client.load_host_keys(known_hosts)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        entry.get("hostname", backend.host.name),
        port=int(entry.get("port", 22)),
        username=entry.get("user", "root"),
        key_filename=entry.get("identityfile"),
        timeout=backend.timeout,
        allow_agent=False,
        look_for_keys=False,
    )
    return client


@pytest.fixture(autouse=True)
def _strict_host_keys(host: Any, request: pytest.FixtureRequest) -> None:
    backend = host.backend
    ssh_config = request.config.getoption("ssh_config", default=None)
    if ssh_config and "client" not in backend.__dict__:  # testinfra caches it per backend
        backend.__dict__["client"] = _strict_client(backend, ssh_config)


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
