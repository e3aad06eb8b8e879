"""A tiny SSH server for unit tests: paramiko's own server side, on 127.0.0.1 only.

It speaks real SSH (banner, key exchange, host key, public-key authentication, exec
channels), so the transport's failures are classified from the exceptions paramiko really
raises, with no lab and no root. What a command does is chosen by its text:
`hang` never answers, `drop` closes the channel without an exit status, `sb-flood` (or any
command, with `flood`) prints without end, anything else prints `answer` (the stub's
attribute) and exits `exit_status` — or, when `respond` is set, what it returns for the
command and the stdin the stub read to its end (each exec's command and stdin kept in `seen`).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import paramiko
from paramiko.common import (
    AUTH_FAILED,
    AUTH_SUCCESSFUL,
    OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED,
    OPEN_SUCCEEDED,
)

from sparkbase.transport import SshTarget


class _Server(paramiko.ServerInterface):
    def __init__(self, stub: SshStub) -> None:
        self.stub = stub

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        if key.get_base64() == self.stub.client_key.get_base64():
            return AUTH_SUCCESSFUL
        return AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return OPEN_SUCCEEDED
        return OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        text = command.decode()
        answer = threading.Thread(target=self.stub.answer_command, args=(channel, text), daemon=True)
        answer.start()
        return True


@dataclass
class SshStub:
    """A listening SSH server; `target()` is an SshTarget that reaches it."""

    directory: Path
    host_key: paramiko.PKey
    client_key: paramiko.PKey
    answer: str = "hello\n"
    exit_status: int = 0
    respond: Callable[[str, bytes], bytes] | None = None
    flood: bool = False
    seen: list[tuple[str, bytes]] = field(default_factory=list)
    sock: socket.socket = field(default_factory=lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    transports: list[paramiko.Transport] = field(default_factory=list)

    def start(self) -> SshStub:
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            transport = paramiko.Transport(conn)
            transport.add_server_key(self.host_key)
            self.transports.append(transport)
            try:
                transport.start_server(server=_Server(self))
            except (paramiko.SSHException, EOFError, OSError):
                continue

    def answer_command(self, channel: paramiko.Channel, command: str) -> None:
        time.sleep(0.1)  # let paramiko acknowledge the exec request before the channel ends
        if "hang" in command:
            return
        if "drop" in command:
            channel.close()
            return
        if "sb-flood" in command or self.flood:
            self._flood(channel)
            return
        if self.respond is not None:
            stdin = self._stdin(channel)
            self.seen.append((command, stdin))
            try:  # the client may close the channel first (an answer over its cap)
                channel.sendall(self.respond(command, stdin))
                channel.send_exit_status(self.exit_status)
            except (OSError, EOFError, paramiko.SSHException):
                pass
            channel.close()
            return
        channel.sendall(self.answer.encode())
        if "late-status" in command:
            channel.shutdown_write()  # the output ends (EOF) well before the exit status comes
            time.sleep(0.3)
        channel.send_exit_status(self.exit_status)
        channel.close()

    @staticmethod
    def _stdin(channel: paramiko.Channel) -> bytes:
        data = b""
        while chunk := channel.recv(65536):
            data += chunk
        return data

    @staticmethod
    def _flood(channel: paramiko.Channel) -> None:
        block = b"y\n" * 32768
        try:
            while not channel.closed:
                channel.sendall(block)
        except (OSError, EOFError, paramiko.SSHException):
            return

    def stop(self) -> None:
        self.sock.close()
        for transport in self.transports:
            transport.close()

    def target(self, known_hosts: str | None = None, client_key: paramiko.PKey | None = None,
               port: int | None = None, connect_timeout: float = 2.0) -> SshTarget:
        """A target for the stub; `known_hosts` defaults to the stub's own host key."""
        key_file = self.directory / "id_client"
        (client_key or self.client_key).write_private_key_file(str(key_file))
        config = self.directory / "ssh_config"
        config.write_text(f"Host stub\n  HostName 127.0.0.1\n  Port {port or self.port}\n  User tester\n"
                          f"  IdentityFile {key_file}\n")
        known = self.directory / "known_hosts"
        if known_hosts is None:
            known_hosts = f"[127.0.0.1]:{self.port} {self.host_key.get_name()} {self.host_key.get_base64()}\n"
        known.write_text(known_hosts)
        return SshTarget(node="stub", alias="stub", config_file=config, known_hosts=known, user="tester",
                         sudo=False, connect_timeout=connect_timeout, command_timeout=2.0)
