"""Two locks keep two applies off the same node: a local one and one on the node.

- Local: `<site>/.sparkbase/locks/<node>.lock`, a `filelock.UnixFileLock` (flock; the kernel
  drops it if the process dies) held for the whole run, carrying the owner as JSON
  (format-versioned), written into the lock file by filelock's `on_acquired` hook while it
  is held. filelock 4.x opens an existing lock file without truncating it (3.x truncated
  it on open, before trying the lock), so a refused run can still read the holder's record:
  pyproject pins `filelock>=4.3.1,<5` and a unit test fails if that changes.
- Remote: `mkdir /run/sparkbase/apply.lock` over SSH (atomic; /run is cleared by a
  reboot, as a lock held by a process that no longer exists should be), with an `owner`
  file inside. Re-acquiring with the same token succeeds (the run re-locks after a reboot).
  A run cut off from its node (sshd killed, link lost) cannot release the node lock: a
  lock whose owner ran on this machine and whose process is gone is stale (`stale`) and
  is broken by the next run, naming the old owner; any other holder is refused.
"""

from __future__ import annotations

import contextlib
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
from typing import Any

LOCK_FORMAT = 1
REMOTE_LOCK_DIR = "/run/sparkbase/apply.lock"
ACQUIRED = "SPARKBASE-LOCK-ACQUIRED"
HELD = "SPARKBASE-LOCK-HELD"
#: an owner record is one short JSON line; anything longer in a lock file is not ours
_MAX_OWNER_BYTES = 4096


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
    from filelock import Timeout, UnixFileLock

    directory.mkdir(parents=True, exist_ok=True)
    record = (owner.json() + "\n").encode()

    def write_owner(fd: int) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)

    with contextlib.ExitStack() as held:
        for node in nodes:
            path = directory / f"{node}.lock"
            lock = UnixFileLock(path, blocking=False, thread_local=False, fallback_to_soft=False,
                                on_acquired=write_owner)
            try:
                held.enter_context(lock)
            except Timeout:
                raise LockHeld(node, "local", _holder(path)) from None
        yield


def _holder(path: Path, wait: float = 1.0) -> dict[str, Any]:
    """The owner record of a held lock file. The holder writes it just after taking the
    lock, so give it a moment rather than report an unknown owner."""
    from sparkbase.boundedfile import FileRefused, read_regular_file

    deadline = time.monotonic() + wait
    while True:
        try:
            owner = _parse_owner(read_regular_file(path, _MAX_OWNER_BYTES).decode("utf-8", "replace"))
        except FileRefused:
            owner = {}
        if owner or time.monotonic() >= deadline:
            return owner
        time.sleep(0.02)


def _parse_owner(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text.strip().split("\n")[0]) if text.strip() else {}
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
