"""Two locks keep two runs off the same node: a local one and one on the node.

`apply` holds both on every node it changes for its whole run; `lane switch` holds both on
every node of the lane it switches to, through its pre-flight and the `.env` write, so no
apply starts moving a node the proxy is being pointed at (and no switch points the proxy
at a node an apply is moving). The owner record says which command holds a lock.

- Local: `<site>/.sparkbase/locks/<node>.lock`, a `filelock.UnixFileLock` (flock; the kernel
  drops it if the process dies) held for the whole run, carrying the owner as JSON
  (format-versioned), written into the lock file by filelock's `on_acquired` hook while it
  is held (`file_lock`; the lane switch's own lock beside the proxy's `.env` is one too).
  filelock opens the file with O_NOFOLLOW: a link planted at a lock's path is refused,
  never written through. filelock 4.x opens an existing lock file without truncating it (3.x truncated
  it on open, before trying the lock), so a refused run can still read the holder's record:
  pyproject pins `filelock>=4.3.1,<5` and a unit test fails if that changes.
- Remote: `mkdir /run/sparkbase/apply.lock` over SSH (atomic; /run is cleared by a
  reboot, as a lock held by a process that no longer exists should be), with an `owner`
  file inside. Re-acquiring with the same token succeeds (the run re-locks after a reboot).
  A run cut off from its node (sshd killed, link lost) cannot release the node lock: a
  lock whose owner ran on this machine and whose process is gone is stale (`stale`) and
  is broken by the next run, naming the old owner; any other holder is refused
  (`acquire_node_lock`). `apply` runs the commands through its pyinfra session,
  `lane switch` through sparkbase's strict paramiko client (`node_locks`).
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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import paramiko

    from sparkbase.transport import SshTarget

#: version of the owner record (2: `command`, the command that holds the lock)
LOCK_FORMAT = 2
REMOTE_LOCK_DIR = "/run/sparkbase/apply.lock"
ACQUIRED = "SPARKBASE-LOCK-ACQUIRED"
HELD = "SPARKBASE-LOCK-HELD"
#: an owner record is one short JSON line; anything longer in a lock file is not ours
_MAX_OWNER_BYTES = 4096


#: the commands that take these locks (an owner record without `command` is an apply's)
APPLY = "apply"
LANE_SWITCH = "lane switch"


class LockHeld(RuntimeError):
    """Another run (an apply or a lane switch) holds a lock on a node (or on the `.env`)."""

    def __init__(self, node: str, where: str, owner: dict[str, Any]) -> None:
        self.node = node
        self.owner = owner
        who = describe_owner(owner)
        command = owner.get("command") if isinstance(owner.get("command"), str) else APPLY
        super().__init__(f"{node}: another {command} holds the {where} lock ({who}); refusing")


class NodeLockError(RuntimeError):
    """A node lock could not be taken at all (the node was not reached, the command failed)."""


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
    #: the command holding the lock (`APPLY` or `LANE_SWITCH`), named to whoever is refused
    command: str = APPLY

    def record(self) -> dict[str, Any]:
        """The owner as the JSON record the locks carry."""
        return {"format": LOCK_FORMAT, "user": self.user, "host": self.host, "pid": self.pid,
                "started": self.started, "token": self.token, "command": self.command}

    def json(self) -> str:
        """One line of JSON."""
        return json.dumps(self.record(), sort_keys=True)


def local_lock_dir(site_root: Path) -> Path:
    """Where a site's local node locks live (apply's and lane switch's alike)."""
    return site_root / ".sparkbase" / "locks"


@contextlib.contextmanager
def local_locks(directory: Path, nodes: list[str], owner: Owner) -> Iterator[None]:
    """Hold `directory/<node>.lock` for every node (all or none), or raise LockHeld."""
    directory.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as held:
        for node in nodes:
            held.enter_context(file_lock(directory / f"{node}.lock", owner, node, "local"))
        yield


@contextlib.contextmanager
def file_lock(path: Path, owner: Owner, subject: str, where: str) -> Iterator[None]:
    """Hold the flock on `path` with `owner`'s record written in it, or raise LockHeld
    (`subject: another COMMAND holds the WHERE lock (holder)`). A link at `path` is refused
    by filelock (O_NOFOLLOW): OSError, nothing written."""
    from filelock import Timeout, UnixFileLock

    record = (owner.json() + "\n").encode()

    def write_owner(fd: int) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)

    lock = UnixFileLock(path, blocking=False, thread_local=False, fallback_to_soft=False,
                        on_acquired=write_owner)
    try:
        lock.acquire()
    except Timeout:
        raise LockHeld(subject, where, _holder(path)) from None
    try:
        yield
    finally:
        lock.release()


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


def acquire_node_lock(node: str, run: Callable[[str], list[str]], owner: Owner,
                      note: Callable[[str], None]) -> None:
    """Take `node`'s lock through `run` (a shell command on the node -> its output lines) or
    raise LockHeld; a stale lock (its owner here is gone) is broken first, and `note` says so."""
    lines = run(remote_acquire_command(owner))
    try:
        parse_acquire(node, lines)
    except LockHeld as exc:
        if not stale(exc.owner):
            raise
        note(f"{node}: breaking a stale node lock ({describe_owner(exc.owner)}: that process is gone)")
        run(remote_break_command(exc.owner))
        parse_acquire(node, run(remote_acquire_command(owner)))


@contextlib.contextmanager
def node_locks(targets: Mapping[str, SshTarget], owner: Owner,
               note: Callable[[str], None]) -> Iterator[None]:
    """Hold the node lock on every target (all or none) through sparkbase's strict SSH
    client, released on exit; LockHeld names a holder, NodeLockError a node that could not
    be asked (nothing is held then)."""
    from concurrent.futures import ThreadPoolExecutor

    nodes = sorted(targets)
    held: dict[str, paramiko.SSHClient] = {}
    refused: list[BaseException] = []
    try:
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            asked = [pool.submit(_locked_client, targets[node], owner, note) for node in nodes]
        for node, future in zip(nodes, asked, strict=True):
            try:
                held[node] = future.result()
            except BaseException as exc:  # every answer is collected first: none held is left behind
                refused.append(exc)
        if refused:
            raise refused[0]
        yield
    finally:
        for node, client in held.items():
            _release(targets[node], client, owner)


def _locked_client(target: SshTarget, owner: Owner, note: Callable[[str], None]) -> paramiko.SSHClient:
    """An open connection to `target` whose node lock `owner` now holds; LockHeld or
    NodeLockError (the connection closed) otherwise."""
    from sparkbase.facts.parsers.lines import node_lines
    from sparkbase.transport import TransportError
    from sparkbase.transport.client import connect, run_command

    try:
        client = connect(target)
    except TransportError as exc:
        raise NodeLockError(f"{target.node}: cannot take the node lock: {exc.failure}") from None

    def run(command: str) -> list[str]:
        return node_lines(run_command(client, command, target.command_timeout, sudo=target.sudo).stdout)

    try:
        acquire_node_lock(target.node, run, owner, note)
    except TransportError as exc:
        client.close()
        raise NodeLockError(f"{target.node}: cannot take the node lock: {exc.failure}") from None
    except BaseException:
        client.close()
        raise
    return client


def _release(target: SshTarget, client: paramiko.SSHClient, owner: Owner) -> None:
    """Give the node lock back (best effort: a lock left behind is stale once we are gone)."""
    from sparkbase.transport import TransportError
    from sparkbase.transport.client import run_command

    try:
        run_command(client, remote_release_command(owner), target.command_timeout, sudo=target.sudo)
    except TransportError:
        pass
    finally:
        client.close()
