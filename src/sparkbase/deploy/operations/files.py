"""File operations: exact content and mode (temp file, then rename), operator uploads, directories."""

from __future__ import annotations

import difflib
import posixpath
from collections.abc import Generator
from io import BytesIO
from typing import Any

from pyinfra import logger
from pyinfra.api.command import StringCommand
from pyinfra.api.exceptions import OperationError
from pyinfra.api.operation import operation
from pyinfra.context import state

from sparkbase.deploy.node import node_facts
from sparkbase.deploy.operations.base import (
    atomic_upload,
    cmd,
    guard,
    noop,
    refuse_unless_writable,
    remove_leftovers,
)
from sparkbase.deploy.operations.record import remember
from sparkbase.facts.model import Found
from sparkbase.model.ownership import Kind, created, now_utc


def _diff(path: str, old: str | None, new: str) -> list[str]:
    return list(
        difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"{path} (node)" if old is not None else "/dev/null",
            tofile=f"{path} (baseline)",
        )
    )


def _leftover(path: str, leftover: bool) -> Any:
    """Remove the half-done uploads an interrupted run left beside `path`."""
    if leftover:
        yield remove_leftovers(path)


def _content_in_place(
    path: str, current: Any, sha256: str, mode: int, in_place: str
) -> Generator[Any, None, bool]:
    """When `path` already holds the content (`sha256`): clear an interrupted run's leftover,
    fix the mode (or record `in_place` as the no-op reason), and answer True."""
    if current is None or current.sha256 != sha256:
        return False
    yield from _leftover(path, current.leftover)
    if current.mode != mode:
        yield StringCommand(f"{guard(path)}; {cmd('chmod', f'{mode:o}', '--', path).get_raw_value()}")
    elif not current.leftover:
        noop(in_place)
    return True


def _record_written(path: str, sha256: str, baseline: str, existed: bool) -> Any:
    """Record the file as sparkbase's when it created it (update the record when it rewrote one
    the record already holds)."""
    item = created(Kind.FILE, path, baseline, now_utc(), sha256=sha256)
    yield from remember(item, only_if_recorded=existed)


@operation()
def file(path: str, content: str, mode: int, sha256: str, secret: bool = False, baseline: str = "") -> Any:
    """`path` holds exactly `content` with `mode`; written to a temp file, then renamed (and,
    once written, recorded as sparkbase's when it created the file). A symbolic link, a
    directory or anything else that is not a regular file at `path` fails the operation
    (`refusal`): nothing is written or recorded."""
    facts = node_facts()
    current = facts.file_states[path]
    refuse_unless_writable(path, current)
    if (yield from _content_in_place(path, current, sha256, mode,
                                     f"{path} is identical (sha256 {sha256[:12]}, mode {mode:o})")):
        return
    if state.config.DIFF and not secret:
        old = facts.file_texts[path] if current is not None else None
        for line in _diff(path, old, content):
            logger.info("    %s", line.rstrip("\n"))
    if current is None:
        yield cmd("mkdir", "-p", "--", posixpath.dirname(path))
    yield from atomic_upload(BytesIO(content.encode()), path, mode, sha256)
    yield from _record_written(path, sha256, baseline, existed=current is not None)


@operation()
def upload(path: str, local: str, mode: int, sha256: str, baseline: str = "") -> Any:
    """Operator file `local` lands at `path` with `mode`; never diffed or printed.

    Used for the MOK key pair: the temp file sits in its own 0700 directory inside the (0700)
    target directory, and its mode is set before the rename, so the key is never readable by
    others, even briefly. What is not a regular file at `path` is refused, as by `file`.
    """
    current = node_facts().file_states[path]
    refuse_unless_writable(path, current)
    if (yield from _content_in_place(path, current, sha256, mode, f"{path} is in place (mode {mode:o})")):
        return
    yield from atomic_upload(local, path, mode, sha256)
    yield from _record_written(path, sha256, baseline, existed=current is not None)


@operation()
def directory(path: str, mode: int, baseline: str = "") -> Any:
    """A directory owned by root with exactly `mode` (recorded as sparkbase's when it created it)."""
    info = node_facts().file_states[path]
    if info is not None and info.found is not Found.DIRECTORY:
        raise OperationError(f"{path} exists and is not a directory (a symbolic link, or a file): sparkbase "
                             "never follows a link; nothing was written. Move it away, then apply again")
    if info is not None and info.mode == mode:
        noop(f"{path} exists with mode {mode:o}")
        return
    yield cmd("install", "-d", "-m", f"{mode:o}", "--", path)
    if info is None:
        yield from remember(created(Kind.DIRECTORY, path, baseline, now_utc()))
