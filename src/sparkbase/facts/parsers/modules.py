"""Kernel modules: `/proc/modules`, kmod's `modinfo`, `dkms status`, `/sys/module/*`."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from sparkbase.facts.model import DkmsEntry, DkmsStatus, ModuleInfo
from sparkbase.facts.parsers.lines import node_lines, parse_single_line
from sparkbase.facts.script import FactPlan, FileRead, Read, Reader, Sections, cmd, fixed

#: kernels (and lab nodes) without /proc/modules: the same first column from /sys/module
#: (`[` is built into sh, so this costs no process when /proc/modules exists)
MODULES_SYS_COMMAND = "[ -e /proc/modules ] || " + cmd("ls", "-1", "/sys/module")


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
#: a note DKMS appends to a state: ` (original_module exists)`, ` (WARNING! Diff between
#: built and installed module!)` (dkms `module_status_built_extra`), or a warning after a comma
_DKMS_NOTE = re.compile(r"\s*(?:\((?P<paren>[^()]*)\)|,\s*(?P<comma>WARNING![^(),]*))")


def _dkms_notes(rest: str) -> tuple[tuple[str, ...], str]:
    """The notes at the start of what follows a state, and what is left after them."""
    notes: list[str] = []
    while (note := _DKMS_NOTE.match(rest)) is not None:
        notes.append((note["paren"] if note["paren"] is not None else note["comma"]).strip())
        rest = rest[note.end():]
    return tuple(notes), rest.strip()


def parse_dkms_status(text: str) -> DkmsStatus:
    """`dkms status` in the DKMS 2 or 3 format → module lines with the notes DKMS appends
    to the state, and noise kept apart.

    A note is kept on its entry: `(original_module exists)` is harmless, but `(WARNING! Diff
    between built and installed module!)` says the module in /lib/modules is not the one DKMS
    built, so the entry does not count as installed (`DkmsEntry.installed`).
    Real output mixes in lines that name no module (`Deprecated feature: REMAKE_INITRD`,
    `Error! Could not locate dkms.conf file.`, `File: … does not exist.` from another
    package's broken tree), and a warning printed on stderr can land in the middle of a
    status line (`installedDeprecated feature: …`), pushing its notes (`(original_module
    exists)`) onto a line of their own: they still belong to the entry above.
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
            notes, left = _dkms_notes(line)
            if entries and notes and not left:  # the notes of the line above, pushed down
                entries[-1] = replace(entries[-1], notes=(*entries[-1].notes, *notes))
                continue
            noise.append(line)
            continue
        notes, rest = _dkms_notes(match["rest"])
        entries.append(DkmsEntry(match["name"], match["version"], match["kernel"], match["arch"],
                                 match["status"], notes))
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


#: /proc/modules
proc_files = fixed(("modules", ("/proc/modules",)))


def param_files(plan: FactPlan) -> list[FileRead]:
    """The module parameters the plan names."""
    return [(f"param:{module}.{param}", (f"/sys/module/{module}/parameters/{param}",))
            for module, param in plan.module_params]


#: the loaded modules from /sys/module, where /proc/modules is missing
sys_sections = fixed(("modules-sys", MODULES_SYS_COMMAND))


def dkms_sections(plan: FactPlan) -> list[Read]:
    """`dkms status`, and `modinfo` of the memory saver's and the fan control's modules."""
    asked = plan.memory_saver_module or plan.fan_module or plan.dkms_status
    return [*([("dkms", cmd("dkms", "status"))] if asked else []),
            *([("modinfo", cmd("modinfo", plan.memory_saver_module))] if plan.memory_saver_module else []),
            *([("modinfo-fan", cmd("modinfo", plan.fan_module))] if plan.fan_module else [])]


def read_modinfo(sections: Sections, name: str) -> ModuleInfo | None:
    """`modinfo` of one module (its error text when kmod failed), None when not asked."""
    section = sections.get(name)
    if section is None:
        return None
    return parse_modinfo(section.output + (section.stderr if section.status else ""), section.status)


def _dkms(sections: Sections) -> DkmsStatus:
    """`dkms status`: module lines from stdout, whatever the exit status (a broken tree of
    another package makes dkms fail); its stderr and a failure are noise, never fatal."""
    section = sections.get("dkms")
    if section is None:
        return DkmsStatus(noise=("dkms status: no answer",))
    found = parse_dkms_status(section.output)
    extra = [line.strip() for line in node_lines(section.stderr) if line.strip()]
    if section.status != 0:
        extra.append(f"dkms status exit {section.status}")
    return DkmsStatus(found.entries, (*found.noise, *extra))


def facts(r: Reader, plan: FactPlan) -> dict[str, Any]:
    """The modules' `NodeFacts` fields: loaded modules, parameters, DKMS, and the memory
    saver's and fan control's modules."""
    asked = plan.memory_saver_module or plan.fan_module or plan.dkms_status
    dkms = _dkms(r.sections) if asked else DkmsStatus()
    # the loaded modules: `modules-sys` when /proc/modules was missing and /sys/module answered
    fallback = r.sections.get("modules-sys")
    sys_listed = fallback is not None and fallback.status == 0 and fallback.output.strip()
    return {
        "modules": r.parse("modules-sys" if sys_listed else "modules", parse_proc_modules) or frozenset(),
        "module_params": {f"{module}.{param}": r.parse(f"param:{module}.{param}", parse_single_line,
                                                       quiet=True) for module, param in plan.module_params},
        "dkms": dkms.entries,
        "dkms_noise": dkms.noise,
        "memory_saver": read_modinfo(r.sections, "modinfo") if plan.memory_saver_module else None,
        "fan_control": read_modinfo(r.sections, "modinfo-fan") if plan.fan_module else None,
    }
