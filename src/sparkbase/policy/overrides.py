"""The one override log: every overridden refusal, one versioned JSON line each, never rewritten.

`<site>/.sparkbase/overrides.log` holds a record per decision a person took against the
tool's advice: a preflight launched anyway (`preflight-override`), a contract-breaking
baseline applied (`apply-override`), and a lane switch (`lane-switch`, overridden or
qualified: every switch is a decision worth keeping). One schema (`LOG_FORMAT` 3) and one
writer (`append_record`) for all of them:

- the log is opened append-only without following links (O_APPEND|O_CREAT|O_NOFOLLOW,
  O_NONBLOCK so a FIFO planted there is refused rather than waited on), a symlinked
  `.sparkbase` directory or a log that is not a regular file is refused;
- each record is one `write` followed by `fsync`, so concurrent appends never interleave
  and earlier lines are never touched;
- a caller that must record only what it did (a lane switch records after the `.env` is
  written) opens the log first (`open_log`: a log that cannot be used refuses before
  anything changes) and appends through the open writer afterwards.

Nothing in sparkbase reads the log back: it is for people (`jq`, `grep`).
"""

from __future__ import annotations

import contextlib
import errno
import getpass
import json
import os
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from sparkbase.text import visible

#: version of the record schema below; bump on any change a reader could notice
#: (3: `from`, the lane a switch left)
LOG_FORMAT = 3
LOG_DIR = ".sparkbase"
LOG_NAME = "overrides.log"
#: the longest override reason kept (a reason is a sentence, not a document)
MAX_REASON_CHARS = 500


class RecordKind(StrEnum):
    """What was overridden."""

    PREFLIGHT = "preflight-override"
    APPLY = "apply-override"
    LANE_SWITCH = "lane-switch"


class ReasonError(ValueError):
    """An override reason a person could not read later (empty, invisible, too long)."""


class OverrideLogError(OSError):
    """The override log cannot be written safely (a link, not a regular file, I/O error)."""


@dataclass(frozen=True)
class OverrideRecord:
    """One overridden refusal: who, when, what kind, why, and what was refused."""

    kind: RecordKind
    who: str
    when: str
    reason: str
    lane: str | None = None
    baseline: str | None = None
    nodes: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    #: for a lane switch: the lane the proxy served before (`lane` is the one it serves after)
    switched_from: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as it is written (format 3)."""
        return {
            "format": LOG_FORMAT,
            "kind": str(self.kind),
            "who": self.who,
            "when": self.when,
            "reason": self.reason,
            "lane": self.lane,
            "baseline": self.baseline,
            "nodes": list(self.nodes),
            "refusals": list(self.refusals),
            "from": self.switched_from,
        }


def log_path(site_root: Path) -> Path:
    """Where a site's override log lives."""
    return site_root / LOG_DIR / LOG_NAME


def checked_reason(raw: str) -> str:
    """The reason as recorded: hidden characters dropped, whitespace collapsed; `ReasonError`
    when nothing visible is left or it is longer than `MAX_REASON_CHARS`."""
    reason = " ".join(visible(raw).split())
    if not reason:
        raise ReasonError("the reason has no visible text; say why, in words a person can read later")
    if len(reason) > MAX_REASON_CHARS:
        raise ReasonError(f"the reason is {len(reason)} characters; at most {MAX_REASON_CHARS}")
    return reason


def current_user() -> str:
    """`user@host` of whoever runs sparkbase (the sudo caller when run through sudo)."""
    try:
        user = os.environ.get("SUDO_USER") or getpass.getuser()
    except (KeyError, OSError):
        user = f"uid:{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def new_record(
    kind: RecordKind,
    reason: str,
    *,
    lane: str | None = None,
    baseline: str | None = None,
    nodes: list[str] | None = None,
    refusals: list[str] | None = None,
    switched_from: str | None = None,
    who: str | None = None,
    when: datetime | None = None,
) -> OverrideRecord:
    """A record for an override happening now; `reason` is checked (`checked_reason`)."""
    return OverrideRecord(
        kind=kind,
        who=who or current_user(),
        when=(when or datetime.now(UTC)).isoformat(timespec="seconds"),
        reason=checked_reason(reason),
        lane=lane,
        baseline=baseline,
        nodes=sorted(nodes or []),
        refusals=list(refusals or []),
        switched_from=switched_from,
    )


def append_record(log: Path, record: OverrideRecord) -> None:
    """Append `record` as one line to `log`, creating it (and its directory) if needed.

    Neither the directory's last component nor the log may be a symbolic link, and the log
    must be a regular file: `OverrideLogError` otherwise, with nothing written.
    """
    with open_log(log) as writer:
        writer.append(record)


class LogWriter:
    """An override log opened for appending (`open_log`)."""

    def __init__(self, log: Path, fd: int) -> None:
        self.log = log
        self._fd = fd

    def append(self, record: OverrideRecord) -> None:
        """Write `record` as one line and fsync it; `OverrideLogError` when it cannot be."""
        line = (json.dumps(record.to_json(), sort_keys=True, ensure_ascii=True) + "\n").encode()
        try:
            written = os.write(self._fd, line)
            if written != len(line):
                raise OverrideLogError(f"{self.log}: short write ({written} of {len(line)} bytes)")
            os.fsync(self._fd)
        except OverrideLogError:
            raise
        except OSError as exc:
            raise OverrideLogError(f"{self.log}: cannot write the override log: {exc.strerror}") from None


@contextlib.contextmanager
def open_log(log: Path) -> Iterator[LogWriter]:
    """`log` open for appending, created (and its directory) if needed; `OverrideLogError`,
    with nothing written, for a link at the directory's last component or the log, or a log
    that is not a regular file."""
    directory = _open_directory(log.parent)
    try:
        try:
            fd = os.open(
                log.name,
                os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                0o640,
                dir_fd=directory,
            )
        except OSError as exc:
            raise OverrideLogError(f"{log}: cannot open the override log safely: {_why(exc)}") from None
    finally:
        os.close(directory)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OverrideLogError(f"{log}: the override log is not a regular file; nothing was written")
        yield LogWriter(log, fd)
    finally:
        os.close(fd)


def _open_directory(directory: Path) -> int:
    """A descriptor of `directory`, created if missing; a symbolic link there is refused."""
    try:
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    except FileExistsError:
        pass  # a non-directory there: reported by the open below
    except OSError as exc:
        raise OverrideLogError(f"{directory}: cannot create the log directory: {exc.strerror}") from None
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise OverrideLogError(f"{directory}: cannot use the log directory: {_why(exc)}") from None


def _why(exc: OSError) -> str:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return "it is a symbolic link or not a directory (refused: the log never follows links)"
    if exc.errno == errno.ENXIO:
        return "it is a FIFO or device, not a regular file"
    return exc.strerror or str(exc)

