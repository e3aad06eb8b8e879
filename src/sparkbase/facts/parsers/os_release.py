"""The OS image: `/etc/dgx-release` and the DGX OS version it names (the `os.release` check).
`/etc/fstab`: `memory.py`; the stamp, links and `sha256sum` answers: `files.py`."""

from __future__ import annotations

import shlex

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
