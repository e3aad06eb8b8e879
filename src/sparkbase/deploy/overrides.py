"""The policy override log: one JSON line per override, appended, never rewritten.

`<site>/.sparkbase/overrides.log` is opened with O_APPEND and written with a single
`write`, so concurrent appends never interleave and earlier lines are never touched.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

OVERRIDE_FORMAT = 1
LOG_NAME = "overrides.log"


def log_path(site_root: Path) -> Path:
    """Where a site's override log lives."""
    return site_root / ".sparkbase" / LOG_NAME


def override_record(nodes: list[str], baseline: str, reason: str, breaches: list[str],
                    who: str | None = None, when: datetime | None = None) -> dict[str, Any]:
    """The JSON record of one override (who, when, nodes, baseline, reason, breaches)."""
    if who is None:
        user = os.environ.get("SUDO_USER") or getpass.getuser()
        who = f"{user}@{socket.gethostname()}"
    stamp = (when or datetime.now(UTC)).isoformat(timespec="seconds")
    return {"format": OVERRIDE_FORMAT, "who": who, "when": stamp, "nodes": sorted(nodes),
            "baseline": baseline, "reason": reason, "breaches": breaches}


def append_override(site_root: Path, record: dict[str, Any]) -> Path:
    """Append `record` as one line to the site's override log; return the log's path."""
    path = log_path(site_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return path
