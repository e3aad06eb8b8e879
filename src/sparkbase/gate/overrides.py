"""The override log: one JSON line per overridden refusal, appended and fsynced, never rewritten."""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
from pathlib import Path

OVERRIDE_FORMAT = 1
DEFAULT_LOG = Path(".sparkbase") / "overrides.log"


def override_record(
    lane: str, reason: str, failures: list[str], now: float | None = None
) -> dict[str, object]:
    """The record written for one override."""
    moment = dt.datetime.fromtimestamp(
        now if now is not None else dt.datetime.now(dt.UTC).timestamp(), dt.UTC
    )
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid:{os.getuid()}"
    return {
        "format": OVERRIDE_FORMAT,
        "time": moment.isoformat(),
        "user": user,
        "lane": lane,
        "reason": reason,
        "failures": failures,
    }


def append_override(log: Path, record: dict[str, object]) -> None:
    """Append one JSON line to `log` (O_APPEND, fsync); create it and its folder if needed."""
    log.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
