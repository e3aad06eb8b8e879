"""One way to write a file so that a reader sees the old content or the new, never half.

Every file sparkbase writes for itself or for a person (the lock, the validated-site cache,
the proxy's `.env`, a captured baseline, an audit report, the starter site, the lab's own
state) goes through `write_atomic`: a temporary file in the same directory (so the rename
never crosses a file system), the data, `fsync`, the final mode, `os.replace` over the
target, then `fsync` of the directory so the rename itself survives a power cut (pipx's
`pipx_metadata_file.py` does the same: temp file, then replace).

`write_output` is for a path a person names with `--output`: a device or FIFO there
(`/dev/stdout`, `/dev/null`, a pipe) is written in place, since it cannot be replaced.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], data: bytes | str, mode: int = 0o644,
                 *, durable: bool = True) -> None:
    """Replace `path` with `data` (str is written as UTF-8) at permission bits `mode`.

    The parent directory is created when missing. A symlink at `path` is replaced, not
    followed. On any error the temporary file is removed and `path` is left as it was.
    `durable=False` skips both fsyncs: still atomic for readers, but a crash may lose the
    write; only for scratch state that is rebuilt from scratch (the emulated fleet's images).
    """
    target = Path(path)
    directory = target.parent
    directory.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            if durable:
                os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    if durable:
        fsync_directory(directory)


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Flush a directory's entries (a rename in it) to disk; file systems that cannot are skipped."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):  # EINVAL on file systems without directory fsync
            os.fsync(fd)
    finally:
        os.close(fd)


def write_output(path: str | os.PathLike[str], data: bytes | str, mode: int = 0o644) -> None:
    """Write a person's `--output`: atomically for a file, in place for a device or FIFO."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISREG(info.st_mode) and not stat.S_ISDIR(info.st_mode):
        payload = data.encode("utf-8") if isinstance(data, str) else data
        with open(path, "wb") as handle:
            handle.write(payload)
        return
    write_atomic(path, data, mode)
