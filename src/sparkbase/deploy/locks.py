"""Two locks keep two applies off the same node: a local one and one on the node.

- Local: `<site>/.sparkbase/locks/<node>.lock`, held with `flock` for the whole run (the
  kernel drops it if the process dies), carrying the owner as JSON (format-versioned).
- Remote: `mkdir /run/sparkbase/apply.lock` over SSH (atomic; /run is cleared by a
  reboot, as a lock held by a process that no longer exists should be), with an `owner`
  file inside. Re-acquiring with the same token succeeds (the run re-locks after a reboot).
  A run cut off from its node (sshd killed, link lost) cannot release the node lock: a
  lock whose owner ran on this machine and whose process is gone is stale (`stale`) and
  is broken by the next run, naming the old owner; any other holder is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import posixpath
import shlex
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

LOCK_FORMAT = 1
REMOTE_LOCK_DIR = "/run/sparkbase/apply.lock"
ACQUIRED = "SPARKBASE-LOCK-ACQUIRED"
HELD = "SPARKBASE-LOCK-HELD"


class LockHeld(RuntimeError):
    """Another apply holds the lock on a node."""

    def __init__(self, node: str, where: str, owner: dict[str, Any]) -> None:
        self.node = node
        self.owner = owner
        who = describe_owner(owner)
        super().__init__(f"{node}: another apply holds the {where} lock ({who}); refusing")


def describe_owner(owner: dict[str, Any]) -> str:
    """`user@host pid N since TIME` from an owner record (whatever fields it has)."""
    if not owner:
        return "owner unknown"
    user = owner.get("user", "?")
    host = owner.get("host", "?")
    return f"{user}@{host} pid {owner.get('pid', '?')} since {owner.get('started', '?')}"


@dataclass(frozen=True)
class Owner:
    """Who holds a lock: written into both locks."""

    user: str = field(default_factory=getpass.getuser)
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    started: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    def record(self) -> dict[str, Any]:
        """The owner as the JSON record the locks carry."""
        return {"format": LOCK_FORMAT, "user": self.user, "host": self.host, "pid": self.pid,
                "started": self.started, "token": self.token}

    def json(self) -> str:
        """One line of JSON."""
        return json.dumps(self.record(), sort_keys=True)


@contextlib.contextmanager
def local_locks(directory: Path, nodes: list[str], owner: Owner) -> Iterator[None]:
    """Hold `directory/<node>.lock` for every node (all or none), or raise LockHeld."""
    directory.mkdir(parents=True, exist_ok=True)
    held: list[IO[str]] = []
    handle: IO[str]
    try:
        for node in nodes:
            handle = open(directory / f"{node}.lock", "a+")  # noqa: SIM115 - held for the run
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise LockHeld(node, "local", _holder(handle)) from None
            finally:
                held.append(handle)
            handle.seek(0)
            handle.truncate()
            handle.write(owner.json() + "\n")
            handle.flush()
        yield
    finally:
        for handle in held:
            handle.close()


def _holder(handle: IO[str], wait: float = 1.0) -> dict[str, Any]:
    """The owner record of a held lock file. The holder writes it just after taking the
    lock, so give it a moment rather than report an unknown owner."""
    deadline = time.monotonic() + wait
    while True:
        handle.seek(0)
        owner = _parse_owner(handle.read())
        if owner or time.monotonic() >= deadline:
            return owner
        time.sleep(0.02)


def _parse_owner(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text.strip().splitlines()[0]) if text.strip() else {}
    except (json.JSONDecodeError, IndexError):
        return {}
    return data if isinstance(data, dict) else {}


def remote_acquire_command(owner: Owner) -> str:
    """Shell that takes the node lock (or finds our own), printing ACQUIRED or HELD + owner."""
    lock = shlex.quote(REMOTE_LOCK_DIR)
    token = shlex.quote(owner.token)
    record = shlex.quote(owner.json())
    return (
        f"mkdir -p /run/sparkbase && if mkdir {lock} 2>/dev/null; then "
        f"printf '%s\\n' {record} > {lock}/owner && echo {ACQUIRED}; "
        f"elif grep -q {token} {lock}/owner 2>/dev/null; then echo {ACQUIRED}; "
        f"else echo {HELD}; cat {lock}/owner 2>/dev/null; fi"
    )


def remote_release_command(owner: Owner) -> str:
    """Shell that removes the node lock only if we hold it."""
    lock = shlex.quote(REMOTE_LOCK_DIR)
    parent = shlex.quote(posixpath.dirname(REMOTE_LOCK_DIR))
    # the parent goes too when nothing else is in it: a node the run only locked is left as found
    return (f"if grep -q {shlex.quote(owner.token)} {lock}/owner 2>/dev/null; then rm -rf {lock}; "
            f"rmdir {parent} 2>/dev/null; fi; true")


def stale(owner: dict[str, Any]) -> bool:
    """Whether a node lock's owner is a process of this machine that no longer runs."""
    if owner.get("host") != socket.gethostname() or not isinstance(owner.get("pid"), int):
        return False
    pid: int = owner["pid"]
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False  # alive (or its pid reused): never broken automatically


def remote_break_command(owner: dict[str, Any]) -> str:
    """Shell that removes the node lock only if it still carries `owner`'s token."""
    lock = shlex.quote(REMOTE_LOCK_DIR)
    token = shlex.quote(str(owner.get("token", "")) or "no-token")
    return f"if grep -q {token} {lock}/owner 2>/dev/null; then rm -rf {lock}; fi"


def parse_acquire(node: str, lines: list[str]) -> None:
    """Raise LockHeld unless the acquire command's output says we hold the lock."""
    if lines and lines[0].strip() == ACQUIRED:
        return
    owner = _parse_owner("\n".join(lines[1:])) if lines and lines[0].strip() == HELD else {}
    raise LockHeld(node, "node", owner)
