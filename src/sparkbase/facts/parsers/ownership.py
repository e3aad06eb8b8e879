"""Parsers of what the ownership decisions compare: the node's record of what sparkbase
created, a swap header's UUID, a directory's entries (commands in `facts/state.py`)."""

from __future__ import annotations

import re

from sparkbase.facts.parsers.lines import node_lines
from sparkbase.facts.state import HASHES, MISSING, NOT_A_FILE
from sparkbase.model.ownership import OWNERSHIP_PATH, Entry, OwnershipRecord, RecordUnreadable, parse_record

_HEX_UUID = re.compile(r"^[0-9a-f]{32}$")
_SHA256_LINE = re.compile(r"^([0-9a-f]{64})  (.+)$")


def parse_owned(text: str) -> OwnershipRecord:
    """The record file's text (or the missing marker) -> the record; `RecordUnreadable` when
    the file is there but is not a record this sparkbase may use."""
    lines = node_lines(text)
    if lines == [MISSING]:
        return parse_record(None)
    if lines == [NOT_A_FILE]:
        raise RecordUnreadable(f"{OWNERSHIP_PATH} is a symbolic link or not a regular file: sparkbase "
                               "neither reads through it nor writes over it")
    return parse_record("\n".join(lines))


def parse_swap_uuid(text: str) -> str | None:
    """`od -An -tx1` of the 16 UUID bytes -> the UUID as mkswap prints it (None: no file, or
    no UUID in its header)."""
    digits = "".join(text.split())
    if not _HEX_UUID.match(digits) or digits == "0" * 32:
        return None
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def parse_directory_entries(text: str) -> tuple[Entry, ...] | None:
    """`find -printf '%y %P'` lines, the hashes marker, then `sha256sum` of the regular files
    -> the entries (None: no directory). A name that cannot be read back exactly (a newline
    in it, say) becomes an entry of unknown type, so it counts as not sparkbase's."""
    lines = node_lines(text)
    if not lines or lines == [MISSING]:
        return None
    split = lines.index(HASHES) if HASHES in lines else len(lines)
    hashes: dict[str, str] = {}
    for line in lines[split + 1 :]:
        match = _SHA256_LINE.match(line)
        if match:
            hashes[match.group(2)] = match.group(1)
    entries = []
    for line in lines[:split]:
        kind, sep, name = line.partition(" ")
        if not sep or len(kind) != 1:
            entries.append(Entry(line, "?"))
            continue
        entries.append(Entry(name, kind, hashes.get(name) if kind == "f" else None))
    return tuple(entries)
