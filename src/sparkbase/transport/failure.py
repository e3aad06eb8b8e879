"""Why a node could not be asked, as a typed value: a kind, and a line a person can act on.

Every node failure sparkbase reports (facts, plan/apply, preflight, the checks plugin)
carries a `FailureKind`; callers decide by the kind, never by searching the message.
The kind is found from the exception's type (and, for paramiko's handshake errors, the
exception it was raised from), at the place that knows what was being attempted: a
connection (`classify_connect`) or a command on an open connection (`CommandFailed`).

Import-light: no paramiko here until an exception has to be classified.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from enum import StrEnum

from sparkbase.transport.paramiko_import import import_paramiko


class FailureKind(StrEnum):
    """What went wrong with one node (the values are the JSON and report spelling)."""

    #: nothing answers: connection refused, no route, unknown name, the connection dropped
    UNREACHABLE = "unreachable"
    #: sshd answered and refused every credential (or none was offered)
    AUTH = "auth"
    #: the node's host key is not in the site's known_hosts, or is another key
    HOST_KEY = "host key"
    #: no answer in time: TCP connect, the SSH handshake, or a command past its deadline
    TIMEOUT = "timeout"
    #: connected and authenticated, but the command failed or answered nonsense
    COMMAND = "command"

    @property
    def connection(self) -> bool:
        """Whether no command could run at all (every kind but COMMAND): the node was not
        reached, and sparkbase reports it `unreachable` (exit 3)."""
        return self is not FailureKind.COMMAND


@dataclass(frozen=True)
class NodeFailure:
    """One node's failure: its kind and the reason in words."""

    kind: FailureKind
    message: str

    def __str__(self) -> str:
        return self.message


class TransportError(Exception):
    """A node failure raised by the transport; `failure` says which kind."""

    def __init__(self, failure: NodeFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class CommandFailed(TransportError):
    """A command on an open connection did not finish with an answer (deadline, drop,
    output over its cap); `partial` is the stdout read until then (to say where it stopped)."""

    def __init__(self, failure: NodeFailure, partial: str = "") -> None:
        super().__init__(failure)
        self.partial = partial


class UnknownHostKey(Exception):
    """The node offered a host key that the site's known_hosts does not hold for it
    (raised by `StrictPolicy`; paramiko's own RejectPolicy says it only in words)."""

    def __init__(self, hostname: str, key_type: str) -> None:
        super().__init__(f"Server {hostname!r} not found in known_hosts ({key_type} key offered)")
        self.hostname = hostname
        self.key_type = key_type


#: what to do about a refused host key (README, "Host keys"); sparkbase never edits known_hosts
HOST_KEY_HELP = (
    "verify the node's key on its console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), "
    "then enrol it by hand in the site's known_hosts (README: Host keys); sparkbase never "
    "accepts or records a host key itself"
)


#: the port accepted the connection but sshd did not finish the handshake in time
HANDSHAKE_TIMEOUT = NodeFailure(
    FailureKind.TIMEOUT, "timed out waiting for the SSH handshake (the port accepts, sshd does not answer)"
)


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and those it was raised from or during (paramiko wraps a banner
    timeout in an SSHException raised while handling the timeout)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def classify_connect(exc: BaseException, *, handshake_done: bool = False,
                     authenticated: bool = False) -> NodeFailure:
    """The failure behind an exception raised while connecting.

    `handshake_done` and `authenticated` say how far the SSH transport got (read from the
    client's transport by `client.connect`): an SSHException after the handshake but
    before authentication is paramiko's "no authentication methods available".
    """
    import_paramiko()
    import paramiko

    if isinstance(exc, TransportError):
        return exc.failure
    if isinstance(exc, paramiko.BadHostKeyException):
        return NodeFailure(FailureKind.HOST_KEY,
                           f"host key mismatch for {exc.hostname}: the node's key is not the one in "
                           "known_hosts (refused; check the node before you re-enrol its key): "
                           f"{HOST_KEY_HELP}")
    if isinstance(exc, UnknownHostKey):
        return NodeFailure(FailureKind.HOST_KEY,
                           f"host key not in known_hosts (refused): {exc}: {HOST_KEY_HELP}")
    if isinstance(exc, paramiko.AuthenticationException):
        return NodeFailure(FailureKind.AUTH, f"authentication failed: {exc}")
    chain = _chain(exc)
    if any(isinstance(link, TimeoutError | socket.timeout) for link in chain):
        if isinstance(exc, paramiko.SSHException):
            return HANDSHAKE_TIMEOUT
        return NodeFailure(FailureKind.TIMEOUT, "timed out")
    if isinstance(exc, ConnectionRefusedError | paramiko.ssh_exception.NoValidConnectionsError):
        return NodeFailure(FailureKind.UNREACHABLE, f"connection refused ({exc})")
    if isinstance(exc, paramiko.SSHException) and handshake_done and not authenticated:
        return NodeFailure(FailureKind.AUTH, f"authentication failed: {exc}")
    if isinstance(exc, paramiko.SSHException):
        return NodeFailure(FailureKind.UNREACHABLE, f"the SSH handshake failed: {exc}")
    if isinstance(exc, OSError):
        return NodeFailure(FailureKind.UNREACHABLE, f"cannot connect: {exc}")
    return NodeFailure(FailureKind.UNREACHABLE, f"{type(exc).__name__}: {exc}")
