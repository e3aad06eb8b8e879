"""pyinfra facts for ownership: the node's record of what sparkbase created, and the
identities a retire step compares with it (a swap header's UUID, a directory's entries).

Each is a command that always exits 0 plus a pure parser (`parse_*`, tested with no host).
"""

from __future__ import annotations

import re
import shlex

from pyinfra.api.facts import FactBase

from sparkbase.policy.ownership import OWNERSHIP_PATH, Entry, OwnershipRecord, RecordUnreadable, parse_record

#: printed by a fact command when the thing it reads does not exist
ABSENT = "__sparkbase_absent__"
#: printed for the record's path when a symbolic link or something not a regular file is there
NOT_A_FILE = "__sparkbase_not_a_file__"
#: separates a directory's listing from the sha256 of its files
HASHES = "__sparkbase_hashes__"
#: the swap header (format 1) keeps its 16-byte UUID at this offset
SWAP_UUID_OFFSET = 1036
_HEX_UUID = re.compile(r"^[0-9a-f]{32}$")
_SHA256_LINE = re.compile(r"^([0-9a-f]{64})  (.+)$")


def parse_owned(lines: list[str]) -> OwnershipRecord:
    """The record file's lines (or the absent marker) -> the record; `RecordUnreadable` when
    the file is there but is not a record this sparkbase may use."""
    if lines == [ABSENT]:
        return parse_record(None)
    if lines == [NOT_A_FILE]:
        raise RecordUnreadable(f"{OWNERSHIP_PATH} is a symbolic link or not a regular file: sparkbase "
                               "neither reads through it nor writes over it")
    return parse_record("\n".join(lines))


class OwnedRecord(FactBase[OwnershipRecord]):
    """What sparkbase recorded creating on the node (`/var/lib/sparkbase/owned.json`)."""

    def command(self) -> str:
        p = shlex.quote(OWNERSHIP_PATH)
        return (f"if [ -L {p} ] || {{ [ -e {p} ] && [ ! -f {p} ]; }}; then echo {NOT_A_FILE}; "
                f"elif [ -f {p} ]; then cat {p}; else echo {ABSENT}; fi")

    def process(self, output: list[str]) -> OwnershipRecord:
        return parse_owned(output)


def parse_swap_uuid(lines: list[str]) -> str | None:
    """`od -An -tx1` of the 16 UUID bytes -> the UUID as mkswap prints it (None: no file, or
    no UUID in its header)."""
    digits = "".join("".join(lines).split())
    if not _HEX_UUID.match(digits) or digits == "0" * 32:
        return None
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


class SwapUuid(FactBase[str | None]):
    """The UUID in a swap file's header (mkswap writes one), or None."""

    def command(self, path: str) -> str:
        p = shlex.quote(path)
        return (f"if [ -f {p} ] && [ ! -L {p} ]; then "
                f"dd if={p} bs=1 skip={SWAP_UUID_OFFSET} count=16 2>/dev/null | od -An -tx1; fi")

    def process(self, output: list[str]) -> str | None:
        return parse_swap_uuid(output)


def parse_directory_entries(lines: list[str]) -> list[Entry] | None:
    """`find -printf '%y %P'` lines, the hashes marker, then `sha256sum` of the regular files
    -> the entries (None: no directory). A name that cannot be read back exactly (a newline
    in it, say) becomes an entry of unknown type, so it counts as not sparkbase's."""
    if not lines or lines == [ABSENT]:
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
    return entries


class DirectoryEntries(FactBase[list[Entry] | None]):
    """Everything inside a directory (never following links), with the sha256 of each
    regular file; None when there is no directory."""

    def command(self, path: str) -> str:
        p = shlex.quote(path)
        return (f"if [ -d {p} ] && [ ! -L {p} ]; then cd {p} && find . -mindepth 1 -printf '%y %P\\n'; "
                f"echo {HASHES}; find . -mindepth 1 -type f -printf '%P\\0' | xargs -0 -r sha256sum --; "
                f"else echo {ABSENT}; fi")

    def process(self, output: list[str]) -> list[Entry] | None:
        return parse_directory_entries(output)
