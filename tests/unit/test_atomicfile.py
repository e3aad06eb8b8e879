"""The one atomic-write helper: replace, mode, no temp left, old content kept on failure."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkbase import atomicfile
from sparkbase.atomicfile import write_atomic, write_output


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize(
    ("data", "mode", "expected"),
    [
        (b"two", 0o640, b"two"),
        ("text é\n", 0o600, "text é\n".encode()),
        (b"", 0o755, b""),
    ],
)
def test_replaces_the_file_with_its_mode(
    tmp_path: Path, data: bytes | str, mode: int, expected: bytes
) -> None:
    target = tmp_path / "dir" / "file"  # the parent is created
    write_atomic(target, b"one", 0o644)
    write_atomic(target, data, mode)
    assert target.read_bytes() == expected
    assert target.stat().st_mode & 0o7777 == mode
    assert _names(target.parent) == ["file"]


def test_a_symlink_is_replaced_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("keep")
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    write_atomic(link, "new")
    assert not link.is_symlink() and link.read_text() == "new"
    assert elsewhere.read_text() == "keep"


def test_a_failed_write_leaves_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "file"
    target.write_text("old")

    def broken_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="Input/output"):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert _names(tmp_path) == ["file"]


def test_durable_writes_fsync_the_file_and_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    write_atomic(tmp_path / "file", "x")
    assert len(synced) == 2
    assert Path(synced[0]).parent == tmp_path and Path(synced[0]).name.startswith(".file.")  # the temp file
    assert synced[1] == str(tmp_path)  # then the directory holding the rename
    synced.clear()
    write_atomic(tmp_path / "scratch", "x", durable=False)
    assert synced == []


def test_a_directory_without_fsync_support_is_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_directory_fsync(fd: int) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "fsync", no_directory_fsync)
    atomicfile.fsync_directory(tmp_path)  # EINVAL is what such file systems answer
    atomicfile.fsync_directory(tmp_path / "missing")


def test_an_output_file_is_written_atomically(tmp_path: Path) -> None:
    target = tmp_path / "audit.prom"
    target.write_text("old")
    write_output(target, "new\n")
    assert target.read_text() == "new\n"
    assert _names(tmp_path) == ["audit.prom"]


def test_an_output_device_or_fifo_is_written_in_place(tmp_path: Path) -> None:
    write_output(Path("/dev/null"), "discarded\n")
    assert Path("/dev/null").exists() and not Path("/dev/null").is_file()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        write_output(fifo, "through the pipe\n")
        assert os.read(reader, 100) == b"through the pipe\n"
    finally:
        os.close(reader)
    assert _names(tmp_path) == ["pipe"]


def test_create_writes_a_new_file_whole_with_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "dir" / "new"
    assert atomicfile.create_atomic(target, "data\n", 0o640)
    assert target.read_text() == "data\n"
    assert target.stat().st_mode & 0o7777 == 0o640
    assert _names(target.parent) == ["new"]


@pytest.mark.parametrize("kind", ["file", "directory", "dangling link", "link to a file"])
def test_create_never_touches_what_is_already_there(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "there"
    outside = tmp_path / "outside"
    if kind == "file":
        target.write_text("theirs")
    elif kind == "directory":
        target.mkdir()
    elif kind == "dangling link":
        target.symlink_to(outside)
    else:
        outside.write_text("theirs")
        target.symlink_to(outside)
    assert not atomicfile.create_atomic(target, "ours")
    assert sorted(_names(tmp_path)) == sorted(["there", *(["outside"] if kind == "link to a file" else [])])
    if kind == "file":
        assert target.read_text() == "theirs"
    if kind == "dangling link":
        assert target.is_symlink() and not outside.exists()
    if kind == "link to a file":
        assert outside.read_text() == "theirs"


def test_an_interrupted_create_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        atomicfile.create_atomic(tmp_path / "new", "data")
    assert _names(tmp_path) == []


def test_create_without_hard_links_still_never_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(*_args: object, **_kwargs: object) -> None:
        raise OSError(1, "Operation not permitted")  # EPERM, as vfat says

    monkeypatch.setattr(os, "link", no_links)
    assert atomicfile.create_atomic(tmp_path / "new", "data", 0o600)
    assert (tmp_path / "new").read_text() == "data"
    assert (tmp_path / "new").stat().st_mode & 0o7777 == 0o600
    assert not atomicfile.create_atomic(tmp_path / "new", "other")
    assert (tmp_path / "new").read_text() == "data"
    assert _names(tmp_path) == ["new"]


def _require_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("giving a file to another user needs root: run this test as root")


def test_the_owner_and_group_are_given_before_the_rename(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A file rewritten for another user (the proxy's .env) is theirs from the moment it
    appears: the temporary file is chowned before the rename, and the set-gid bit asked
    for survives the chown."""
    _require_root()
    target = tmp_path / "file"
    seen: list[tuple[int, int, int]] = []
    real_replace = os.replace

    def replace(src: str, dst: str) -> None:
        info = os.stat(src)
        seen.append((info.st_uid, info.st_gid, info.st_mode & 0o7777))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    write_atomic(target, "data", 0o2640, owner=(4321, 4322))
    info = target.stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o7777) == (4321, 4322, 0o2640)
    assert seen == [(4321, 4322, 0o2640)]


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory an ordinary user can reach (pytest's own tree is root's alone)."""
    directory = Path(tempfile.mkdtemp(prefix="sparkbase-test-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


def test_an_owner_that_cannot_be_given_leaves_the_old_file(open_dir: Path) -> None:
    """In a child that dropped root, giving the file to someone else fails: nothing replaced,
    no temporary file left."""
    _require_root()
    target = open_dir / "file"
    target.write_text("old")
    os.chown(open_dir, 4321, 4321)
    pid = os.fork()
    if pid == 0:  # the child: an ordinary user who may write the directory
        code = 1
        try:
            os.setgid(4321)
            os.setuid(4321)
            try:
                write_atomic(target, "new", 0o644, owner=(0, 0))
            except PermissionError as exc:
                code = 0 if exc.errno == errno.EPERM else 2  # the chown, not the way in (EACCES)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert target.read_text() == "old"
    assert _names(open_dir) == ["file"]
