"""Gather facts over SSH: one round trip per node, nodes in parallel, host keys checked.

Each node gets one `exec` of the fact script on a paramiko connection built from the
target's ssh_config, with the known_hosts file loaded and `RejectPolicy`: a node whose
key is missing or wrong is refused, never trusted. Whatever goes wrong with one node
(refused, timed out, wrong key, script cut short) becomes `Unreachable(reason)` for that
node; the others carry on.
"""

from __future__ import annotations

import functools
import re
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbase.facts.assemble import assemble
from sparkbase.facts.model import FactsResult, Unreachable
from sparkbase.facts.script import FactPlan, build_script, new_marker, split_sections
from sparkbase.facts.script import sections as script_sections
from sparkbase.transport import HOST_KEY_HELP

if TYPE_CHECKING:
    import paramiko

    from sparkbase.transport import SshTarget

DEFAULT_PARALLEL = 16
#: seconds the whole fact script may take on one node
COMMAND_TIMEOUT = 60.0


_IMPORT_LOCK = threading.Lock()
#: an ssh_config line that runs a command (`Match exec ...`), which paramiko does with invoke
_MATCH_EXEC = re.compile(r"^\s*match\b.*\bexec\b", re.IGNORECASE | re.MULTILINE)


def import_paramiko() -> None:
    """Import paramiko without `invoke` (a third of paramiko's import time, asyncio and
    unittest.mock included), which paramiko needs only for ssh_config `Match exec`;
    `_ssh_config` brings it back for a config that has one. Call before `import paramiko`."""
    with _IMPORT_LOCK:
        if "paramiko" not in sys.modules and "invoke" not in sys.modules:
            sys.modules["invoke"] = None  # type: ignore[assignment]  # import blocker
            try:
                import paramiko  # noqa: F401  # imported for its side effect on sys.modules
            finally:
                del sys.modules["invoke"]


@functools.lru_cache(maxsize=16)
def _ssh_config(path: str, mtime_ns: int) -> paramiko.SSHConfig:
    """A parsed ssh_config, once per file version (every node of a fleet shares one)."""
    import_paramiko()
    import paramiko
    import paramiko.config as config_module

    text = Path(path).read_text()
    if _MATCH_EXEC.search(text) and getattr(config_module, "invoke", None) is None:
        import invoke  # type: ignore[import-not-found,unused-ignore]

        config_module.invoke = invoke  # type: ignore[attr-defined]  # paramiko's optional import
    return paramiko.SSHConfig.from_text(text)


@functools.lru_cache(maxsize=16)
def _known_hosts(path: str, mtime_ns: int) -> paramiko.HostKeys:
    """A parsed known_hosts file, once per file version (read-only once loaded)."""
    import_paramiko()
    import paramiko

    return paramiko.HostKeys(path)


@dataclass(frozen=True)
class Endpoint:
    """Where an ssh_config alias really points."""

    hostname: str
    port: int
    user: str
    key_files: tuple[str, ...]


def resolve(target: SshTarget) -> Endpoint:
    """Resolve the target's alias through its ssh_config (HostName, Port, User, IdentityFile)."""
    import_paramiko()
    import paramiko

    config = (
        _ssh_config(str(target.config_file), target.config_file.stat().st_mtime_ns)
        if target.config_file is not None
        else paramiko.SSHConfig()
    )
    entry = config.lookup(target.alias)
    return Endpoint(
        hostname=str(entry.get("hostname", target.alias)),
        port=int(entry.get("port", 22)),
        user=target.user if target.user_from_inventory else str(entry.get("user", target.user)),
        key_files=tuple(entry.get("identityfile", [])),
    )


def strict_client(target: SshTarget) -> paramiko.SSHClient:
    """An SSHClient that knows only the target's known_hosts and refuses any other key."""
    import_paramiko()
    import paramiko

    client = paramiko.SSHClient()
    if target.known_hosts.is_file():
        known = _known_hosts(str(target.known_hosts), target.known_hosts.stat().st_mtime_ns)
        client.get_host_keys().update(known)
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


class ScriptCut(RuntimeError):
    """The fact script did not finish: the connection dropped or the deadline passed."""


def run_script(client: paramiko.SSHClient, script: str, timeout: float = COMMAND_TIMEOUT,
               sudo: bool = False) -> tuple[str, str]:
    """Run `script` under `sh -c` in one exec channel; its stdout and stderr as text.

    `timeout` bounds the whole run (not only each read): a node that freezes or trickles
    output is given up on at the deadline. A connection that ends without an exit status
    (sshd or the node died mid-script) raises ScriptCut rather than returning half an answer.
    With `sudo`, the script runs under `sudo -n` (a non-root login user; never a password).
    """
    deadline = time.monotonic() + timeout
    command = ("sudo -n " if sudo else "") + "sh -c " + shlex.quote(script)
    _stdin, stdout, _stderr = client.exec_command(command, timeout=timeout)
    channel = stdout.channel
    chunks: list[bytes] = []
    errors: list[bytes] = []
    while True:
        while channel.recv_stderr_ready():
            errors.append(channel.recv_stderr(65536))
        left = deadline - time.monotonic()
        if left <= 0:
            channel.close()
            raise ScriptCut(f"no complete answer within {timeout:g}s (command timeout)")
        channel.settimeout(min(left, 1.0))
        try:
            chunk = channel.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            break
        chunks.append(chunk)
    while not channel.exit_status_ready() and not channel.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    if not channel.exit_status_ready() or channel.recv_exit_status() == -1:
        raise ScriptCut("the connection closed before the fact script finished")
    while channel.recv_stderr_ready():
        errors.append(channel.recv_stderr(65536))
    return _text(chunks), _text(errors)


def _text(chunks: list[bytes]) -> str:
    return b"".join(chunks).decode("utf-8", errors="replace")


def describe_failure(exc: BaseException) -> str:
    """A one-line reason a person can act on."""
    import_paramiko()
    import paramiko

    if isinstance(exc, paramiko.BadHostKeyException):
        return (
            f"host key mismatch for {exc.hostname}: the node's key is not the one in known_hosts "
            f"(refused; check the node before you re-enrol its key): {HOST_KEY_HELP}"
        )
    if isinstance(exc, paramiko.SSHException) and "not found in known_hosts" in str(exc):
        return f"host key not in known_hosts (refused): {exc}: {HOST_KEY_HELP}"
    if isinstance(exc, ConnectionRefusedError | paramiko.ssh_exception.NoValidConnectionsError):
        return f"connection refused ({exc})"
    if isinstance(exc, ScriptCut):
        return str(exc)
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(exc, paramiko.SSHException) and ("banner" in str(exc) or "No existing session" in str(exc)):
        # paramiko says either, depending on where the silent handshake was given up
        return "timed out waiting for the SSH handshake (the port accepts, sshd does not answer)"
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
        script = build_script(plan, marker)
        output, stderr = run_script(client, script, target.command_timeout, target.sudo)
    except Exception as exc:
        return Unreachable(node, f"fact script failed: {describe_failure(exc)}")
    finally:
        client.close()
    sections = split_sections(output, marker, stderr)
    if not sections.by_name:
        return Unreachable(node, "the node answered, but not with the fact script's sections")
    wanted = [name for name, _ in script_sections(plan)]
    if wanted and wanted[-1] not in sections.by_name:
        return Unreachable(node, f"the fact script's answer was cut short ({len(sections.by_name)} of "
                                 f"{len(wanted)} sections)")
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
