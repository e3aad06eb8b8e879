"""Write the starter site into a directory, owning only what it wrote.

A directory with anything in it is refused unless `force`; even then a file is only
replaced when `init` recorded writing it (`.sparkbase/starter.json`, its SHA-256) and it is
unchanged since. Anything else already there is kept and reported.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path, PurePosixPath

from sparkbase.atomicfile import create_atomic, write_atomic

#: what init records about the files it wrote (relative path -> SHA-256 of the content)
RECORD = PurePosixPath(".sparkbase/starter.json")
RECORD_FORMAT = 1


class InitRefused(Exception):
    """The target cannot take a starter site (not a directory, or not empty without force)."""


class Outcome(StrEnum):
    """What happened to one starter file."""

    WRITTEN = "written"  # did not exist; created
    REPLACED = "replaced"  # init wrote it before and it was unchanged; now the current starter
    SAME = "same"  # already holds exactly the starter's content
    KEPT = "kept"  # something not written by init (or changed since) is there: left alone


@dataclass
class InitReport:
    """Per starter file, what happened."""

    outcomes: dict[PurePosixPath, Outcome] = field(default_factory=dict)

    def with_outcome(self, outcome: Outcome) -> list[PurePosixPath]:
        """The files that had `outcome`, in path order."""
        return sorted(path for path, got in self.outcomes.items() if got is outcome)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_record(target: Path) -> dict[str, str]:
    """The files init recorded writing into `target` (none when no readable record)."""
    path = target / RECORD
    if path.is_symlink() or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        return {}
    return {str(k): str(v) for k, v in files.items()}


def _place(path: Path, data: bytes, recorded: str | None) -> Outcome:
    if create_atomic(path, data):
        return Outcome.WRITTEN
    if path.is_symlink() or not path.is_file():
        return Outcome.KEPT
    current = path.read_bytes()
    if current == data:
        return Outcome.SAME
    if recorded is not None and _digest(current) == recorded:
        write_atomic(path, data)
        return Outcome.REPLACED
    return Outcome.KEPT


def write_starter(target: Path, files: dict[PurePosixPath, bytes], force: bool) -> InitReport:
    """Write `files` under `target` (created if missing); see the module docstring."""
    if target.exists() and not target.is_dir():
        raise InitRefused(f"{target} exists and is not a directory")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise InitRefused(
            f"{target} is not empty: nothing written (--force adds the starter files that are "
            "missing; it never overwrites a file init did not write)"
        )
    target.mkdir(parents=True, exist_ok=True)
    recorded = read_record(target)
    report = InitReport()
    owned = dict(recorded)
    for rel, data in sorted(files.items()):
        outcome = _place(target / rel, data, recorded.get(str(rel)))
        report.outcomes[rel] = outcome
        if outcome in (Outcome.WRITTEN, Outcome.REPLACED):
            owned[str(rel)] = _digest(data)
    record = {"format": RECORD_FORMAT, "files": dict(sorted(owned.items()))}
    write_atomic(target / RECORD, (json.dumps(record, indent=2) + "\n").encode())
    return report
