"""The model-name proxy's `.env`: which lane serves, and the one-line rewrite that switches it.

`active_lane` and `rewritten` are pure (bytes in, value or bytes out); `switch_line` writes
the file atomically (a temporary file in the same directory, fsync, then rename over it),
keeping every other byte of the file as it was, its mode too.
"""

from __future__ import annotations

import re
from pathlib import Path

from sparkbase.atomicfile import write_atomic

#: the largest .env read (a proxy's settings, not a data file)
MAX_ENV_BYTES = 1 << 20


class ProxyEnvError(ValueError):
    """The .env cannot be read or rewritten safely (missing key, the key twice, too big)."""


def _key_lines(data: bytes, key: str) -> list[re.Match[bytes]]:
    pattern = re.compile(rb"^(?P<head>[ \t]*(?:export[ \t]+)?" + re.escape(key.encode())
                         + rb"[ \t]*=)(?P<value>[^\r\n]*)", re.MULTILINE)
    return list(pattern.finditer(data))


def _one_line(data: bytes, key: str, path: Path) -> re.Match[bytes]:
    lines = _key_lines(data, key)
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


def read_env(path: Path) -> bytes:
    """The .env's bytes (bounded); `ProxyEnvError` when it cannot be read."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_ENV_BYTES + 1)
    except OSError as exc:
        raise ProxyEnvError(f"{path}: cannot read the proxy's .env: {exc.strerror}") from None
    if len(data) > MAX_ENV_BYTES:
        raise ProxyEnvError(f"{path}: larger than {MAX_ENV_BYTES} bytes; not a proxy .env")
    return data


def active_lane(data: bytes, key: str, path: Path) -> str:
    """The value of the one `KEY=` line (quotes removed)."""
    return _unquoted(_one_line(data, key, path)["value"])


def rewritten(data: bytes, key: str, lane: str, path: Path) -> bytes:
    """`data` with the one `KEY=` line's value replaced by `lane`; every other byte kept."""
    match = _one_line(data, key, path)
    return data[: match.start("value")] + lane.encode() + data[match.end("value") :]


def switch_line(path: Path, key: str, lane: str) -> str:
    """Rewrite the .env so `KEY=lane`, atomically; the lane it named before."""
    data = read_env(path)
    before = active_lane(data, key, path)
    new = rewritten(data, key, lane, path)
    write_atomic(path, new, mode=path.stat().st_mode & 0o7777)
    return before
