"""Reading a file sparkbase was pointed at, bounded: regular files only, never past a limit.

One reader for every file a person names (site YAML, the lock, ssh_config, known_hosts, a
saved metrics scrape). The type and size are checked before opening (a FIFO would block
the reader, a link to /dev/zero would never end), again on the open descriptor, and no
more than `limit` bytes are ever read. Callers turn `FileRefused` into their own located,
one-line error; its message never holds the file's content.
"""

from __future__ import annotations

import os
import stat
from enum import StrEnum

_FILE_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}
_CHUNK = 65536


class Refusal(StrEnum):
    """Why a file was not read."""

    UNREADABLE = "unreadable"  # missing, no permission, I/O error
    NOT_REGULAR = "not-regular"  # a directory, FIFO, socket or device
    TOO_BIG = "too-big"  # over the limit, before or while reading


class FileRefused(Exception):
    """A file that is not read: `refusal` says why, `detail` how (an errno text, the file's
    kind, or its size); `message` is one plain line without the file's content."""

    def __init__(self, refusal: Refusal, detail: str, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal
        self.detail = detail
        self.message = message


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO", "a directory", ...)."""
    return _FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")


def read_regular_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes; `FileRefused` otherwise."""
    try:
        _check(os.stat(path), limit)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise _unreadable(exc) from None
    try:
        _check(os.fstat(fd), limit)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise _unreadable(exc) from None
    finally:
        os.close(fd)
    if size > limit:
        raise FileRefused(Refusal.TOO_BIG, f"over {limit} bytes",
                          f"file grew past the limit of {limit} bytes while being read")
    return b"".join(chunks)


def _check(info: os.stat_result, limit: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = file_kind(info.st_mode)
        raise FileRefused(Refusal.NOT_REGULAR, kind, f"is {kind}, not a regular file")
    if info.st_size > limit:
        raise FileRefused(Refusal.TOO_BIG, f"{info.st_size} bytes",
                          f"file is {info.st_size} bytes; the limit is {limit}")


def _unreadable(exc: OSError) -> FileRefused:
    why = exc.strerror or str(exc)
    return FileRefused(Refusal.UNREADABLE, why, f"cannot read file: {why}")

