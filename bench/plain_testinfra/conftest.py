"""The comparison suite: the audit's checks written the way a plain pytest-testinfra suite
would write them (one remote command per assertion). Expected values come from the same
sparkbase site, so both sides check the same things.

    pytest bench/plain_testinfra --hosts=paramiko://spark1,... --ssh-config=LAB/ssh_config \
        --plain-site=SITE -p no:sparkbase.checks_plugin

(`-p no:...`: an installed sparkbase brings its checks plugin to every pytest run; a plain
suite runs without it.)

testinfra's paramiko backend accepts unknown host keys (WarningPolicy); like any careful
suite, this one hands each backend a strict client instead: sparkbase's own
(`sparkbase.transport.client.connect`: the ssh_config's `UserKnownHostsFile` only, any
other key refused), given to the backend by setting its `client` (a
`functools.cached_property`, which Python lets a caller set: what the checks plugin does),
so both sides of the benchmark pay for the same host-key checking.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import paramiko

    from sparkbase.audit.expected import Expected
    from sparkbase.model.baseline import Baseline
    from sparkbase.model.site import Site

#: one strict connection per host alias for the whole session
_CLIENTS: dict[str, paramiko.SSHClient] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--plain-site", default=".", help="the sparkbase site the expected values come from")


def _strict_client(alias: str, ssh_config: Path, timeout: float) -> paramiko.SSHClient:
    """sparkbase's strict connection to `alias` (known_hosts from its ssh_config entry)."""
    from sparkbase.transport.client import connect
    from sparkbase.transport.paramiko_import import import_paramiko
    from sparkbase.transport.targets import SshTarget

    import_paramiko()
    import paramiko

    entry = paramiko.SSHConfig.from_path(str(ssh_config)).lookup(alias)
    known_hosts = str(entry.get("userknownhostsfile", "")).split()
    if not known_hosts:
        raise pytest.UsageError(f"{ssh_config}: {alias} has no UserKnownHostsFile to check keys with")
    target = SshTarget(
        node=alias,
        alias=alias,
        config_file=ssh_config,
        known_hosts=Path(known_hosts[0]),
        user="root",  # the ssh_config's User wins (as for `sparkbase audit --lab`)
        sudo=False,
        connect_timeout=timeout,
    )
    return connect(target)


@pytest.fixture(autouse=True)
def _strict_host_keys(host: Any, request: pytest.FixtureRequest) -> None:
    """Hand the host's paramiko backend the session's strict client for its host."""
    ssh_config = request.config.getoption("ssh_config", default=None)
    backend = host.backend
    if not ssh_config or getattr(backend, "NAME", "") != "paramiko":
        return
    alias = backend.host.name
    if alias not in _CLIENTS:
        _CLIENTS[alias] = _strict_client(alias, Path(ssh_config), float(backend.timeout))
    backend.client = _CLIENTS[alias]  # sets the cached_property's value


@pytest.fixture(scope="session", autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    for client in _CLIENTS.values():
        client.close()
    _CLIENTS.clear()


@pytest.fixture(scope="session")
def site(request: pytest.FixtureRequest) -> Site:
    from sparkbase.model.site import load_site

    return load_site(Path(request.config.getoption("--plain-site")))


@pytest.fixture()
def node(host: Any) -> str:
    return str(host.backend.hostname)


@pytest.fixture()
def baseline(site: Site, node: str) -> Baseline:
    return site.baseline_of(node)


@pytest.fixture()
def expected(site: Site, node: str) -> Expected:
    """The audit's expectations of the node (per-node GID index, cable addresses)."""
    from sparkbase.audit.expected import expected_for

    return expected_for(site, node)
