"""The record of what sparkbase created on a node: one versioned JSON file written atomically
(`OWNERSHIP_PATH`), each item its kind, target, the identity of what sparkbase made (sha256 of
a file's content, the UUID it wrote into a swap header, the package version it installed),
the baseline and the time. The retire decisions on it are `policy.ownership`'s.

Besides what it created, the record holds the lines sparkbase edited in files it did not
create (kind `fstab-line`: the installer's /swap.img line marked `noauto`), with the line as
sparkbase found it (`original`) and as it wrote it (`written`), exact: the line is put back
only while it still reads exactly as sparkbase wrote it (`sparkbase.policy.fstab`).

It also holds the site files sparkbase took over and rewrote (kind `edited-file`: the site's
netplan file that configures the fabric, `fabric.netplan_file`), with the file's whole text as
sparkbase found it (`original`), its mode then (`mode`) and the sha256 of what sparkbase wrote
(`sha256`): the text is put back when the node moves to a baseline that does not manage the
fabric in that file, and only while the file is still exactly as sparkbase wrote it.

Record file format 3 (formats 1 and 2, without edited lines and files, are still read):

    {"format": 3, "items": [{"kind": "swap", "target": "/swap-64k.img",
      "uuid": "…", "baseline": "ds41f-7x-64k", "recorded_at": "2026-12-01T01:02:03Z"}, …]}
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: where each node keeps the record of what sparkbase created on it
OWNERSHIP_DIR = "/var/lib/sparkbase"
OWNERSHIP_PATH = f"{OWNERSHIP_DIR}/owned.json"
#: version of the record file's format; a newer one is never overwritten (2 added `fstab-line`,
#: 3 `edited-file` with its `mode`)
RECORD_FORMAT = 3
#: the longest text an `edited-file` item keeps (a netplan file sparkbase takes over is read
#: whole up to this size: `facts.parsers.fabric.MAX_NETPLAN_BYTES`)
MAX_EDITED_BYTES = 64 * 1024


class _RecordModel(BaseModel):
    """Record models: unknown keys are errors, values immutable; JSON types coerced (the file
    is JSON, so a list stands for a tuple and a string for a kind)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Kind(StrEnum):
    """What sort of thing sparkbase created."""

    FILE = "file"
    DIRECTORY = "directory"
    SWAP = "swap"
    PACKAGE = "package"
    DKMS = "dkms"
    #: a DKMS source tree sparkbase placed from a pinned tarball (target: /usr/src/NAME-VERSION;
    #: sha256: the tarball's); removed after `dkms remove` on move-back
    DKMS_SOURCE = "dkms-source"
    UNIT = "unit"
    #: a DGX OS package sparkbase purged (target: its name; version: the one it removed, which
    #: is put back on move-back while the node has not reinstalled it itself)
    PURGED = "purged"
    #: a vendor unit sparkbase masked (target: the unit; original: its UnitFileState before,
    #: put back on move-back while the unit is still masked)
    MASK = "mask"
    FSTAB_LINE = "fstab-line"  # a line of /etc/fstab sparkbase edited (target: its first field)
    #: a site file sparkbase took over and rewrote (target: its path; original: its whole text
    #: before; mode: its mode before; sha256: what sparkbase wrote)
    EDITED_FILE = "edited-file"


class OwnedItem(_RecordModel):
    """One thing sparkbase created on the node."""

    kind: Kind = Field(description="what sort of thing it is")
    target: str = Field(
        min_length=1, max_length=4096,
        description="path (file, directory, swap), package or unit name, or DKMS NAME/VERSION",
    )
    baseline: str = Field(max_length=200, description="the baseline whose apply created it")
    recorded_at: str = Field(max_length=64, description="when, ISO 8601 UTC")
    sha256: str | None = Field(default=None, description="sha256 of a file's content as written")
    uuid: str | None = Field(default=None, description="UUID sparkbase wrote into a swap header")
    version: str | None = Field(default=None, description="package version sparkbase installed")
    original: str | None = Field(
        default=None, max_length=MAX_EDITED_BYTES,
        description="an edited line, or an edited file's whole text, as sparkbase found it (exact)",
    )
    written: str | None = Field(
        default=None, max_length=4096, description="an edited line as sparkbase wrote it (exact)"
    )
    mode: int | None = Field(default=None, ge=0, le=0o7777,
                             description="an edited file's mode as sparkbase found it")


class OwnershipRecord(_RecordModel):
    """Everything sparkbase created on one node (the record file's content)."""

    format: int = Field(default=RECORD_FORMAT, description="record file format version")
    items: tuple[OwnedItem, ...] = Field(default=(), description="created items, by kind and target")

    def find(self, kind: Kind, target: str) -> OwnedItem | None:
        """The record of `target` as a `kind`, if sparkbase created it."""
        return next((item for item in self.items if item.kind == kind and item.target == target), None)

    def with_items(self, items: Iterable[OwnedItem]) -> OwnershipRecord:
        """The record with `items` added, each replacing any record of the same kind and target."""
        new = list(items)
        keys = {(item.kind, item.target) for item in new}
        kept = [item for item in self.items if (item.kind, item.target) not in keys]
        return OwnershipRecord(items=tuple(sorted([*kept, *new], key=_order)))

    def without(self, keys: Iterable[tuple[Kind, str]]) -> OwnershipRecord:
        """The record with the items of these (kind, target) keys forgotten."""
        drop = set(keys)
        return OwnershipRecord(items=tuple(i for i in self.items if (i.kind, i.target) not in drop))

    def to_json(self) -> str:
        """The record file's text (stable order, one item per line)."""
        lines = [json.dumps(item.model_dump(mode="json", exclude_none=True), sort_keys=True)
                 for item in self.items]
        body = ",\n  ".join(lines)
        return f'{{"format": {RECORD_FORMAT}, "items": [\n  {body}\n]}}\n' if lines else \
            f'{{"format": {RECORD_FORMAT}, "items": []}}\n'


def _order(item: OwnedItem) -> tuple[str, str]:
    return (item.kind.value, item.target)


class RecordUnreadable(ValueError):
    """The node's record file cannot be used: sparkbase neither trusts nor overwrites it."""


def parse_record(text: str | None) -> OwnershipRecord:
    """The record file's text (None: no file yet) -> the record; `RecordUnreadable` when the
    file is not a record this sparkbase understands (broken, foreign or a newer format)."""
    if text is None:
        return OwnershipRecord()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordUnreadable(f"{OWNERSHIP_PATH} is not JSON ({exc.msg} at line {exc.lineno})") from None
    except ValueError:
        raise RecordUnreadable(f"{OWNERSHIP_PATH} is not JSON") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("format"), int):
        raise RecordUnreadable(f"{OWNERSHIP_PATH} has no format version: not a sparkbase record")
    if raw["format"] > RECORD_FORMAT:
        raise RecordUnreadable(f"{OWNERSHIP_PATH} has format {raw['format']}, newer than this sparkbase "
                               f"understands ({RECORD_FORMAT}): upgrade sparkbase")
    try:
        return OwnershipRecord.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise RecordUnreadable(f"{OWNERSHIP_PATH}: {where}: {first['msg']}") from None


def now_utc() -> str:
    """The current time as the record writes it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Entry:
    """One entry found inside a directory: relative path, type (`f` regular file, `d`
    directory, `l` symlink, … as `find -printf %y`), sha256 for regular files."""

    name: str
    type: str
    sha256: str | None = None


def created(kind: Kind, target: str, baseline: str, when: str, *, sha256: str | None = None,
            uuid: str | None = None, version: str | None = None) -> OwnedItem:
    """The record of something sparkbase just created."""
    return OwnedItem(kind=kind, target=target, baseline=baseline, recorded_at=when, sha256=sha256,
                     uuid=uuid, version=version)


def edited_line(target: str, baseline: str, when: str, *, original: str, written: str) -> OwnedItem:
    """The record of an /etc/fstab line sparkbase just rewrote: as found, and as written."""
    return OwnedItem(kind=Kind.FSTAB_LINE, target=target, baseline=baseline, recorded_at=when,
                     original=original, written=written)


def edited_file(target: str, baseline: str, when: str, *, original: str, mode: int, sha256: str) -> OwnedItem:
    """The record of a site file sparkbase just took over: its text and mode as found, and the
    sha256 of what sparkbase wrote."""
    return OwnedItem(kind=Kind.EDITED_FILE, target=target, baseline=baseline, recorded_at=when,
                     original=original, mode=mode, sha256=sha256)
