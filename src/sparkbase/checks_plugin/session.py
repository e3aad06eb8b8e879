"""The checks session: the site, each host's expectations and facts (gathered once per host,
over a connection held to the node's host key), and each check's result on a host.

Made by the plugin (`sparkbase.checks_plugin`) and handed to the tests
(`sparkbase.checks_plugin.checks`) by its `sparkbase` fixture; imports only the standard
library and pytest at load (every pytest run loads the plugin, few run the checks).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import paramiko

    from sparkbase.audit.expected import Expected
    from sparkbase.audit.registry import CheckResult
    from sparkbase.facts.model import FactsResult
    from sparkbase.model.site import Site
    from sparkbase.transport import NodeFailure


def strict_ssh_options(known_hosts: Path) -> str:
    """OpenSSH options (shell-quoted) that make `ssh` check the host key against `known_hosts`
    only, never record one, and never reuse a connection opened without those options."""
    options = [
        "StrictHostKeyChecking=yes",
        f"UserKnownHostsFile={known_hosts}",
        "GlobalKnownHostsFile=/dev/null",
        "KnownHostsCommand=none",
        "UpdateHostKeys=no",
        "VerifyHostKeyDNS=no",
        "CheckHostIP=no",
        "ControlMaster=no",
        "ControlPath=none",
    ]
    return " ".join(f"-o {shlex.quote(option)}" for option in options)


@dataclass
class SparkbaseSession:
    """Site, expectations and facts for every host of the session (facts cached per host)."""

    site: Site
    ssh_config: Path | None
    known_hosts: Path | None
    expected: dict[str, Expected] = field(default_factory=dict)  # alias -> expectations
    facts: dict[str, FactsResult] = field(default_factory=dict)  # alias -> facts
    clients: dict[str, paramiko.SSHClient] = field(default_factory=dict)  # alias -> strict client

    def node_of(self, alias: str) -> str:
        for name, node in self.site.inventory.nodes.items():
            if node.ssh_host == alias or name == alias:
                return name
        raise pytest.UsageError(f"host {alias} is not a node of the inventory ({self.site.root})")

    def expected_of(self, alias: str) -> Expected:
        from sparkbase.audit.expected import expected_for

        if alias not in self.expected:
            self.expected[alias] = expected_for(self.site, self.node_of(alias))
        return self.expected[alias]

    def target(self, alias: str) -> Any:
        from sparkbase.transport import SshTarget

        known = self.known_hosts or _config_known_hosts(self.ssh_config, alias)
        if known is None:
            known = self.site.path(self.site.inventory.ssh.known_hosts)
        settings = self.site.inventory.ssh
        return SshTarget(
            node=self.node_of(alias),
            alias=alias,
            config_file=self.ssh_config,
            known_hosts=known,
            user=settings.user,
            # as the audit does (sparkbase.transport.ssh_targets): a non-root login user
            # reads the facts through `sudo -n`
            sudo=settings.sudo,
            user_from_inventory="user" in settings.model_fields_set,
            connect_timeout=settings.connect_timeout,
            command_timeout=settings.command_timeout,
        )

    def make_strict(self, host: Any) -> None:
        """Hold the host's backend to strict host keys (see the module docstring); any
        other backend is refused (`pytest_configure` refuses it first)."""
        backend = host.backend
        name = getattr(backend, "NAME", "")
        if name in ("ssh", "safe-ssh"):
            strict = strict_ssh_options(self.target(backend.host.name).known_hosts)
            extra = backend.ssh_extra_args or ""
            if not extra.startswith(strict):
                backend.ssh_extra_args = f"{strict} {extra}".strip()
            return
        if name != "paramiko":
            raise pytest.UsageError(f"backend {name!r} cannot be held to the node's host key")
        self.strict_client(backend)

    def strict_client(self, backend: Any) -> paramiko.SSHClient:
        """sparkbase's strict connection to a paramiko backend's host, opened once and
        given to the backend as its client."""
        from sparkbase.transport.client import connect

        alias = backend.host.name
        if alias not in self.clients:
            self.clients[alias] = connect(self.target(alias))
            backend.client = self.clients[alias]  # sets the cached_property's value
        return self.clients[alias]

    def facts_of(self, host: Any) -> FactsResult:
        """The host's facts: gathered on first use, in one round trip."""
        from sparkbase.facts.model import Unreachable
        from sparkbase.transport import TransportError

        alias = host.backend.host.name if hasattr(host.backend, "host") else host.backend.hostname
        if alias in self.facts:
            return self.facts[alias]
        node = self.expected_of(alias).node
        try:
            self.make_strict(host)
            facts = self._gather(host, alias)
        except TransportError as exc:
            facts = Unreachable(node, exc.failure.message, exc.failure.kind)
        except RuntimeError as exc:  # testinfra's OpenSSH backend: ssh itself failed (exit 255)
            failure = _openssh_failure(exc)
            facts = Unreachable(node, failure.message, failure.kind)
        self.facts[alias] = facts
        return facts

    def _gather(self, host: Any, alias: str) -> FactsResult:
        """Run the fact script on the host (over sparkbase's client for paramiko, through
        testinfra's OpenSSH backend otherwise) and read its sections."""
        from sparkbase.facts.areas import build_script
        from sparkbase.facts.collect import read_answer
        from sparkbase.facts.model import Unreachable
        from sparkbase.facts.script import marker_stdin, new_marker
        from sparkbase.transport import FailureKind
        from sparkbase.transport.client import run_command

        expected = self.expected_of(alias)
        target = self.target(alias)
        marker = new_marker()
        plan = expected.plan()
        script = build_script(plan)
        backend = host.backend
        if getattr(backend, "NAME", "") == "paramiko":
            # testinfra's --sudo, or the inventory's non-root login: `sudo -n`
            sudo = target.sudo or bool(getattr(backend, "sudo", False))
            answer = run_command(self.strict_client(backend), script, target.command_timeout, sudo,
                                 stdin=marker_stdin(marker))
            stdout, stderr, status = answer.stdout, answer.stderr, answer.exit_status
        else:
            # testinfra's own --sudo already wraps every command; else the inventory decides.
            # Its OpenSSH backend gives a command no stdin: the marker is piped in on the node,
            # so on this backend alone it is on the node's command line (`printf`)
            sudo = target.sudo and not getattr(backend, "sudo", False)
            # (testinfra formats the command with `%`: printf's own `%s` is written `%%s`)
            piped = f"printf %%s {shlex.quote(marker_stdin(marker))} | {'sudo -n ' if sudo else ''}sh -c %s"
            result = host.run(piped, script)
            stdout, stderr, status = result.stdout, result.stderr, result.rc
        if marker not in stdout:  # nothing of the script came back: say how it ended
            return Unreachable(expected.node, f"no fact sections (exit {status}): {stderr.strip()[:200]}",
                               FailureKind.COMMAND)
        return read_answer(expected.node, plan, stdout, stderr, marker)

    def result(self, host: Any, check_id: str) -> CheckResult | None:
        """The check's result on the host, or None when it does not apply to its baseline."""
        from sparkbase.audit.checks import node_checks
        from sparkbase.facts.model import NodeFacts, Unreachable

        alias = host.backend.host.name
        expected = self.expected_of(alias)
        for check in node_checks().values():
            for candidate, item in check.ids(expected):
                if candidate == check_id:
                    facts = self.facts_of(host)
                    if isinstance(facts, Unreachable):
                        from sparkbase.text import shown

                        pytest.fail(shown(f"{expected.node} unreachable: {facts.reason}"), pytrace=False)
                    assert isinstance(facts, NodeFacts)
                    return check.run(expected, facts, item, check_id)
        return None


def _openssh_failure(exc: RuntimeError) -> NodeFailure:
    """Why OpenSSH (testinfra's `ssh://` backend, which raises RuntimeError(result) when ssh
    exits 255) could not run the command. OpenSSH says why only in words on stderr, so its
    own fixed message for a refused host key is the one thing read from text here."""
    from sparkbase.transport import HOST_KEY_HELP, FailureKind, NodeFailure

    stderr = str(getattr(exc.args[0], "stderr", "")) if exc.args else ""
    if "Host key verification failed" in stderr:
        changed = "IDENTIFICATION HAS CHANGED" in stderr
        kind = "host key mismatch" if changed else "host key not in known_hosts"
        return NodeFailure(FailureKind.HOST_KEY,
                           f"{kind} (refused): OpenSSH with StrictHostKeyChecking=yes: {HOST_KEY_HELP}")
    detail = stderr.strip().splitlines()[-1] if stderr.strip() else str(exc)
    return NodeFailure(FailureKind.UNREACHABLE, f"ssh failed: {detail[:200]}")


def _config_known_hosts(ssh_config: Path | None, alias: str) -> Path | None:
    if ssh_config is None:
        return None
    from sparkbase.transport.paramiko_import import import_paramiko

    import_paramiko()
    import paramiko

    entry = paramiko.SSHConfig.from_path(str(ssh_config)).lookup(alias)
    files = entry.get("userknownhostsfile")
    if not files:
        return None
    first = str(files).split()[0]
    return Path(os.path.expanduser(first))
