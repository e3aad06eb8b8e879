"""One way to write a file so that a reader sees the old content or the new, never half.

Every file sparkbase writes for itself or for a person (the lock, the proxy's `.env`, a
captured baseline, an audit report, the starter site, the lab's own state) goes through
`write_atomic`: a temporary file in the same directory (so the rename never crosses a file
system), the data, `fsync`, the final mode, `os.replace` over the
target, then `fsync` of the directory so the rename itself survives a power cut (pipx's
`pipx_metadata_file.py` does the same: temp file, then replace). A file rewritten for
someone else (the proxy's `.env`, read by the proxy's user) keeps its owner and group:
`owner=(uid, gid)` gives them to the temporary file before the rename, so the new file is
never, even for a moment, root's. `create_atomic` creates a
file only where nothing is (the starter site's new files): the same temporary file, then a
hard link in place of the rename, which fails on anything already there.

`write_output` is for a path a person names with `--output`: a device or FIFO there
(`/dev/stdout`, `/dev/null`, a pipe) is written in place, since it cannot be replaced.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], data: bytes | str, mode: int = 0o644,
                 *, durable: bool = True, owner: tuple[int, int] | None = None) -> None:
    """Replace `path` with `data` (str is written as UTF-8) at permission bits `mode`.

    The parent directory is created when missing. A symlink at `path` is replaced, not
    followed. On any error the temporary file is removed and `path` is left as it was.
    `durable=False` skips both fsyncs: still atomic for readers, but a crash may lose the
    write; only for scratch state that is rebuilt from scratch (the emulated fleet's images).
    `owner=(uid, gid)`: the new file's owner and group (PermissionError, nothing replaced,
    when this process may not give them).
    """
    target = Path(path)
    temp = _written_temp(target, data, mode, durable, owner)
    try:
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_directory(target.parent)


def _written_temp(target: Path, data: bytes | str, mode: int, durable: bool,
                  owner: tuple[int, int] | None = None) -> Path:
    """A temporary file beside `target` (its directory created when missing) holding `data`
    (str as UTF-8) at `mode` (and `owner`'s uid and gid), fsynced when `durable`; removed
    again when writing it fails."""
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    temp = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            if owner is not None:  # before the mode: a chown may clear set-id bits
                os.fchown(handle.fileno(), *owner)
            os.fchmod(handle.fileno(), mode)
            if durable:
                os.fsync(handle.fileno())
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp


def create_atomic(path: str | os.PathLike[str], data: bytes | str, mode: int = 0o644) -> bool:
    """Create `path` holding `data`, whole or not at all, only if nothing is there: False
    (and nothing written) when a file, directory or link (even a dangling one) already is.

    The data goes to a temporary file in the same directory (fsynced, at `mode`), which is
    then hard-linked to `path`: the link fails on anything already there, so a reader never
    sees a half-written file and an interrupted write leaves no file at `path`.
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    temp = _written_temp(target, payload, mode, durable=True)
    try:
        try:
            os.link(temp, target, follow_symlinks=False)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise
            return _create_exclusive(target, payload, mode)
    finally:
        temp.unlink(missing_ok=True)
    fsync_directory(target.parent)
    return True


#: what `link` says on a file system without hard links (vfat, some FUSE mounts)
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV})


def _create_exclusive(target: Path, payload: bytes, mode: int) -> bool:
    """`create_atomic` where hard links are not supported: created exclusively (never over
    anything, never through a link), then written; a crash mid-write can leave it short."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as handle:
        handle.write(payload)
        os.fchmod(handle.fileno(), mode)
        os.fsync(handle.fileno())
    return True


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


def write_output(path: str | os.PathLike[str], data: bytes | str) -> None:
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
    write_atomic(path, data, 0o644)
