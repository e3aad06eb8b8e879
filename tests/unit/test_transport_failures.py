"""Every node failure is typed: each kind from the exception paramiko really raises against
a real SSH server on 127.0.0.1 (tests/unit/sshd_stub.py), never from the message's words."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from sshd_stub import SshStub

from sparkbase.facts.collect import gather_node
from sparkbase.facts.model import Unreachable
from sparkbase.facts.script import FactPlan
from sparkbase.transport import FailureKind, TransportError
from sparkbase.transport.client import connect, diagnose, run_command, wait_for

HOST_KEY = paramiko.RSAKey.generate(2048)
CLIENT_KEY = paramiko.RSAKey.generate(2048)
OTHER_KEY = paramiko.RSAKey.generate(2048)


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[SshStub]:
    server = SshStub(tmp_path, HOST_KEY, CLIENT_KEY).start()
    yield server
    server.stop()


def connect_failure(target: object) -> TransportError:
    with pytest.raises(TransportError) as caught:
        connect(target)  # type: ignore[arg-type]
    return caught.value


def test_a_known_host_with_the_right_login_connects(stub: SshStub) -> None:
    client = connect(stub.target())
    try:
        answer = run_command(client, "echo", timeout=2.0)
    finally:
        client.close()
    assert (answer.stdout, answer.exit_status) == ("hello\n", 0)
    assert diagnose(stub.target()) is None


def test_a_closed_port_is_unreachable(stub: SshStub) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    failure = connect_failure(stub.target(port=port)).failure
    assert failure.kind is FailureKind.UNREACHABLE and failure.kind.connection
    assert "connection refused" in failure.message


def test_a_port_that_never_speaks_ssh_is_a_timeout(stub: SshStub) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    try:
        failure = connect_failure(stub.target(port=silent.getsockname()[1], connect_timeout=0.5)).failure
    finally:
        silent.close()
    assert failure.kind is FailureKind.TIMEOUT
    assert "timed out" in failure.message


def test_an_unknown_host_key_is_refused_as_host_key(stub: SshStub) -> None:
    failure = connect_failure(stub.target(known_hosts="")).failure
    assert failure.kind is FailureKind.HOST_KEY
    assert failure.message.startswith("host key not in known_hosts (refused)")
    assert "enrol it by hand" in failure.message


def test_a_changed_host_key_is_refused_as_host_key(stub: SshStub) -> None:
    wrong = f"[127.0.0.1]:{stub.port} {OTHER_KEY.get_name()} {OTHER_KEY.get_base64()}\n"
    failure = connect_failure(stub.target(known_hosts=wrong)).failure
    assert failure.kind is FailureKind.HOST_KEY
    assert failure.message.startswith("host key mismatch")


def test_a_refused_login_is_auth(stub: SshStub) -> None:
    failure = connect_failure(stub.target(client_key=OTHER_KEY)).failure
    assert failure.kind is FailureKind.AUTH
    assert failure.message.startswith("authentication failed")


def test_a_command_past_its_deadline_is_a_timeout(stub: SshStub) -> None:
    client = connect(stub.target())
    try:
        with pytest.raises(TransportError) as caught:
            run_command(client, "hang", timeout=0.5)
    finally:
        client.close()
    assert caught.value.failure.kind is FailureKind.TIMEOUT
    assert "command timeout" in caught.value.failure.message


def test_a_channel_closed_without_an_exit_status_is_unreachable(stub: SshStub) -> None:
    client = connect(stub.target())
    try:
        with pytest.raises(TransportError) as caught:
            run_command(client, "drop", timeout=2.0)
    finally:
        client.close()
    assert caught.value.failure.kind is FailureKind.UNREACHABLE


def test_an_exit_status_after_the_end_of_the_output_is_waited_for(stub: SshStub) -> None:
    stub.exit_status = 3
    client = connect(stub.target())
    try:
        answer = run_command(client, "late-status", timeout=2.0)
    finally:
        client.close()
    assert (answer.stdout, answer.exit_status) == ("hello\n", 3)


def test_a_fact_script_answered_with_nonsense_is_a_command_failure(stub: SshStub) -> None:
    stub.answer = "not the fact script\n"
    result = gather_node("stub", stub.target(), FactPlan())
    assert isinstance(result, Unreachable)
    assert result.kind is FailureKind.COMMAND and not result.kind.connection
    assert "not with the fact script's sections" in result.reason


@pytest.mark.parametrize(
    ("case", "kind"),
    [("refused", FailureKind.UNREACHABLE), ("unknown-key", FailureKind.HOST_KEY),
     ("login", FailureKind.AUTH)],
)
def test_gather_carries_the_connection_kind(stub: SshStub, case: str, kind: FailureKind) -> None:
    if case == "refused":
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        target = stub.target(port=closed.getsockname()[1])
        closed.close()
    elif case == "unknown-key":
        target = stub.target(known_hosts="")
    else:
        target = stub.target(client_key=OTHER_KEY)
    result = gather_node("stub", target, FactPlan())
    assert isinstance(result, Unreachable) and result.kind is kind


def test_wait_for_probes_until_the_command_succeeds(stub: SshStub) -> None:
    stub.exit_status = 1
    threading.Timer(0.6, lambda: setattr(stub, "exit_status", 0)).start()
    assert wait_for(stub.target(), "test ! -e /run/marker", timeout=10.0, settle=0.0, pause=0.1)


def test_wait_for_gives_up_at_its_deadline(stub: SshStub) -> None:
    stub.exit_status = 1
    assert not wait_for(stub.target(), "test ! -e /run/marker", timeout=0.8, settle=0.0, pause=0.1)


@pytest.mark.parametrize("known", ["changed", "removed"])
def test_wait_for_stops_at_once_on_a_host_key_changed_across_the_reboot(stub: SshStub, known: str) -> None:
    """A node that comes back with another host key (or one known_hosts no longer holds) is
    refused at once with the typed failure; the wait does not run out its timeout."""
    stub.exit_status = 1  # the reboot marker is still there: the node has not rebooted yet
    target = stub.target()

    def reboot_with_another_key() -> None:
        if known == "changed":
            stub.host_key = OTHER_KEY
        else:
            target.known_hosts.write_text("")
        # the marker is gone only once the node is up again (a probe in flight still sees it)
        threading.Timer(0.5, lambda: setattr(stub, "exit_status", 0)).start()

    threading.Timer(0.4, reboot_with_another_key).start()
    started = time.monotonic()
    with pytest.raises(TransportError) as caught:
        wait_for(target, "test ! -e /run/marker", timeout=8.0, settle=0.0, pause=0.1)
    assert time.monotonic() - started < 4.0
    assert caught.value.failure.kind is FailureKind.HOST_KEY
    assert "known_hosts" in caught.value.failure.message


def test_no_kind_is_decided_from_words() -> None:
    """The package never classifies by searching a message (issue 14)."""
    source = Path(__file__).resolve().parents[2] / "src" / "sparkbase"
    offenders = [
        str(path.relative_to(source))
        for path in source.rglob("*.py")
        if '"unreachable" in' in path.read_text() or "not found in known_hosts\" in" in path.read_text()
    ]
    assert offenders == []
