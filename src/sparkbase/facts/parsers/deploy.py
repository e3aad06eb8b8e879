"""What plan and apply read besides the audit (`FactPlan`'s deploy fields, filled by
`deploy/reads.py`), with the commands of `facts/state.py`: each exits 0, so an answer that is
missing or unreadable is recorded in `errors` and read as nothing found."""

from __future__ import annotations

from typing import Any

from sparkbase.facts import state
from sparkbase.facts.model import InitramfsCopy, ModuleInfo
from sparkbase.facts.parsers import files as pf
from sparkbase.facts.parsers import ownership as po
from sparkbase.facts.parsers.memory import header_bytes, parse_swap_header_probes
from sparkbase.facts.parsers.modules import read_modinfo
from sparkbase.facts.parsers.packages import parse_showhold
from sparkbase.facts.parsers.units import parse_need_daemon_reload
from sparkbase.facts.script import FactPlan, FileRead, Read, Reader, cmd
from sparkbase.model.ownership import OwnershipRecord, RecordUnreadable

#: page sizes a swap file's header is probed for (4 KiB, 16 KiB, 64 KiB kernels)
SWAP_PAGE_SIZES = (4096, 16384, 65536)


def staged_files(plan: FactPlan) -> list[FileRead]:
    """The file an apply notes the reboot it staged in."""
    return [("staged", (plan.staged_path,))] if plan.staged_path is not None else []


def sections(plan: FactPlan) -> list[Read]:
    """The sections plan and apply read besides the audit's."""
    out: list[Read] = []
    out += [(f"state:{path}", state.file_state_command(path)) for path in plan.file_states]
    out += [(f"text:{path}", state.file_text_command(path)) for path in plan.file_texts]
    out += [(f"newer:{path}:{than}", state.newer_command(path, than)) for path, than in plan.newer]
    out += [(f"reload:{unit}", state.need_reload_command(unit)) for unit in plan.need_reload]
    out += [(f"modinfo-k:{kernel}:{module}", cmd("modinfo", "-k", kernel, module))
            for kernel, module in plan.kernel_modinfo]
    out += [(f"dkms-source:{name}/{version}", state.dkms_source_command(name, version))
            for name, version in plan.dkms_sources]
    if plan.held:
        out.append(("held", "apt-mark showhold 2>/dev/null; true"))
    for path in plan.swap_files:
        out.append((f"swapstat:{path}", cmd("stat", "-c", "%s %a %F", "--", path)))
        out += [(f"swaphdr:{size}:{path}", header_bytes(path, size)) for size in SWAP_PAGE_SIZES]
        out.append((f"swapuuid:{path}", state.swap_uuid_command(path)))
    out += [(f"initramfs:{release}:{path}", state.initramfs_file_command(release, path))
            for release, path in plan.initramfs]
    out += [(f"entries:{path}", state.dir_entries_command(path)) for path in plan.dir_entries]
    if plan.ownership:
        out.append(("ownership", state.ownership_command()))
    return out


def facts(r: Reader, plan: FactPlan) -> dict[str, Any]:
    """The `NodeFacts` fields of the deploy reads (DKMS's registrations: `modules.facts`)."""
    record, problem = _ownership(r) if plan.ownership else (None, None)
    nothing = InitramfsCopy(False, problem="no answer")
    registered = {(entry.name, entry.version) for entry in r.facts["dkms"]}
    sources = {}
    for name, version in plan.dkms_sources:
        found = r.text(f"dkms-source:{name}/{version}")
        sources[(name, version)] = pf.parse_dkms_source(found or "", (name, version) in registered)
    return {
        "file_states": {path: r.parse(f"state:{path}", pf.parse_file_info) for path in plan.file_states},
        "file_texts": {path: r.parse(f"text:{path}", pf.parse_file_text) for path in plan.file_texts},
        "newer": {(path, than): pf.parse_newer(r.text(f"newer:{path}:{than}") or "", path)
                  for path, than in plan.newer},
        "need_reload": {unit: parse_need_daemon_reload(r.text(f"reload:{unit}") or "", unit)
                        for unit in plan.need_reload},
        "kernel_modinfo": {(kernel, module): read_modinfo(r.sections, f"modinfo-k:{kernel}:{module}")
                           or ModuleInfo(error="no modinfo answer")
                           for kernel, module in plan.kernel_modinfo},
        "dkms_sources": sources,
        "held": tuple(r.parse("held", parse_showhold) or ()) if plan.held else (),
        "swap_files": {path: _swap_file(r, path) for path in plan.swap_files},
        "swap_uuids": {path: r.parse(f"swapuuid:{path}", po.parse_swap_uuid) for path in plan.swap_files},
        "initramfs": {(release, path): r.parse(f"initramfs:{release}:{path}", pf.parse_initramfs_copy)
                      or nothing for release, path in plan.initramfs},
        "dir_entries": {path: r.parse(f"entries:{path}", po.parse_directory_entries)
                        for path in plan.dir_entries},
        "ownership": record,
        "ownership_problem": problem,
        "staged": (r.parse("staged", pf.parse_staged, quiet=True) or ()) if plan.staged_path else (),
    }


def _ownership(r: Reader) -> tuple[OwnershipRecord | None, str | None]:
    """The ownership record, or why it cannot be used (never guessed: a record that cannot
    be read is no empty record)."""
    text = r.text("ownership")
    if text is None:
        return None, r.errors.get("ownership", "no answer")
    try:
        return po.parse_owned(text), None
    except RecordUnreadable as exc:
        return None, str(exc)


def _swap_file(r: Reader, path: str) -> dict[str, Any] | None:
    """Size, mode, header page size and kind (read without following a link) of a swap
    file; None when it does not exist."""
    stat = r.sections.get(f"swapstat:{path}")
    if stat is None or stat.status != 0:
        return None
    words = stat.output.split(maxsplit=2)
    if len(words) < 2 or not words[0].isdigit():
        return None
    probes = {size: probe.output for size in SWAP_PAGE_SIZES
              if (probe := r.sections.get(f"swaphdr:{size}:{path}"))}
    kind = words[2].strip() if len(words) == 3 else "regular file"
    return {
        "size": int(words[0]),
        "header_page_size": parse_swap_header_probes(probes),
        "mode": int(words[1], 8) if words[1].isdigit() else None,
        # `stat` never follows a link there: "symbolic link", "directory", "regular file", ...
        "kind": "regular file" if kind == "regular empty file" else kind,
    }
