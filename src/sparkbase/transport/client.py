"""sparkbase's one SSH client: paramiko, host keys strictly from the site's known_hosts.

Everything sparkbase itself says to a node goes through here: the audit's fact script
(`facts/collect.py`), the wait for a rebooted node (`deploy/rollout.py`), the diagnosis of
a node pyinfra could not reach (`diagnose`), and the checks plugin's paramiko backend.
pyinfra and testinfra connect with their own clients, fed the same settings
(`transport.feeds`).

- host keys: only the target's known_hosts; an unknown key raises `UnknownHostKey`, a
  changed one paramiko's `BadHostKeyException` (never accepted, never recorded);
- timeouts: `connect_timeout` for TCP, banner and authentication; `command_timeout` for a
  whole command (not each read), so a node that freezes or trickles is given up on;
- size: a command's output is capped (`MAX_ANSWER_BYTES`), so a tool that prints without
  end fails that node ("output over N bytes") instead of filling memory; bytes that are
  not UTF-8 come back escaped (`\\xff`);
- secrets off the command line: what a command must not show in `/proc/PID/cmdline` (the
  fact script's fence marker) is sent on its stdin;
- sudo: `sudo -n` (never a password) when the inventory's login user is not root;
- failures: every one is raised as `TransportError` carrying a typed `NodeFailure`.
"""

from __future__ import annotations

import functools
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkbase.transport.failure import (
    HANDSHAKE_TIMEOUT,
    CommandFailed,
    FailureKind,
    NodeFailure,
    TransportError,
    UnknownHostKey,
    classify_connect,
)
from sparkbase.transport.paramiko_import import import_paramiko

if TYPE_CHECKING:
    import paramiko

    from sparkbase.transport.targets import SshTarget

#: an ssh_config line that runs a command (`Match exec ...`), which paramiko does with invoke
_MATCH_EXEC = re.compile(r"^\s*match\b.*\bexec\b", re.IGNORECASE | re.MULTILINE)
#: how long one probe of a rebooting node may take (connect and the marker test)
REBOOT_PROBE_TIMEOUT = 3.0


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


def _strict_policy() -> paramiko.MissingHostKeyPolicy:
    """A policy that refuses any host key known_hosts lacks, with a typed exception."""
    import_paramiko()
    import paramiko

    class StrictPolicy(paramiko.MissingHostKeyPolicy):
        """Refuse the unknown key (paramiko's RejectPolicy, but typed)."""

        def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
            raise UnknownHostKey(hostname, key.get_name())

    return StrictPolicy()


def strict_client(target: SshTarget) -> paramiko.SSHClient:
    """An SSHClient that knows only the target's known_hosts and refuses any other key."""
    import_paramiko()
    import paramiko

    client = paramiko.SSHClient()
    if target.known_hosts.is_file():
        known = _known_hosts(str(target.known_hosts), target.known_hosts.stat().st_mtime_ns)
        client.get_host_keys().update(known)
    client.set_missing_host_key_policy(_strict_policy())
    return client


def connect(target: SshTarget, timeout: float | None = None) -> paramiko.SSHClient:
    """An open, host-key-checked connection to `target`; `TransportError` on any failure.
    `timeout` replaces the target's connect timeout (a reboot probe uses a short one)."""
    seconds = target.connect_timeout if timeout is None else timeout
    try:
        endpoint = resolve(target)
        client = strict_client(target)
    except (OSError, ValueError) as exc:  # the ssh_config or known_hosts went away or changed
        unreadable = NodeFailure(FailureKind.UNREACHABLE, f"cannot read the SSH files: {exc}")
        raise TransportError(unreadable) from exc
    started = time.monotonic()
    try:
        client.connect(
            endpoint.hostname,
            port=endpoint.port,
            username=endpoint.user,
            key_filename=list(endpoint.key_files) or None,  # type: ignore[arg-type]  # list is accepted
            timeout=seconds,
            banner_timeout=seconds,
            auth_timeout=seconds,
            allow_agent=False,
            look_for_keys=not endpoint.key_files,
        )
    except Exception as exc:
        transport = client.get_transport()
        handshake_done = transport is not None and transport.remote_version != ""
        authenticated = transport is not None and transport.is_authenticated()
        # the transport thread's own error (a banner timeout, say) is the real cause when
        # the client only saw the session vanish
        underlying = transport.get_exception() if transport is not None and not handshake_done else None
        client.close()
        if transport is not None and not handshake_done and time.monotonic() - started >= seconds:
            # paramiko stops waiting for the handshake at the deadline, and may then raise
            # before its transport thread records the banner timeout
            raise TransportError(HANDSHAKE_TIMEOUT) from exc
        raise TransportError(classify_connect(underlying or exc, handshake_done=handshake_done,
                                              authenticated=authenticated)) from exc
    except BaseException:
        client.close()
        raise
    return client


#: the most a command may print (stdout and stderr together) before it is given up on: a
#: fleet node's whole fact script answers in well under 1 MiB
MAX_ANSWER_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Answer:
    """What a command printed and how it ended (bytes that are not UTF-8 shown escaped,
    `\\xff`)."""

    stdout: str
    stderr: str
    exit_status: int


def command_line(script: str, sudo: bool = False) -> str:
    """`sh -c SCRIPT` as one quoted command line, under `sudo -n` when asked."""
    return ("sudo -n " if sudo else "") + "sh -c " + shlex.quote(script)


class _Reads:
    """A command's output as it arrives, capped at `limit` bytes in all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.stdout: list[bytes] = []
        self.stderr: list[bytes] = []

    def add(self, into: list[bytes], chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.limit:
            raise CommandFailed(NodeFailure(FailureKind.COMMAND, f"output over {self.limit} bytes "
                                                                 "(the command printed without end?)"),
                                _text(self.stdout))
        into.append(chunk)


def run_command(client: paramiko.SSHClient, script: str, timeout: float, sudo: bool = False,
                stdin: str = "", limit: int = MAX_ANSWER_BYTES) -> Answer:
    """Run `script` under `sh -c` in one exec channel, `stdin` sent to it (then closed);
    its output and exit status.

    `timeout` bounds the whole run (not only each read): a node that freezes or trickles
    output is given up on at the deadline (`CommandFailed`, kind TIMEOUT). More than
    `limit` bytes of output (stdout and stderr together) is given up on at once
    (`CommandFailed`, kind COMMAND: "output over N bytes"), so a tool that prints without
    end costs at most `limit` bytes of memory. A connection that ends without an exit
    status (sshd or the node died mid-command) raises `CommandFailed` (kind UNREACHABLE)
    rather than returning half an answer.
    """
    deadline = time.monotonic() + timeout
    try:
        channel_in, stdout, _stderr = client.exec_command(command_line(script, sudo), timeout=timeout)
        if stdin:
            channel_in.channel.sendall(stdin.encode())
        channel_in.channel.shutdown_write()
    except Exception as exc:
        raise CommandFailed(_lost(exc)) from exc
    channel = stdout.channel
    reads = _Reads(limit)
    try:
        _read_all(channel, reads, deadline, timeout)
    except CommandFailed:
        channel.close()  # nothing more is read; the channel window stops the sender
        raise
    # the exit status may follow the end of the output: wait for it (or the channel's close,
    # which sets the same event) until the deadline, woken the moment it comes
    channel.status_event.wait(max(0.0, deadline - time.monotonic()))
    if not channel.exit_status_ready() or channel.recv_exit_status() == -1:
        lost = "the connection closed before the command finished"
        raise CommandFailed(NodeFailure(FailureKind.UNREACHABLE, lost))
    while channel.recv_stderr_ready():
        reads.add(reads.stderr, channel.recv_stderr(65536))
    return Answer(_text(reads.stdout), _text(reads.stderr), channel.recv_exit_status())


def _read_all(channel: paramiko.Channel, reads: _Reads, deadline: float, timeout: float) -> None:
    """Read stdout (and stderr as it comes) to its end, within the deadline and the cap."""
    while True:
        while channel.recv_stderr_ready():
            reads.add(reads.stderr, channel.recv_stderr(65536))
        left = deadline - time.monotonic()
        if left <= 0:
            raise CommandFailed(NodeFailure(FailureKind.TIMEOUT,
                                            f"no complete answer within {timeout:g}s (command timeout)"),
                                _text(reads.stdout))
        channel.settimeout(min(left, 1.0))
        try:
            chunk = channel.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            return
        reads.add(reads.stdout, chunk)


def _lost(exc: BaseException) -> NodeFailure:
    """The failure when a command cannot even start on an open connection."""
    if isinstance(exc, TransportError):
        return exc.failure
    return NodeFailure(FailureKind.UNREACHABLE, f"the connection dropped: {type(exc).__name__}: {exc}")


def _text(chunks: list[bytes]) -> str:
    return b"".join(chunks).decode("utf-8", errors="backslashreplace")


def diagnose(target: SshTarget) -> NodeFailure | None:
    """Why `target` cannot be reached, from one strict connection attempt (a refused host
    key says how to verify and enrol it); None when it connects now."""
    try:
        connect(target).close()
    except TransportError as exc:
        return exc.failure
    return None


def wait_for(target: SshTarget, script: str, timeout: float, settle: float = 0.5,
             pause: float = 0.3) -> bool:
    """Probe `target` with `script` until it exits 0 over a strict connection (True), or
    `timeout` seconds pass (False). Each probe has a short connect and command deadline;
    a node that is down, booting or refusing is simply probed again. A host key that is
    not the one in known_hosts is no passing state of a boot: the wait stops at once with
    `TransportError` (kind HOST_KEY), never waits it out."""
    deadline = time.monotonic() + timeout
    time.sleep(settle)
    while time.monotonic() < deadline:
        try:
            client = connect(target, timeout=REBOOT_PROBE_TIMEOUT)
        except TransportError as exc:
            if exc.failure.kind is FailureKind.HOST_KEY:
                raise
            time.sleep(pause)
            continue
        try:
            if run_command(client, script, REBOOT_PROBE_TIMEOUT, target.sudo).exit_status == 0:
                return True
        except TransportError:
            pass
        finally:
            client.close()
        time.sleep(pause)
    return False
