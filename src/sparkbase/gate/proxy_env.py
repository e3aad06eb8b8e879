"""The model-name proxy's `.env`: which lane serves, and the one-line rewrite that switches it.

`active_lane` and `rewritten` are pure (bytes in, value or bytes out); `switch_line` writes
the file atomically (a temporary file in the same directory, fsync, then rename over it),
keeping every other byte of the file as it was, and its owner, group and mode (the proxy
runs as its own user and must still read it).

A `.env` that is a symbolic link is refused by `switch_line`, naming the link and its
target, and nothing is written. Deliberately: the rename that makes the write atomic
replaces the link itself (the proxy, reading the link's target, would never see the
switch); writing through it would rewrite a file the site does not name, wherever a
person able to change the link points it; and the switch lock beside the `.env`
(`switch_lock_path`) guards the name the site gives, so two names for one file would
hold two locks. Point `proxy.env_file` (or `--env-file`) at the target instead. Reading
for `lane status` (`read_env`) follows a link; anything but a regular file is refused.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

from sparkbase.atomicfile import write_atomic

#: the largest .env read (a proxy's settings, not a data file)
MAX_ENV_BYTES = 1 << 20


class ProxyEnvError(ValueError):
    """The .env cannot be read or rewritten safely (missing key, the key twice, too big)."""


def _one_line(data: bytes, key: str, path: Path) -> re.Match[bytes]:
    pattern = re.compile(rb"^(?P<head>[ \t]*(?:export[ \t]+)?" + re.escape(key.encode())
                         + rb"[ \t]*=)(?P<value>[^\r\n]*)", re.MULTILINE)
    lines = list(pattern.finditer(data))
    if not lines:
        raise ProxyEnvError(f"{path}: no {key}= line (the proxy's lane line); nothing was changed")
    if len(lines) > 1:
        numbers = ", ".join(str(data.count(b"\n", 0, m.start()) + 1) for m in lines)
        raise ProxyEnvError(f"{path}: {key}= is set on several lines ({numbers}); keep one")
    return lines[0]


def _unquoted(raw: bytes) -> str:
    value = raw.decode("utf-8", errors="replace").strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value.split(" #", 1)[0].strip()


def read_env(path: Path, *, follow: bool = True) -> bytes:
    """The .env's bytes (bounded, a regular file; through a link unless `follow=False`,
    which refuses one as `switch_line` does); `ProxyEnvError` when it cannot be read."""
    return _read(path, follow=follow)[0]


def _read(path: Path, *, follow: bool) -> tuple[bytes, os.stat_result]:
    """The file's bytes and status, read from one descriptor (`follow=False`: a link at
    `path` is refused, naming its target); `ProxyEnvError` for anything but a regular file."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow and path.is_symlink():
            raise ProxyEnvError(_link_refused(path)) from None
        raise ProxyEnvError(f"{path}: cannot read the proxy's .env: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ProxyEnvError(f"{path}: not a regular file; not a proxy .env")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_ENV_BYTES + 1)
    if len(data) > MAX_ENV_BYTES:
        raise ProxyEnvError(f"{path}: larger than {MAX_ENV_BYTES} bytes; not a proxy .env")
    return data, info


def _link_refused(path: Path) -> str:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return (f"{path}: is a symbolic link to {target}; refused, nothing was changed (a switch "
            "renames a new file over the .env, which would replace the link, and never writes "
            "a file the site does not name): point proxy.env_file or --env-file at "
            f"{path.parent / target}")


def active_lane(data: bytes, key: str, path: Path) -> str:
    """The value of the one `KEY=` line (quotes removed)."""
    return _unquoted(_one_line(data, key, path)["value"])


def rewritten(data: bytes, key: str, lane: str, path: Path) -> bytes:
    """`data` with the one `KEY=` line's value replaced by `lane`; every other byte kept."""
    match = _one_line(data, key, path)
    return data[: match.start("value")] + lane.encode() + data[match.end("value") :]


def switch_line(path: Path, key: str, lane: str) -> str:
    """Rewrite the .env so `KEY=lane`, atomically, keeping its owner, group and mode; the
    lane it named before. A link at `path` is refused (see the module's docstring)."""
    data, info = _read(path, follow=False)
    before = active_lane(data, key, path)
    new = rewritten(data, key, lane, path)
    try:
        write_atomic(path, new, mode=stat.S_IMODE(info.st_mode), owner=(info.st_uid, info.st_gid))
    except OSError as exc:
        hint = ""
        if exc.errno == errno.EPERM:
            hint = (f" (the file belongs to uid {info.st_uid}, gid {info.st_gid}: only root or its "
                    "owner can write it keeping them)")
        raise ProxyEnvError(f"{path}: cannot rewrite the proxy's .env: {exc.strerror}{hint}; "
                            "it was left as it was") from None
    return before


def switch_lock_path(path: Path) -> Path:
    """The lane switch's own lock, beside the .env it guards (whichever site switches it)."""
    return path.parent / f".{path.name}.sparkbase-switch.lock"
