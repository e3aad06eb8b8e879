"""The sparkbase checks as a pytest plugin (entry point `pytest11`: sparkbase.checks_plugin).

    pytest --sparkbase-site DIR --hosts=paramiko://spark1,paramiko://spark2 --ssh-config=FILE \
        [--sparkbase-known-hosts FILE]

works from an installed wheel, with no test file: the plugin adds the items itself, built from
the audit's check registry (`sparkbase.checks_plugin.checks`: one test per check id,
parametrized over the hosts and the check's items, so a failure reads as the drift). In the
repository `pytest checks/` does the same (checks/conftest.py switches the plugin on). The
plugin does nothing in a pytest run that neither passes --sparkbase-site nor switches it on.

- Each host's alias (`spark1`) is matched to the inventory node whose `ssh_host` it is, and
  the node gets its baseline's expectations (`sparkbase.audit.expected`).
- Host keys are checked strictly by every backend, or the backend is refused:
  testinfra's paramiko backend accepts any host key (WarningPolicy, no known_hosts, and a
  silent reconnect after a drop), so sparkbase never runs the checks through it: the fact
  script goes over sparkbase's own strict client (`transport.client`), and that client is
  given to the backend (its `client` is a `functools.cached_property`, which Python lets a
  caller set) so other tests on `host` in the run start on the strict connection. The
  OpenSSH backends (`ssh://`, `safe-ssh://`) get
  `StrictHostKeyChecking=yes`, that known_hosts file only and no multiplexing, ahead of any
  option of their own (OpenSSH keeps the first value it is given). Every other backend
  (`local`, `docker`, `ansible`, ...) cannot be held to the node's host key or does not talk
  to a node, and is a usage error. known_hosts comes from `--sparkbase-known-hosts`, else the
  host's `UserKnownHostsFile` in the ssh_config, else the inventory's `ssh.known_hosts`.
- Facts are gathered once per host per session, in one round trip (the same fact script
  the audit runs, sent through testinfra's `host.run`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

# light: every pytest run loads the plugin, few run the checks (the rest is imported where used)
from sparkbase.checks_plugin.session import SparkbaseSession

#: set by `enable` (checks/conftest.py): run the checks even without --sparkbase-site
ENABLED = pytest.StashKey[bool]()
#: the session's site, expectations and fact cache
SESSION = pytest.StashKey["SparkbaseSession"]()
#: the name the collector of the checks carries (its node id: `sparkbase-checks::test_check[...]`)
COLLECTOR_NAME = "sparkbase-checks"


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--sparkbase-site DIR` (switches the checks on) and `--sparkbase-known-hosts FILE`."""
    group = parser.getgroup("sparkbase")
    group.addoption(
        "--sparkbase-site",
        default=None,
        help="run the sparkbase checks of this site (baselines/, inventory/, lanes/) against "
        "--hosts; in checks/ of the repository the default is $SPARKBASE_SITE or here",
    )
    group.addoption(
        "--sparkbase-known-hosts",
        default=None,
        help="known_hosts file the host keys are checked against (strictly)",
    )


def enable(config: pytest.Config) -> None:
    """Switch the checks on for this run (what `pytest checks/` does through its conftest)."""
    config.stash[ENABLED] = True


def is_active(config: pytest.Config) -> bool:
    """Whether this pytest run runs the sparkbase checks."""
    return config.getoption("sparkbase_site", default=None) is not None or config.stash.get(ENABLED, False)


def site_dir(config: pytest.Config) -> Path:
    """--sparkbase-site, else $SPARKBASE_SITE, else here."""
    return Path(config.getoption("sparkbase_site", default=None) or os.environ.get("SPARKBASE_SITE", "."))


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse hosts the checks cannot reach strictly, before anything is collected or connects."""
    if not is_active(session.config):
        return
    refuse_unstrict_hosts(session.config)
    from sparkbase.errors import ConfigError

    try:
        sparkbase_session(session.config)
    except ConfigError as exc:  # the site's problems, FILE:LINE:COL each, as `validate` says them
        lines = [problem.format(Path.cwd()) for problem in exc.problems]
        raise pytest.UsageError("sparkbase site: " + "\n".join(lines)) from None


class ChecksModule(pytest.Module):
    """The checks module (`sparkbase.checks_plugin.checks`) collected as if it stood in the
    rootdir: imported by name, never by path, so an installed wheel needs no test file."""

    def _getobj(self) -> Any:
        from sparkbase.checks_plugin import checks

        return checks


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Add the check items (first, so -k, -m and deselection see them)."""
    if not is_active(config):
        return
    # the path only names the collector: its node id is `sparkbase-checks` wherever the site is
    collector = ChecksModule.from_parent(session, path=config.rootpath / COLLECTOR_NAME)
    items.extend(session.genitems(collector))


#: testinfra backends that sparkbase can hold to the node's host key
STRICT_BACKENDS = ("paramiko", "ssh", "safe-ssh")


def refuse_unstrict_hosts(config: pytest.Config) -> None:
    """Refuse, before anything connects, hosts that the checks cannot reach strictly."""
    if not hasattr(config.option, "hosts"):
        return  # testinfra is not loaded: nothing will connect
    specs = _hostspecs(config)
    if not specs:
        raise pytest.UsageError(
            "sparkbase checks run against inventory nodes: give --hosts=paramiko://NODE,... "
            "(or ssh://NODE); without hosts testinfra would check this machine"
        )
    if getattr(config.option, "force_ansible", False):
        raise pytest.UsageError("--force-ansible: the ansible backend cannot be held to strict host keys")
    for spec in specs:
        backend = _backend_name(spec, getattr(config.option, "connection", None))
        if backend not in STRICT_BACKENDS:
            raise pytest.UsageError(
                f"--hosts {spec}: backend {backend!r} cannot be held to the node's host key "
                f"(or does not talk to a node); use one of: {', '.join(STRICT_BACKENDS)}"
            )
    ssh_config = getattr(config.option, "ssh_config", None)
    if ssh_config:
        from sparkbase.transport import ssh_config_problem

        # checked before OpenSSH or paramiko reads it: both would echo a line of a wrong file
        wrong = ssh_config_problem(Path(ssh_config))
        if wrong is not None:
            raise pytest.UsageError(f"--ssh-config: {wrong}")


def _backend_name(spec: str, connection: str | None) -> str:
    """The testinfra backend a host spec selects (the scheme, else --connection, else paramiko)."""
    if "://" in spec:
        return spec.split("://", 1)[0]
    return connection or "paramiko"


def _hostspecs(config: pytest.Config) -> list[str]:
    raw = config.getoption("hosts", default=None) or ""
    return [spec.strip() for spec in str(raw).split(",") if spec.strip()]


def _alias(spec: str) -> str:
    name = spec.split("://", 1)[-1]
    name = name.split("?", 1)[0]
    return name.rsplit("@", 1)[-1].split(":", 1)[0]


@pytest.fixture(scope="session")
def sparkbase(request: pytest.FixtureRequest) -> SparkbaseSession:
    """The session's site, expectations and fact cache."""
    return sparkbase_session(request.config)


def sparkbase_session(config: pytest.Config) -> SparkbaseSession:
    """The session's site, expectations and fact cache (loaded once per run)."""
    cached = config.stash.get(SESSION, None)
    if cached is not None:
        return cached
    from sparkbase.model.site import load_site
    from sparkbase.model.site_files import find_site_root

    root = find_site_root(site_dir(config))
    ssh_config = config.getoption("ssh_config", default=None)
    known = config.getoption("sparkbase_known_hosts")
    session = SparkbaseSession(
        site=load_site(root),
        ssh_config=Path(ssh_config) if ssh_config else None,
        known_hosts=Path(known) if known else None,
    )
    config.stash[SESSION] = session
    return session


@pytest.hookimpl(tryfirst=True)  # before testinfra's: ids read CHECK-HOST however loaded
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize the node test over every check id that stands for something on the
    session's hosts, and the fleet test over the fleet checks."""
    from sparkbase.audit.checks import fleet_checks, node_checks

    kind = getattr(metafunc.function, "sparkbase_checks", None)
    if kind == "fleet":
        metafunc.parametrize("fleet_check_id", list(fleet_checks()))
        return
    if kind != "node":
        return
    session = sparkbase_session(metafunc.config)
    ids: list[str] = []
    for check in node_checks().values():
        found = [
            check_id
            for spec in _hostspecs(metafunc.config)
            for check_id, _item in check.ids(session.expected_of(_alias(spec)))
        ]
        if check.items is None and not found:
            found = [check.id]
        ids += [check_id for check_id in dict.fromkeys(found) if check_id not in ids]
    metafunc.parametrize("check_id", ids)
