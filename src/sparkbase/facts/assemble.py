"""Sections of one answer → `NodeFacts` (pure: the parsers applied, failures recorded)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sparkbase.facts import parsers as p
from sparkbase.facts.model import (
    DkmsStatus,
    Gid,
    GpuFacts,
    GrubBoot,
    InitramfsCopy,
    ModuleInfo,
    MokCertificate,
    NodeFacts,
    SecureBoot,
)
from sparkbase.facts.parsers import files as pf
from sparkbase.facts.parsers import ownership as po
from sparkbase.facts.parsers.fabric import parse_netplan_listing
from sparkbase.facts.parsers.lines import node_lines
from sparkbase.facts.runtime import RUNTIME_SECTION, RuntimeFacts, read_runtime
from sparkbase.facts.script import (
    GID_TABLE_SECTION,
    LINKS_SECTION,
    NETPLAN_SECTION,
    SWAP_PAGE_SIZES,
    FactPlan,
    Sections,
    expand_files,
    file_reads,
    modules_section,
)
from sparkbase.model.host import NVME_COALESCING_FEATURE
from sparkbase.policy.ownership import OwnershipRecord, RecordUnreadable

T = TypeVar("T")


class _Reader:
    """Applies parsers to sections, collecting what failed instead of raising."""

    def __init__(self, sections: Sections) -> None:
        self.sections = sections
        self.errors: dict[str, str] = {}

    def text(self, name: str, *, quiet: bool = False) -> str | None:
        """The output of a section that exited 0, else None (and an error unless quiet)."""
        section = self.sections.get(name)
        if section is None:
            self.errors[name] = "no answer (the script stopped before this section)"
            return None
        if section.status != 0:
            if not quiet:
                detail = " ".join((section.output + section.stderr).split())[:200] or "no output"
                self.errors[name] = f"exit {section.status}: {detail}"
            return None
        return section.output

    def parse(self, name: str, parser: Callable[[str], T], *, quiet: bool = False) -> T | None:
        """`parser(output)`, or None with the reason recorded."""
        text = self.text(name, quiet=quiet)
        if text is None:
            return None
        try:
            return parser(text)
        except (ValueError, KeyError, TypeError) as exc:
            self.errors[name] = f"unreadable output: {exc}"
            return None


def assemble(node: str, plan: FactPlan, sections: Sections, elapsed: float = 0.0) -> NodeFacts:
    """Typed facts of `node` from the sections its fact script printed."""
    sections = expand_files(sections, file_reads(plan))
    r = _Reader(sections)
    runtime = _runtime(r, plan)
    uname = r.parse("uname", p.parse_uname_rm)
    gpu_section = sections.get("nvidia-smi")
    gpu = (
        p.parse_nvidia_smi_query(gpu_section.output, gpu_section.status)
        if gpu_section is not None
        else GpuFacts(error="no answer")
    )
    units_all = [*plan.units, *([plan.slice_unit] if plan.slice_unit else [])]
    shown = r.parse("units", lambda text: p.parse_systemctl_show(text, units_all)) or {}
    units = {unit: p.unit_state(props) for unit, props in shown.items() if unit in plan.units}
    slice_text = shown.get(plan.slice_unit or "", {}).get("AllowedCPUs") if plan.slice_unit else None
    slice_cpus = r.parse("units", lambda _text: p.parse_cpu_list(slice_text or "")) if slice_text else None
    saver = _modinfo(sections, "modinfo") if plan.memory_saver_module else None
    fan = _modinfo(sections, "modinfo-fan") if plan.fan_module else None
    gids: dict[str, Gid] = {}
    for hca in plan.hcas:
        gid = r.parse(f"gid:{hca}", p.parse_single_line, quiet=True)
        gid_type = r.parse(f"gidtype:{hca}", p.parse_single_line, quiet=True)
        gids[hca] = Gid(gid=gid, type=gid_type)
    headers: dict[str, int | None] = {}
    for path in plan.swap_paths:
        at_4k = r.text(f"swaphdr4k:{path}", quiet=True) or ""
        at_64k = r.text(f"swaphdr64k:{path}", quiet=True) or ""
        headers[path] = p.parse_swap_header(at_4k, at_64k)
    stamp_section = sections.get("stamp")
    stamp = r.parse("stamp", p.parse_stamp, quiet=True) if stamp_section else None
    dpkg = sections.get("dpkg")
    dkms_asked = plan.memory_saver_module or plan.fan_module or plan.dkms_status
    dkms = _dkms(sections) if dkms_asked else DkmsStatus()
    links = (r.parse(LINKS_SECTION, p.parse_links, quiet=True) or {}) if sections.get(LINKS_SECTION) else {}
    hashes = {path: None if path in links else sha for path, sha in _hashes(sections, plan).items()}
    return NodeFacts(
        node=node,
        kernel_release=uname[0] if uname else None,
        machine=uname[1] if uname else None,
        page_size=r.parse("pagesize", p.parse_page_size),
        cmdline=r.parse("cmdline", p.parse_cmdline) or (),
        fast_cpus=r.parse("cpuinfo", p.parse_fast_cpus) or (),
        thp=r.parse("thp", p.parse_thp),
        sysctls={key: r.parse(f"sysctl:{key}", p.parse_single_line) for key in plan.sysctls},
        gpu=gpu,
        modules=_modules(r, sections),
        module_params={
            f"{module}.{param}": r.parse(f"param:{module}.{param}", p.parse_single_line, quiet=True)
            for module, param in plan.module_params
        },
        dkms=dkms.entries,
        dkms_noise=dkms.noise,
        memory_saver=saver,
        fan_control=fan,
        secure_boot=_secure_boot(r, sections),
        mok_certificates=(r.parse("mok-enrolled", p.parse_mok_certificates) or ()) if plan.mok_keys else (),
        mok_pending=_mok_pending(sections) if plan.mok_keys else (),
        swaps=(r.parse("swapon", p.parse_swapon_show) or ()) if plan.swap_paths or plan.swapon else (),
        swap_header_page_size=headers,
        default_target=r.parse("default-target", p.parse_single_line),
        efi_boot=r.parse("efibootmgr", p.parse_efibootmgr) if plan.efi_boot else None,
        drm_drivers=(r.parse("drm-drivers", p.parse_drm_drivers) or {}) if plan.drm_drivers else {},
        drm_clients=(r.parse("drm-clients", p.parse_drm_clients) or {}) if plan.drm_drivers else {},
        console=r.parse("console", p.parse_console_mode) if plan.console_mode else None,
        watchdog=(r.parse("watchdog", p.parse_manager_properties) or {}) if plan.watchdog else {},
        units=units,
        slice_allowed_cpus=slice_cpus,
        file_sha256=hashes,
        links=links,
        nccl_library_sha256=hashes.get(plan.nccl_library_path or ""),
        nccl_conf=r.text("nccl-conf", quiet=True) if plan.nccl_conf_path not in links else None,
        stamp=stamp if plan.stamp_path not in links else None,
        interfaces=r.parse("ip-addr", p.parse_ip_addr_json) or {},
        rdma_devices=r.parse("rdma", p.parse_ls, quiet=True) or (),
        gids=gids,
        gid_table=(r.parse(GID_TABLE_SECTION, p.parse_gid_table) or ()) if plan.gid_tables else (),
        governors=r.parse("governors", p.parse_governors, quiet=True) or {},
        nvme_coalescing=r.parse("nvme-coalescing", _coalescing) if plan.nvme_coalescing else None,
        packages=p.parse_dpkg_query(dpkg.output) if dpkg is not None else {},
        grub=_grub(r, plan),
        fstab=r.parse("fstab", p.parse_fstab) if not plan.core_only else None,
        dgx_release=r.parse("dgx-release", p.parse_os_release, quiet=True) if not plan.core_only else None,
        nvidia_modules=r.parse("nvidia-modules", p.parse_module_attrs, quiet=True) or {},
        errors=r.errors,
        elapsed_seconds=elapsed,
        serving=runtime.processes,
        containers=runtime.containers,
        container_errors=runtime.container_errors,
        netplan_files=r.parse(NETPLAN_SECTION, parse_netplan_listing) if plan.netplan_files else None,
        **_deploy_reads(r, plan, dkms),
    )


def _deploy_reads(r: _Reader, plan: FactPlan, dkms: DkmsStatus) -> dict[str, Any]:
    """The NodeFacts fields of `FactPlan`'s deploy reads (each command exits 0: an answer
    that is missing or unreadable is recorded in `errors` and read as nothing found)."""
    record, problem = _ownership(r) if plan.ownership else (None, None)
    nothing = InitramfsCopy(False, problem="no answer")
    registered = {(entry.name, entry.version) for entry in dkms.entries}
    sources = {}
    for name, version in plan.dkms_sources:
        found = r.text(f"dkms-source:{name}/{version}")
        sources[(name, version)] = pf.parse_dkms_source(found or "", (name, version) in registered)
    return {
        "file_states": {path: r.parse(f"state:{path}", pf.parse_file_info) for path in plan.file_states},
        "file_texts": {path: r.parse(f"text:{path}", pf.parse_file_text) for path in plan.file_texts},
        "newer": {(path, than): pf.parse_newer(r.text(f"newer:{path}:{than}") or "", path)
                  for path, than in plan.newer},
        "need_reload": {unit: p.parse_need_daemon_reload(r.text(f"reload:{unit}") or "", unit)
                        for unit in plan.need_reload},
        "kernel_modinfo": {(kernel, module): _modinfo(r.sections, f"modinfo-k:{kernel}:{module}")
                           or ModuleInfo(error="no modinfo answer")
                           for kernel, module in plan.kernel_modinfo},
        "dkms_sources": sources,
        "held": tuple(r.parse("held", p.parse_showhold) or ()) if plan.held else (),
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


def _ownership(r: _Reader) -> tuple[OwnershipRecord | None, str | None]:
    """The ownership record, or why it cannot be used (never guessed: a record that cannot
    be read is no empty record)."""
    text = r.text("ownership")
    if text is None:
        return None, r.errors.get("ownership", "no answer")
    try:
        return po.parse_owned(text), None
    except RecordUnreadable as exc:
        return None, str(exc)


def _swap_file(r: _Reader, path: str) -> dict[str, Any] | None:
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
        "header_page_size": p.parse_swap_header_probes(probes),
        "mode": int(words[1], 8) if words[1].isdigit() else None,
        # `stat` never follows a link there: "symbolic link", "directory", "regular file", ...
        "kind": "regular file" if kind == "regular empty file" else kind,
    }


def _coalescing(text: str) -> int:
    """NVMe feature 0x08 as `nvme get-feature` prints it."""
    return p.parse_nvme_feature(text, NVME_COALESCING_FEATURE)


def _modinfo(sections: Sections, name: str) -> ModuleInfo | None:
    """`modinfo` of one module (its error text when kmod failed), None when not asked."""
    section = sections.get(name)
    if section is None:
        return None
    return p.parse_modinfo(section.output + (section.stderr if section.status else ""), section.status)


def _runtime(r: _Reader, plan: FactPlan) -> RuntimeFacts:
    """The serving processes and containers of the runtime section (none asked: none)."""
    nothing = RuntimeFacts((), {}, {})
    if not (plan.serving_matches or plan.serving_containers) or plan.core_only:
        return nothing
    return r.parse(RUNTIME_SECTION, lambda text: read_runtime(text, plan.serving_containers)) or nothing


def _hashes(sections: Sections, plan: FactPlan) -> dict[str, str | None]:
    """Every hashed path → sha256, None when the node could not read it."""
    section = sections.get("sha256")
    found = p.parse_sha256sum(section.output) if section is not None else {}
    return {path: found.get(path) for path in plan.hashed_paths}


def _mok_pending(sections: Sections) -> tuple[MokCertificate, ...]:
    """`mokutil --list-new`: the imported certificates not yet enrolled (it exits 1 and says
    `MokNew is empty` when there are none; an unreadable answer counts as none)."""
    section = sections.get("mok-new")
    if section is None or section.status != 0:
        return ()
    try:
        return p.parse_mok_certificates(section.output)
    except ValueError:
        return ()


def _dkms(sections: Sections) -> DkmsStatus:
    """`dkms status`: module lines from stdout, whatever the exit status (a broken tree of
    another package makes dkms fail); its stderr and a failure are noise, never fatal."""
    section = sections.get("dkms")
    if section is None:
        return DkmsStatus(noise=("dkms status: no answer",))
    found = p.parse_dkms_status(section.output)
    extra = [line.strip() for line in node_lines(section.stderr) if line.strip()]
    if section.status != 0:
        extra.append(f"dkms status exit {section.status}")
    return DkmsStatus(found.entries, (*found.noise, *extra))


def _secure_boot(r: _Reader, sections: Sections) -> SecureBoot | None:
    """`mokutil --sb-state`: mokutil says `EFI variables are not supported…` on stderr and
    fails, which is an answer too; anything else unreadable is an error."""
    section = sections.get("sb-state")
    if section is not None:
        try:
            return p.parse_sb_state(section.output + section.stderr)
        except ValueError:
            pass
    return r.parse("sb-state", p.parse_sb_state)


def _modules(r: _Reader, sections: Sections) -> frozenset[str]:
    """Loaded modules from /proc/modules, else from `ls /sys/module` (`modules-sys`)."""
    return r.parse(modules_section(sections), p.parse_proc_modules) or frozenset()


def _grub(r: _Reader, plan: FactPlan) -> GrubBoot | None:
    """GRUB's boot choice; no grubenv is an empty environment, as GRUB reads it."""
    if plan.core_only:
        return None
    cfg = r.text("grub-cfg")
    if cfg is None:
        return None
    env = r.text("grubenv", quiet=True) or ""
    try:
        return p.parse_grub(cfg, env)
    except ValueError as exc:
        r.errors["grub-cfg"] = f"unreadable output: {exc}"
        return None
