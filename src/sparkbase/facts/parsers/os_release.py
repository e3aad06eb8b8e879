"""Files under /etc and what sparkbase writes: `/etc/dgx-release`, `/etc/fstab`, the stamp,
`sha256sum` answers (NCCL's `KEY=value` files: `nccl_conf.py`)."""

from __future__ import annotations

import json
import re
import shlex

from sparkbase.facts.model import FstabEntry
from sparkbase.facts.parsers.lines import node_lines


def parse_os_release(text: str) -> dict[str, str]:
    """/etc/dgx-release (os-release style `KEY="value"`) → KEY → value.

    DGX OS 7.x writes the factory build (`DGX_SWBUILD_VERSION="7.2.3"`) and appends
    `DGX_OTA_VERSION`/`DGX_OTA_DATE` lines at every over-the-air update, so a later
    line wins.
    """
    values: dict[str, str] = {}
    for line in node_lines(text):
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        words = shlex.split(value) if value else [""]
        values[key.strip()] = " ".join(words)
    return values


def dgx_os_version(release: dict[str, str]) -> str | None:
    """The DGX OS version a node runs: the last OTA update's, else the installed build's."""
    return release.get("DGX_OTA_VERSION") or release.get("DGX_SWBUILD_VERSION") or None


def parse_fstab(text: str) -> tuple[FstabEntry, ...]:
    """/etc/fstab → its entries (comments and blank lines skipped; fields by whitespace)."""
    entries: list[FstabEntry] = []
    for line in node_lines(text):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) < 3:
            raise ValueError(f"unreadable fstab line: {line!r}")
        entries.append(FstabEntry(words[0], words[1], words[2], words[3] if len(words) > 3 else "defaults"))
    return tuple(entries)


def parse_stamp(text: str) -> dict[str, object]:
    """The stamp JSON sparkbase writes on a converged node."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("the stamp is not a JSON object")
    return data


def parse_links(text: str) -> dict[str, str]:
    """`PATH<TAB>TARGET` lines (the fact script's link section) → path → where it points."""
    links: dict[str, str] = {}
    for line in node_lines(text):
        path, tab, target = line.partition("\t")
        if tab and path.startswith("/"):
            links[path] = target
    return links


def parse_sha256sum(text: str) -> dict[str, str | None]:
    """`sha256sum P1 P2…` (errors merged in) → path → hash, None for unreadable files."""
    hashes: dict[str, str | None] = {}
    for line in node_lines(text):
        match = re.match(r"^\\?([0-9a-f]{64}) [ *](.+)$", line)
        if match:
            hashes[match[2]] = match[1]
            continue
        missing = re.match(r"^sha256sum: (.+?): ", line)
        if missing:
            hashes[missing[1]] = None
    return hashes
