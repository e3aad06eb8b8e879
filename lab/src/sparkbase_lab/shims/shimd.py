"""The node's resident command server: node commands without a new interpreter each.

Every node command used to be a fresh `python3 -IS` (about 14 ms of CPU, nearly all of it
interpreter start-up). Node init starts this server (`shim.py __shimd__`) at every boot,
right after the boot step; it imports the command modules once and listens on a unix
socket in the node's volatile /run (`SOCKET`), so a reboot leaves no stale server. The
commands in `/usr/local/bin` are a small C client (`client.c`) that connects, hands over
its stdin/stdout/stderr (SCM_RIGHTS) with the command, arguments, working directory,
umask and environment (`encode_request`), and exits with the status it gets back. Per
connection the server forks a worker that takes the caller's place (descriptors, cwd,
umask, environment, and the caller's uid/gids when it is not root: SO_PEERCRED), runs
`registry.main` and replies; a worker that raises still replies (status 1, traceback on
the caller's stderr). The server replies 128+N for a worker killed by signal N.

The worker answers `FALLBACK` instead of running anything when it cannot take the caller's
place (or is asked for a command it must not run, `registry.NOT_SERVED`); the client then
runs the command the old way, as it does whenever the socket is missing or refuses.

Wire format (native byte order: both ends run on the same machine): a request is a 4-byte
length, sent with the three descriptors, then that many bytes: NUL-terminated fields
`VERSION, command, cwd, umask (octal), argc, argv[1..], environment entries...`. A reply is
one 4-byte signed status.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import secrets
import select
import signal
import socket
import stat
import struct
import sys
from typing import NamedTuple

#: where the server listens inside a node (the node's volatile /run)
SOCKET = "/run/sparkbase-lab/shimd.sock"
#: the first field of every request (the client and the server come from one lab build)
VERSION = b"sparkbase-shimd-1"
#: the reply that tells the client to run the command itself (python wrapper)
FALLBACK = -1
#: the largest request the server reads (arguments plus environment)
MAX_REQUEST = 4 << 20
HEADER = struct.Struct("=i")
PEERCRED = struct.Struct("=3i")  # struct ucred: pid, uid, gid


class ProtocolError(ValueError):
    """A request that is not in the wire format."""


class Request(NamedTuple):
    """One command call: what the worker needs to take the caller's place."""

    command: str
    argv: list[str]
    cwd: str
    umask: int
    env: dict[str, str]


def encode_request(request: Request) -> bytes:
    """The request's payload (without its length header), as `client.c` writes it."""
    fields = [VERSION, os.fsencode(request.command), os.fsencode(request.cwd),
              b"%o" % request.umask, b"%d" % len(request.argv)]
    fields += [os.fsencode(arg) for arg in request.argv]
    fields += [os.fsencode(f"{key}={value}") for key, value in request.env.items()]
    for field in fields:
        if b"\0" in field:
            raise ProtocolError("a field holds a NUL byte")
    return b"".join(field + b"\0" for field in fields)


def decode_request(payload: bytes) -> Request:
    """Parse a request payload; ProtocolError when it is not one."""
    if not payload.endswith(b"\0"):
        raise ProtocolError("the request does not end with a NUL byte")
    fields = payload[:-1].split(b"\0")
    if len(fields) < 5 or fields[0] != VERSION:
        raise ProtocolError("not a sparkbase-shimd-1 request")
    try:
        umask, argc = int(fields[3], 8), int(fields[4])
    except ValueError:
        raise ProtocolError("umask or argument count is not a number") from None
    if not 0 <= umask <= 0o777 or not 0 <= argc <= len(fields) - 5:
        raise ProtocolError("umask or argument count out of range")
    argv = [os.fsdecode(arg) for arg in fields[5:5 + argc]]
    env: dict[str, str] = {}
    for entry in fields[5 + argc:]:
        key, sep, value = os.fsdecode(entry).partition("=")
        if sep and key:
            env.setdefault(key, value)
    return Request(os.fsdecode(fields[1]), argv, os.fsdecode(fields[2]), umask, env)


def exit_status(wait_status: int) -> int:
    """A reaped process's status as a shell reports it (128+N when signal N killed it)."""
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.waitstatus_to_exitcode(wait_status)


def supplementary_groups(pid: int, gid: int) -> list[int]:
    """The caller's supplementary groups (from /proc/PID/status); just `gid` when unknown."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("Groups:"):
                    return [int(g) for g in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return [gid]


# --- the worker (one per connection, in a forked child) ----------------------------------


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = conn.recv(min(left, 1 << 16))
        if not chunk:
            raise ProtocolError("the client closed the connection mid-request")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(conn: socket.socket) -> tuple[Request, list[int]]:
    """Read one request and the caller's three descriptors from `conn`."""
    head, fds, _flags, _addr = socket.recv_fds(conn, HEADER.size, 3, socket.MSG_CMSG_CLOEXEC)
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise ProtocolError("a request must carry stdin, stdout and stderr")
    if len(head) < HEADER.size:
        head += _read_exactly(conn, HEADER.size - len(head))
    (size,) = HEADER.unpack(head)
    if not 0 < size <= MAX_REQUEST:
        raise ProtocolError(f"request size {size} out of range")
    return decode_request(_read_exactly(conn, size)), fds


def _stdio(fd: int, template: object, write: bool) -> object:
    """A text stream on `fd` made as the interpreter makes sys.stdin/stdout/stderr."""
    import io

    encoding = getattr(template, "encoding", "utf-8")
    errors = getattr(template, "errors", "strict")
    line_buffering = write and (fd == 2 or os.isatty(fd))
    buffer: io.BufferedIOBase
    raw = io.FileIO(fd, "wb" if write else "rb", closefd=False)
    buffer = io.BufferedWriter(raw) if write else io.BufferedReader(raw)
    return io.TextIOWrapper(buffer, encoding=encoding, errors=errors, newline="\n",
                            line_buffering=line_buffering)


def take_callers_place(conn: socket.socket, request: Request, fds: list[int]) -> None:
    """Become the caller: its descriptors, directory, umask, environment and identity."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request.cwd)
    os.umask(request.umask)
    pid, uid, gid = PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                    PEERCRED.size))
    if uid != 0:
        os.setgroups(supplementary_groups(pid, gid))
        os.setgid(gid)
        os.setuid(uid)
    os.environ.clear()
    os.environ.update(request.env)
    sys.stdin = sys.__stdin__ = _stdio(0, sys.__stdin__, write=False)  # type: ignore[assignment,misc]
    sys.stdout = sys.__stdout__ = _stdio(1, sys.__stdout__, write=True)  # type: ignore[assignment,misc]
    sys.stderr = sys.__stderr__ = _stdio(2, sys.__stderr__, write=True)  # type: ignore[assignment,misc]
    sys.argv = [f"/usr/local/bin/{request.command}", *request.argv]


def run_command(request: Request) -> int:
    """`registry.main`, with any exit or exception turned into a status (as python3 would)."""
    from sparkbase_lab.shims import registry

    try:
        status = registry.main(request.command, request.argv)
    except SystemExit as exc:
        if exc.code is None:
            status = 0
        elif isinstance(exc.code, int):
            status = exc.code
        else:
            print(exc.code, file=sys.stderr)
            status = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            status = status or 120
    return status & 0xFF


def worker(conn: socket.socket) -> int:
    """Serve one connection (in the forked child); the status sent, FALLBACK included."""
    from sparkbase_lab.shims import registry

    request: Request | None = None
    fds: list[int] = []
    with contextlib.suppress(OSError, ProtocolError):
        request, fds = receive(conn)
    if request is None or request.command in registry.NOT_SERVED:
        # nothing ran: the client (if still there) runs the command itself
        status = FALLBACK
    else:
        try:
            take_callers_place(conn, request, fds)
        except OSError:
            status = FALLBACK
        else:
            status = run_command(request)
    conn.sendall(HEADER.pack(status))
    return status


def _in_child(listener: socket.socket, conn: socket.socket) -> None:
    code = 1
    try:
        listener.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        worker(conn)
        code = 0
    except BaseException:  # noqa: S110 (the server replies for a worker that could not)
        pass
    finally:
        os._exit(code)


# --- the server --------------------------------------------------------------------------


def preimport() -> None:
    """Import every command module and the standard modules they import on demand."""
    import importlib

    from sparkbase_lab.shims import registry

    for name in ("json", "re", "glob", "subprocess", "time", "traceback", "io", "sparkbase_lab.boot"):
        importlib.import_module(name)
    for module in sorted(set(registry.MODULES.values())):
        importlib.import_module(f"{registry.PACKAGE}.{module}")
    gc.freeze()  # what is imported now stays out of the collector: fewer pages a worker copies


def listen(path: str) -> socket.socket:
    """A listening socket at `path` (mode 0666), put in place atomically over an earlier
    server's socket; anything else at `path` is kept (OSError: the server does not start and
    the node's commands run the old way). Bound first under a fresh name of its own, so no
    file is ever removed to make room."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise FileExistsError(errno.EEXIST, "not a socket: kept", path)
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(tmp)  # EADDRINUSE, never a removal, should the name exist
    os.chmod(tmp, 0o666)  # noqa: S103 (every node user runs node commands; workers take their uid)
    listener.listen(128)
    os.rename(tmp, path)
    return listener


def serve(path: str = SOCKET) -> int:
    """Accept connections forever, a forked worker each; reply for workers that died."""
    preimport()
    listener = listen(path)
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    running: dict[int, socket.socket] = {}
    sys.stdout.flush()
    sys.stderr.flush()
    while True:
        try:
            ready, _, _ = select.select([listener.fileno(), wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            while True:
                try:
                    if not os.read(wake_r, 512):
                        break
                except BlockingIOError:
                    break
            reap(running)
        if listener.fileno() in ready:
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            pid = os.fork()
            if pid == 0:
                _in_child(listener, conn)
            running[pid] = conn


def reap(running: dict[int, socket.socket]) -> None:
    """Collect exited workers; a worker that died before replying gets a reply for it."""
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = running.pop(pid, None)
        if conn is None:
            continue
        if wait_status != 0:
            with contextlib.suppress(OSError):
                conn.sendall(HEADER.pack(exit_status(wait_status)))
        conn.close()


def cmd_shimd(argv: list[str]) -> int:
    """`shim.py __shimd__ [SOCKET]`: run the node's command server (node init starts it)."""
    return serve(argv[0] if argv else SOCKET)


COMMANDS = {"__shimd__": cmd_shimd}
