"""Gather facts over SSH: one round trip per node, nodes in parallel, host keys checked.

Each node gets one `exec` of the fact script on a paramiko connection built from the
target's ssh_config, with the known_hosts file loaded and `RejectPolicy`: a node whose
key is missing or wrong is refused, never trusted. Whatever goes wrong with one node
(refused, timed out, wrong key, script cut short) becomes `Unreachable(reason)` for that
node; the others carry on.
"""

from __future__ import annotations

import shlex
import socket
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkbase.facts.assemble import assemble
from sparkbase.facts.model import FactsResult, Unreachable
from sparkbase.facts.script import FactPlan, build_script, new_marker, split_sections

if TYPE_CHECKING:
    import paramiko

    from sparkbase.transport import SshTarget

DEFAULT_PARALLEL = 16
#: seconds the whole fact script may take on one node
COMMAND_TIMEOUT = 60.0


@dataclass(frozen=True)
class Endpoint:
    """Where an ssh_config alias really points."""

    hostname: str
    port: int
    user: str
    key_files: tuple[str, ...]


def resolve(target: SshTarget) -> Endpoint:
    """Resolve the target's alias through its ssh_config (HostName, Port, User, IdentityFile)."""
    import paramiko

    config = (
        paramiko.SSHConfig.from_path(str(target.config_file))
        if target.config_file is not None
        else paramiko.SSHConfig()
    )
    entry = config.lookup(target.alias)
    return Endpoint(
        hostname=str(entry.get("hostname", target.alias)),
        port=int(entry.get("port", 22)),
        user=str(entry.get("user", target.user)),
        key_files=tuple(entry.get("identityfile", [])),
    )


def strict_client(target: SshTarget) -> paramiko.SSHClient:
    """An SSHClient that knows only the target's known_hosts and refuses any other key."""
    import paramiko

    client = paramiko.SSHClient()
    if target.known_hosts.is_file():
        client.load_host_keys(str(target.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return client


def connect(target: SshTarget) -> paramiko.SSHClient:
    """An open, host-key-checked connection to `target` (raises on any failure)."""
    endpoint = resolve(target)
    client = strict_client(target)
    try:
        client.connect(
            endpoint.hostname,
            port=endpoint.port,
            username=endpoint.user,
            key_filename=list(endpoint.key_files) or None,  # type: ignore[arg-type]  # list is accepted
            timeout=target.connect_timeout,
            banner_timeout=target.connect_timeout,
            auth_timeout=target.connect_timeout,
            allow_agent=False,
            look_for_keys=not endpoint.key_files,
        )
    except BaseException:
        client.close()
        raise
    return client


def run_script(client: paramiko.SSHClient, script: str, timeout: float = COMMAND_TIMEOUT) -> str:
    """Run `script` under `sh -c` in one exec channel; its stdout as text."""
    _stdin, stdout, _stderr = client.exec_command("sh -c " + shlex.quote(script), timeout=timeout)
    data = stdout.read()
    stdout.channel.recv_exit_status()
    return data.decode("utf-8", errors="replace")


def describe_failure(exc: BaseException) -> str:
    """A one-line reason a person can act on."""
    import paramiko

    if isinstance(exc, paramiko.BadHostKeyException):
        return (
            f"host key mismatch for {exc.hostname}: the node's key is not the one in known_hosts "
            "(refused; check the node before you re-enrol its key)"
        )
    if isinstance(exc, paramiko.SSHException) and "not found in known_hosts" in str(exc):
        return f"host key not in known_hosts (refused): {exc}"
    if isinstance(exc, ConnectionRefusedError | paramiko.ssh_exception.NoValidConnectionsError):
        return f"connection refused ({exc})"
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(exc, paramiko.AuthenticationException):
        return f"authentication failed: {exc}"
    return f"{type(exc).__name__}: {exc}"


def gather_node(node: str, target: SshTarget, plan: FactPlan) -> FactsResult:
    """Facts of one node in one round trip, or why it could not be asked."""
    start = time.monotonic()
    marker = new_marker()
    try:
        client = connect(target)
    except Exception as exc:  # one node's failure must not stop the others
        return Unreachable(node, describe_failure(exc))
    try:
        output = run_script(client, build_script(plan, marker))
    except Exception as exc:
        return Unreachable(node, f"fact script failed: {describe_failure(exc)}")
    finally:
        client.close()
    sections = split_sections(output, marker)
    if not sections.by_name:
        return Unreachable(node, "the node answered, but not with the fact script's sections")
    return assemble(node, plan, sections, elapsed=time.monotonic() - start)


def gather_fleet(
    targets: Mapping[str, SshTarget],
    plans: Mapping[str, FactPlan],
    parallel: int = DEFAULT_PARALLEL,
    gather: Callable[[str, SshTarget, FactPlan], FactsResult] = gather_node,
) -> dict[str, FactsResult]:
    """Facts of every planned node, gathered concurrently (at most `parallel` at once)."""
    nodes = list(plans)
    if not nodes:
        return {}
    workers = max(1, min(parallel, len(nodes)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="facts") as pool:
        futures = {node: pool.submit(gather, node, targets[node], plans[node]) for node in nodes}
        return {node: future.result() for node, future in futures.items()}
