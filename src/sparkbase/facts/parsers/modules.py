"""Kernel modules: `/proc/modules`, kmod's `modinfo`, `dkms status`, `/sys/module/*`."""

from __future__ import annotations

import re

from sparkbase.facts.model import DkmsEntry, DkmsStatus, ModuleInfo
from sparkbase.facts.parsers.lines import node_lines


def parse_proc_modules(text: str) -> frozenset[str]:
    """`/proc/modules` (or `ls -1 /sys/module`) → names of loaded modules."""
    return frozenset(line.split()[0] for line in node_lines(text) if line.strip())


def modinfo_fields(text: str) -> dict[str, str]:
    """kmod's `modinfo` output → field → value (the first of repeated fields such as `alias`).

    kmod wraps long values (`signature`, sometimes `sig_key`) onto continuation lines that
    start with whitespace (tabs in kmod ≥ 29, spaces before): they belong to the field above.
    """
    values: dict[str, str] = {}
    last: str | None = None
    for line in node_lines(text):
        if line[:1].isspace():
            if last is not None and line.strip():
                values[last] += line.strip()
            continue
        key, sep, value = line.partition(":")
        if not sep or not key or " " in key:
            last = None
            continue
        key = key.strip()
        if key in values:
            last = None  # a repeated field (alias, parm): keep the first
            continue
        values[key] = value.strip()
        last = key
    return values


def parse_modinfo(text: str, status: int) -> ModuleInfo:
    """`modinfo NAME` → the fields sparkbase reads; a failed modinfo is recorded as an error."""
    if status != 0:
        return ModuleInfo(error=" ".join(text.split()) or f"modinfo exit {status}")
    values = modinfo_fields(text)
    if "filename" not in values:
        return ModuleInfo(error=f"modinfo printed no filename: {' '.join(text.split())[:200]!r}")
    return ModuleInfo(
        filename=values.get("filename"),
        version=values.get("version") or None,
        vermagic=values.get("vermagic") or None,
        srcversion=values.get("srcversion") or None,
        signer=values.get("signer") or None,
        sig_key=values.get("sig_key") or None,
        sig_hashalgo=values.get("sig_hashalgo") or None,
    )


_DKMS_STATUSES = r"(?P<status>[a-z][a-z-]*)"
#: DKMS ≥ 2.8/3.x: `name/version, kernel, arch: status`, or `name/version: added`
_DKMS_NEW = re.compile(
    r"^(?P<name>[^/\s,]+)/(?P<version>[^,\s]+)(?:, (?P<kernel>[^,\s]+), (?P<arch>[^:\s]+))?: "
    + _DKMS_STATUSES + r"(?P<rest>.*)$"
)
#: DKMS 2.x: `name, version, kernel, arch: status`, or `name, version: added`
_DKMS_OLD = re.compile(
    r"^(?P<name>[^/\s,]+), (?P<version>[^,\s]+)(?:, (?P<kernel>[^,\s]+), (?P<arch>[^:\s]+))?: "
    + _DKMS_STATUSES + r"(?P<rest>.*)$"
)
#: a note DKMS appends to a status: `(original_module exists)`, `(WARNING! Diff …)`
_DKMS_NOTE = re.compile(r"^\s*\([^)]*\)\s*")


def parse_dkms_status(text: str) -> DkmsStatus:
    """`dkms status` in the DKMS 2 or 3 format → module lines, and noise kept apart.

    Real output mixes in lines that name no module (`Deprecated feature: REMAKE_INITRD`,
    `Error! Could not locate dkms.conf file.`, `File: … does not exist.` from another
    package's broken tree), and a warning printed on stderr can land in the middle of a
    status line (`installedDeprecated feature: …`), pushing its note (`(original_module
    exists)`) onto a line of its own.
    None of that is fatal: it is returned as noise.
    """
    entries: list[DkmsEntry] = []
    noise: list[str] = []
    for raw in node_lines(text):
        line = raw.strip()
        if not line:
            continue
        match = _DKMS_NEW.match(line) or _DKMS_OLD.match(line)
        if match is None:
            if entries and _DKMS_NOTE.fullmatch(line):
                continue  # the note of the line above, pushed down by a warning on stderr
            noise.append(line)
            continue
        entries.append(
            DkmsEntry(match["name"], match["version"], match["kernel"], match["arch"], match["status"])
        )
        rest = _DKMS_NOTE.sub("", match["rest"]).strip()
        if rest:
            noise.append(rest)
    return DkmsStatus(tuple(entries), tuple(noise))


def parse_module_attrs(text: str) -> dict[str, str]:
    """`grep -H . /sys/module/M/version /sys/module/M/srcversion…` → `M.version` → value."""
    found: dict[str, str] = {}
    for line in node_lines(text):
        match = re.match(r"^/sys/module/([^/]+)/(version|srcversion):(.*)$", line)
        if match:
            found[f"{match[1]}.{match[2]}"] = match[3].strip()
    return found
