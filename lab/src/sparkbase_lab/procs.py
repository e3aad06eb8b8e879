"""Process identity helpers: a PID is only ours if its start time matches what we recorded."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Proc:
    """A process the lab started, identified by PID and kernel start time."""

    pid: int
    start: int

    def to_json(self) -> dict[str, int]:
        """The form stored in `lab.json`."""
        return {"pid": self.pid, "start": self.start}

    @classmethod
    def from_json(cls, data: dict[str, int]) -> Proc:
        """Inverse of `to_json`."""
        return cls(int(data["pid"]), int(data["start"]))

    @classmethod
    def of(cls, pid: int) -> Proc | None:
        """The process with `pid` now, or None when there is none."""
        start = start_time(pid)
        return None if start is None else cls(pid, start)


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    # the command name is in parentheses and may contain spaces
    return text[text.rindex(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """Kernel start time (clock ticks since boot) of `pid`, None if it does not exist."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def state(pid: int) -> str | None:
    """One-letter state of `pid` (`Z` for a zombie), None if it does not exist."""
    fields = _stat(pid)
    return fields[0] if fields else None


def alive(proc: Proc) -> bool:
    """Whether `proc` still runs (same PID and start time, not a zombie)."""
    fields = _stat(proc.pid)
    return bool(fields) and fields is not None and fields[0] != "Z" and int(fields[19]) == proc.start


def exists(proc: Proc) -> bool:
    """Whether `proc` still has a process-table entry (a zombie counts)."""
    return start_time(proc.pid) == proc.start


def kill(proc: Proc, sig: int) -> bool:
    """Send `sig` to `proc` if it is still that process; return whether it was sent."""
    if not alive(proc):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)
        return True
    return False


def children(pid: int) -> list[int]:
    """Direct children of `pid`."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(c) for c in fh.read().split()]
        except OSError:
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Every descendant of `pid` (children first)."""
    out: list[int] = []
    todo = children(pid)
    while todo:
        child = todo.pop(0)
        out.append(child)
        todo += children(child)
    return out


def rss_kb(pid: int) -> int:
    """Resident set size of `pid` in KiB (0 if gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def wait_gone(procs: list[Proc], timeout: float) -> list[Proc]:
    """Wait until none of `procs` is alive; return those still alive at the timeout."""
    deadline = time.monotonic() + timeout
    left = [p for p in procs if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in left if alive(p)]
    return left


def terminate(procs: list[Proc], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds, each process that is still ours."""
    for p in procs:
        kill(p, signal.SIGTERM)
    for p in wait_gone(procs, grace):
        kill(p, signal.SIGKILL)
    wait_gone(procs, 5.0)


def port_answers(port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:`port`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(("127.0.0.1", port))
        except OSError:
            return False
    return True


def ssh_banner(port: int, timeout: float = 1.0) -> bool:
    """Whether an SSH server greets on 127.0.0.1:`port`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(("127.0.0.1", port))
            return sock.recv(64).startswith(b"SSH-")
        except OSError:
            return False
