"""The one-round-trip fact script: what to ask a node, as one POSIX sh script, and its answer.

`plan_for` turns a baseline (and the files rendered for the node) into a `FactPlan`: the
exact paths, sysctls, units, HCAs and packages to read. `build_script` turns a plan into
sections, each a command built from separately quoted words, wrapped so that the output
reads `<marker> BEGIN name`, the command's output (stderr merged), `<marker> END name rc`.
`split_sections` is the pure inverse.

The marker carries a random nonce, and no process on the node can learn it: the script's
text (on the remote `sh -c` command line, which every process can read in
`/proc/PID/cmdline`) holds no marker; the script reads it from its stdin first
(`MARKER_FROM_STDIN`), sent down the SSH channel, into a shell variable that is never
exported. So neither a file's content nor a tool's output can forge a section boundary,
and an answer with a section twice or a section the script never prints is refused
(`SectionError`) rather than read.
"""

from __future__ import annotations

import fnmatch
import re
import secrets
import shlex
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkbase.facts import state
from sparkbase.facts.parsers.driver import GPU_QUERY
from sparkbase.facts.parsers.fabric import MAX_NETPLAN_BYTES, MAX_NETPLAN_FILES
from sparkbase.facts.parsers.lines import node_lines
from sparkbase.model.host import GOVERNOR_UNIT, NVME_COALESCING_FEATURE, NVME_COALESCING_UNIT, NVME_DEVICE
from sparkbase.model.memory import BOOT_SWAP_UNIT
from sparkbase.model.netplan import NETPLAN_DIRS

if TYPE_CHECKING:
    from sparkbase.model.baseline import Baseline

RDMA_CLASS = "/sys/class/infiniband"
THP_PATH = "/sys/kernel/mm/transparent_hugepage/enabled"
GOVERNOR_GLOB = "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"
DISPLAY_MANAGER = "display-manager.service"
DPKG_FORMAT = "${Package}\t${Version}\t${db:Status-Abbrev}\n"
GRUB_CFG = "/boot/grub/grub.cfg"
GRUBENV = "/boot/grub/grubenv"
FSTAB = "/etc/fstab"
DGX_RELEASE = "/etc/dgx-release"
#: version and source hash of every loaded NVIDIA module (`MODULE_VERSION` modules only)
NVIDIA_MODULE_GLOBS = ("/sys/module/nvidia*/version", "/sys/module/nvidia*/srcversion")
#: sysctls every node reports whatever its baseline sets (the fleet must agree on them)
FLEET_SYSCTLS = ("vm.min_free_kbytes",)
#: the one section that reads every plain file
FILES_SECTION = "files"


@dataclass(frozen=True)
class FactPlan:
    """Exactly what to read on one node, derived from the baseline it should carry."""

    sysctls: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    slice_unit: str | None = None
    hashed_paths: tuple[str, ...] = ()
    nccl_library_path: str | None = None
    nccl_conf_path: str = "/etc/nccl.conf"
    stamp_path: str = "/etc/sparkbase/stamp.json"
    hcas: tuple[str, ...] = ()
    gid_index: int = 3
    module_params: tuple[tuple[str, str], ...] = ()  # (module, parameter)
    memory_saver_module: str | None = None
    fan_module: str | None = None  # the fan-control DKMS module (`modinfo`)
    swap_paths: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    mok_keys: bool = True  # list enrolled MOK keys (a pinned key, or a module to sign)
    core_only: bool = False  # only kernel release, machine and page size (triggers' evidence)
    #: first match strings of the lanes whose serving processes to read (facts/runtime.py)
    serving_matches: tuple[str, ...] = ()
    #: names of the containers the lanes run as (asked of docker with the processes' own)
    serving_containers: tuple[str, ...] = ()
    #: a short GPU load the GPU reading is taken under (argv; empty: read the GPU as it is).
    #: At launch nothing serves yet and an idle GB10 is never judged latched; a lane may name
    #: a probe so the launch gate sees the clock under load (policy/gpu_clock.py)
    gpu_probe: tuple[str, ...] = ()
    #: seconds the probe runs before nvidia-smi reads (it is stopped right after)
    gpu_probe_seconds: float = 2.0
    #: read NVMe feature 0x08 (interrupt coalescing) of the node's first controller
    nvme_coalescing: bool = False
    #: read every filled GID entry of every RDMA port, with its type and netdev (adopt finds
    #: the fabric from it: `GID_TABLE_COMMAND`)
    gid_tables: bool = False
    #: list every netplan file with its exact text (`NETPLAN_FILES_COMMAND`): the fabric is
    #: managed in a site's own netplan file (`fabric.netplan_file`), or `adopt` asks
    netplan_files: bool = False
    #: read the UEFI boot order (`efibootmgr`)
    efi_boot: bool = False
    #: read the driver of every DRM card (`DRM_DRIVERS_COMMAND`)
    drm_drivers: bool = False
    #: read the active virtual console's mode (`CONSOLE_COMMAND`)
    console_mode: bool = False
    #: read the systemd manager's watchdog properties
    watchdog: bool = False
    # --- what plan and apply read besides (`deploy/reads.py` fills these from the steps) ---
    #: paths whose state is read: what is there, never following a link (`state.file_state_command`)
    file_states: tuple[str, ...] = ()
    #: paths whose text is read, regular files only (`state.file_text_command`)
    file_texts: tuple[str, ...] = ()
    #: (path, than): whether `path` was modified after `than`
    newer: tuple[tuple[str, str], ...] = ()
    #: units whose `NeedDaemonReload` is read
    need_reload: tuple[str, ...] = ()
    #: (kernel, module): `modinfo -k KERNEL MODULE` of a module built for a target kernel
    kernel_modinfo: tuple[tuple[str, str], ...] = ()
    #: (name, version): the DKMS source tree /usr/src/NAME-VERSION and its stamp
    dkms_sources: tuple[tuple[str, str], ...] = ()
    #: read `dkms status` (every module) even when no DKMS module is judged
    dkms_status: bool = False
    #: read the packages marked hold (`apt-mark showhold`)
    held: bool = False
    #: read the active swap areas even when no swap file is judged
    swapon: bool = False
    #: swap files whose size, mode, kind, header page size and header UUID are read
    swap_files: tuple[str, ...] = ()
    #: (release, path): the sha256 of `path` as `release`'s initramfs packs it
    initramfs: tuple[tuple[str, str], ...] = ()
    #: directories whose entries (and each file's sha256) are read
    dir_entries: tuple[str, ...] = ()
    #: read the node's ownership record
    ownership: bool = False
    #: the file an apply notes the reboot it staged in (read when set)
    staged_path: str | None = None


def plan_for(baseline: Baseline, file_paths: Sequence[str], stamp_path: str,
             foreign_packages: Sequence[str] = ()) -> FactPlan:
    """The facts a node must report to be judged against `baseline` (and whether the
    `foreign_packages` other baselines pin are installed)."""
    host = baseline.host
    units = [DISPLAY_MANAGER, *host.disable_services]
    if host.fan_control is not None:
        units.append(host.fan_control.service)
    if host.cpu_governor is not None:
        units.append(GOVERNOR_UNIT)
    units.append(NVME_COALESCING_UNIT)
    if baseline.memory.swap_by_page_size:
        units.append(BOOT_SWAP_UNIT)
    params = [("nvidia_drm", "modeset"), ("nvidia_drm", "fbdev")]
    saver = baseline.memory.memory_saver
    if saver is not None:
        params.append((saver.module, saver.packing_parameter))
    swap = baseline.memory.swap
    fan = host.fan_control
    purge = [host.nvidia_drm.purge] if host.nvidia_drm.purge is not None else []
    factory = baseline.memory.factory_swap
    # the installer's swap file is read in swapon when the audit judges whether it is active
    judged = factory is not None and (factory.fstab == "as-installed" or factory.swapoff
                                      or baseline.memory.swap_by_page_size)
    library = baseline.nccl.library.path  # None: built into the lane's image, nothing on the host
    hashed = [*([library] if library is not None else []),
              *(path for path in file_paths if path != stamp_path)]
    return FactPlan(
        sysctls=tuple(sorted({*baseline.memory.sysctls, *FLEET_SYSCTLS})),
        units=tuple(dict.fromkeys(units)),
        slice_unit=baseline.cpuset.slice,
        hashed_paths=tuple(dict.fromkeys(hashed)),
        nccl_library_path=baseline.nccl.library.path,
        stamp_path=stamp_path,
        nvme_coalescing=True,
        hcas=tuple(baseline.fabric.hca_names()),
        gid_index=baseline.fabric.gid_index,
        module_params=tuple(params),
        memory_saver_module=saver.module if saver is not None else None,
        fan_module=fan.module if fan is not None else None,
        swap_paths=tuple(path for path in (swap.path if swap is not None else None,
                                           factory.path if factory is not None and judged else None)
                         if path),
        packages=tuple(dict.fromkeys([*(pin.name for pin in baseline.packages()), *purge,
                                      *foreign_packages])),
        # the enrolled certificates judge the DKMS modules' signatures even with no pinned key
        mok_keys=baseline.secure_boot.mok_fingerprint is not None or bool(baseline.dkms_builds()),
        efi_boot=host.uefi_first is not None,
        drm_drivers=host.drm_driver is not None,
        console_mode=host.console_text,
        watchdog=host.watchdog is not None,
    )


#: the section naming which of the files sparkbase writes are symbolic links
LINKS_SECTION = "links"


def written_paths(plan: FactPlan) -> tuple[str, ...]:
    """The paths sparkbase writes whose content the audit reads or hashes: the rendered files
    and the stamp (not the NCCL library, a package's file, which may well be a link)."""
    paths = [path for path in plan.hashed_paths if path != plan.nccl_library_path]
    return tuple(dict.fromkeys([*paths, plan.stamp_path]))


def links_command(paths: Sequence[str]) -> str:
    """Shell text printing `PATH<TAB>TARGET` for each of `paths` that is a symbolic link
    (builtins only, and one `readlink` per link found): the audit never judges a file
    sparkbase writes by the content of whatever a link points to, nor shows it."""
    words = " ".join(shlex.quote(path) for path in paths)
    line = r"""printf '%s\t%s\n' "$f" "$(readlink -- "$f")";"""
    return f'for f in {words}; do [ -L "$f" ] && {line} done; true'


def sysctl_path(key: str) -> str:
    """`vm.min_free_kbytes` → `/proc/sys/vm/min_free_kbytes`."""
    return "/proc/sys/" + key.replace(".", "/")


def gid_paths(hca: str, index: int) -> tuple[str, str]:
    """The GID text and GID type files of port 1 of `hca` at `index`."""
    port = f"{RDMA_CLASS}/{hca}/ports/1"
    return f"{port}/gids/{index}", f"{port}/gid_attrs/types/{index}"


def gpu_command(plan: FactPlan) -> str:
    """One nvidia-smi reading of clock, power, load and clock-event reasons; under the plan's
    load probe when it names one (the probe runs in the background, bounded by `timeout`,
    its output discarded, and is stopped once the reading is taken; the section's status is
    nvidia-smi's)."""
    query = _cmd("nvidia-smi", "--query-gpu=" + ",".join(GPU_QUERY), "--format=csv,noheader,nounits")
    if not plan.gpu_probe:
        return query
    settle = f"{plan.gpu_probe_seconds:g}"
    bound = f"{plan.gpu_probe_seconds + 30:g}"
    probe = _cmd("timeout", bound, *plan.gpu_probe)
    return (
        f"{probe} >/dev/null 2>&1 & p=$!; sleep {settle}; {query}; s=$?; "
        "kill $p 2>/dev/null; wait $p 2>/dev/null; (exit $s)"
    )


def _cmd(*argv: str) -> str:
    """One command line from separately quoted words."""
    return " ".join(shlex.quote(arg) for arg in argv)


def header_bytes(path: str, end: int) -> str:
    """The 10 bytes ending at `end` in `path`, non-alphanumerics shown as dots."""
    return _cmd("dd", f"if={path}", "bs=1", f"skip={end - 10}", "count=10", "status=none") + (
        " | " + _cmd("tr", "-c", "A-Z0-9", ".")
    )


def file_reads(plan: FactPlan) -> list[tuple[str, tuple[str, ...]]]:
    """(section name, paths) of every plain file the plan reads; a path with `*` or `[`
    is a shell glob, and that section keeps grep's `FILE:line` form (several files)."""
    if plan.core_only:
        return []
    out: list[tuple[str, tuple[str, ...]]] = [
        ("cmdline", ("/proc/cmdline",)),
        ("cpuinfo", ("/proc/cpuinfo",)),
        ("thp", (THP_PATH,)),
        ("modules", ("/proc/modules",)),
        ("governors", (GOVERNOR_GLOB,)),
        ("stamp", (plan.stamp_path,)),
        ("nccl-conf", (plan.nccl_conf_path,)),
        ("grub-cfg", (GRUB_CFG,)),
        ("grubenv", (GRUBENV,)),
        ("fstab", (FSTAB,)),
        ("dgx-release", (DGX_RELEASE,)),
        ("nvidia-modules", NVIDIA_MODULE_GLOBS),
    ]
    out += [(f"sysctl:{key}", (sysctl_path(key),)) for key in plan.sysctls]
    if plan.staged_path is not None:
        out.append(("staged", (plan.staged_path,)))
    out += [
        (f"param:{module}.{param}", (f"/sys/module/{module}/parameters/{param}",))
        for module, param in plan.module_params
    ]
    for hca in plan.hcas:
        gid, gid_type = gid_paths(hca, plan.gid_index)
        out += [(f"gid:{hca}", (gid,)), (f"gidtype:{hca}", (gid_type,))]
    return out


def _is_glob(path: str) -> bool:
    return any(char in path for char in "*?[")


def _files_command(reads: list[tuple[str, tuple[str, ...]]]) -> str:
    """One grep over every file (globs left for the shell to expand)."""
    words = [shlex.quote(path) if not _is_glob(path) else path for _, paths in reads for path in paths]
    return _cmd("grep", "-aH", "", "--") + " " + " ".join(words)


def sections(plan: FactPlan) -> list[tuple[str, str]]:
    """(section name, command line) of every section the script prints, in order."""
    out: list[tuple[str, str]] = [
        ("uname", _cmd("uname", "-r", "-m")),
        ("pagesize", _cmd("getconf", "PAGESIZE")),
    ]
    if plan.core_only:
        return out + deploy_sections(plan)
    out += [
        ("nvidia-smi", gpu_command(plan)),
        (FILES_SECTION, _files_command(file_reads(plan))),
        ("modules-sys", MODULES_SYS_COMMAND),
        ("sb-state", _cmd("mokutil", "--sb-state")),
        ("default-target", _cmd("systemctl", "get-default")),
        ("ip-addr", _cmd("ip", "-j", "addr", "show")),
        ("rdma", _cmd("ls", "-1", RDMA_CLASS)),
    ]
    written = written_paths(plan)
    if written:
        out.append((LINKS_SECTION, links_command(written)))
    if plan.mok_keys:
        out.append(("mok-enrolled", _cmd("mokutil", "--list-enrolled")))
        # imported, not yet enrolled (exits 1, `MokNew is empty`, when none is)
        out.append(("mok-new", _cmd("mokutil", "--list-new")))
    units = [*plan.units, *([plan.slice_unit] if plan.slice_unit else [])]
    if units:
        out.append(
            (
                "units",
                _cmd(
                    "systemctl",
                    "show",
                    "-p",
                    "UnitFileState",
                    "-p",
                    "ActiveState",
                    "-p",
                    "AllowedCPUs",
                    *units,
                ),
            )
        )
    if plan.hashed_paths:
        out.append(("sha256", _cmd("sha256sum", "--", *plan.hashed_paths)))
    if plan.memory_saver_module or plan.fan_module or plan.dkms_status:
        out.append(("dkms", _cmd("dkms", "status")))
    if plan.memory_saver_module:
        out.append(("modinfo", _cmd("modinfo", plan.memory_saver_module)))
    if plan.fan_module:
        out.append(("modinfo-fan", _cmd("modinfo", plan.fan_module)))
    if plan.nvme_coalescing:
        out.append(("nvme-coalescing", NVME_COALESCING_COMMAND))
    if plan.swap_paths or plan.swapon:
        out.append(("swapon", _cmd("swapon", "--show=NAME,SIZE", "--bytes", "--noheadings")))
    for path in plan.swap_paths:
        out.append((f"swaphdr4k:{path}", header_bytes(path, 4096)))
        out.append((f"swaphdr64k:{path}", header_bytes(path, 65536)))
    if plan.packages:
        out.append(("dpkg", _cmd("dpkg-query", "-W", f"-f={DPKG_FORMAT}", *plan.packages)))
    if plan.efi_boot:
        out.append(("efibootmgr", _cmd("efibootmgr")))
    if plan.drm_drivers:
        out.append(("drm-drivers", DRM_DRIVERS_COMMAND))
        out.append(("drm-clients", DRM_CLIENTS_COMMAND))
    if plan.console_mode:
        out.append(("console", CONSOLE_COMMAND))
    if plan.watchdog:
        out.append(("watchdog", WATCHDOG_COMMAND))
    if plan.gid_tables:
        out.append((GID_TABLE_SECTION, GID_TABLE_COMMAND))
    if plan.netplan_files:
        out.append((NETPLAN_SECTION, NETPLAN_FILES_COMMAND))
    if plan.serving_matches or plan.serving_containers:
        from sparkbase.facts.runtime import RUNTIME_SECTION, probe_command

        out.append((RUNTIME_SECTION, probe_command(plan.serving_matches, plan.serving_containers)))
    return out + deploy_sections(plan)


#: page sizes a swap file's header is probed for (4 KiB, 16 KiB, 64 KiB kernels)
SWAP_PAGE_SIZES = (4096, 16384, 65536)


def deploy_sections(plan: FactPlan) -> list[tuple[str, str]]:
    """The sections plan and apply read besides the audit's (`FactPlan`'s deploy fields)."""
    out: list[tuple[str, str]] = []
    out += [(f"state:{path}", state.file_state_command(path)) for path in plan.file_states]
    out += [(f"text:{path}", state.file_text_command(path)) for path in plan.file_texts]
    out += [(f"newer:{path}:{than}", state.newer_command(path, than)) for path, than in plan.newer]
    out += [(f"reload:{unit}", state.need_reload_command(unit)) for unit in plan.need_reload]
    out += [(f"modinfo-k:{kernel}:{module}", _cmd("modinfo", "-k", kernel, module))
            for kernel, module in plan.kernel_modinfo]
    out += [(f"dkms-source:{name}/{version}", state.dkms_source_command(name, version))
            for name, version in plan.dkms_sources]
    if plan.held:
        out.append(("held", "apt-mark showhold 2>/dev/null; true"))
    for path in plan.swap_files:
        out.append((f"swapstat:{path}", _cmd("stat", "-c", "%s %a %F", "--", path)))
        out += [(f"swaphdr:{size}:{path}", header_bytes(path, size)) for size in SWAP_PAGE_SIZES]
        out.append((f"swapuuid:{path}", state.swap_uuid_command(path)))
    out += [(f"initramfs:{release}:{path}", state.initramfs_file_command(release, path))
            for release, path in plan.initramfs]
    out += [(f"entries:{path}", state.dir_entries_command(path)) for path in plan.dir_entries]
    if plan.ownership:
        out.append(("ownership", state.ownership_command()))
    return out


#: the interrupt-coalescing feature, read as the recipe reads it (spark-ds41f
#: experiments/2026-10-02-nvme-coalescing/run.sh, 3df77d2e)
NVME_COALESCING_COMMAND = _cmd("nvme", "get-feature", NVME_DEVICE, "-f", f"{NVME_COALESCING_FEATURE:#04x}")

#: `CARD<TAB>LINK` for each DRM card (`card0`, not its connectors `card0-HDMI-A-1`) whose device
#: has a driver: where `/sys/class/drm/CARD/device/driver` points (builtins and `readlink`)
DRM_DRIVERS_COMMAND = (
    "for c in /sys/class/drm/card*; do n=${c##*/}; case $n in *-*) continue;; esac; "
    '[ -e "$c/device/driver" ] && printf \'%s\\t%s\\n\' "$n" "$(readlink -- "$c/device/driver")"; '
    "done; true"
)
#: `CARD<TAB>LINE` for each line of each DRM card's clients file in debugfs (who holds DRM
#: master: the recipe's bin/spark, 0161d716, reads /sys/kernel/debug/dri/N/clients), or
#: `CARD<TAB>(unreadable)` when the file cannot be read (debugfs not mounted, not root)
DRM_CLIENTS_COMMAND = (
    "for c in /sys/class/drm/card*; do [ -e \"$c\" ] || continue; n=${c##*/card}; "
    "case $n in *-*) continue;; esac; "
    'awk -v c="card$n" \'{print c "\\t" $0}\' "/sys/kernel/debug/dri/$n/clients" 2>/dev/null '
    "|| printf 'card%s\\t(unreadable)\\n' \"$n\"; done; true"
)
#: the active virtual console (`/sys/class/tty/tty0/active`) and its KDGETMODE answer
#: (0x4B3B; 0 text, 1 graphics), as `VT MODE`: the ioctl the recipe's scripts/host-recovery
#: (052248c1) asks, opened read-only with O_NOCTTY so the console never becomes the fact
#: script's controlling terminal; a console that cannot be opened or asked fails the section
CONSOLE_PROGRAM = (
    "import fcntl, os, struct\n"
    'vt = open("/sys/class/tty/tty0/active").read().strip()\n'
    'fd = os.open("/dev/" + vt, os.O_RDONLY | os.O_NOCTTY)\n'
    'print(vt, struct.unpack("i", fcntl.ioctl(fd, 0x4B3B, bytes(4)))[0])\n'
)
CONSOLE_COMMAND = _cmd("python3", "-c", CONSOLE_PROGRAM)
#: the systemd manager's watchdog settings as PID 1 runs them (scripts/host-recovery, 052248c1)
WATCHDOG_COMMAND = _cmd("systemctl", "show", "-p", "RuntimeWatchdogUSec", "-p", "RebootWatchdogUSec")

#: the section holding the GID tables (`parse_gid_table`)
GID_TABLE_SECTION = "gid-table"
#: every filled GID entry of every port of every RDMA device, as `FILE<TAB>GID<TAB>TYPE<TAB>NDEV`
#: lines: shell builtins only (`read` of each sysfs file, no process per entry), empty slots
#: (the all-zero GID) skipped; the type and netdev files of a slot the kernel will not describe
#: fail to read (EINVAL) and leave those fields empty
GID_TABLE_COMMAND = (
    f"for f in {RDMA_CLASS}/*/ports/*/gids/*; do "
    'read -r g <"$f" || continue; '
    "case $g in 0000:0000:0000:0000:0000:0000:0000:0000) continue;; esac; "
    'd=${f%/gids/*}; i=${f##*/}; t=; n=; '
    'read -r t <"$d/gid_attrs/types/$i"; read -r n <"$d/gid_attrs/ndevs/$i"; '
    "printf '%s\\t%s\\t%s\\t%s\\n' \"$f\" \"$g\" \"$t\" \"$n\"; "
    "done 2>/dev/null; true"
)
#: the section listing every netplan file (`facts.parsers.fabric.parse_netplan_listing`)
NETPLAN_SECTION = "netplan"


def netplan_files_command() -> str:
    """Shell text printing one line per `*.yaml` entry of netplan's three directories:
    `F NAME64 L|- MODE b64:DATA64` for a regular file (its target's, for a link: netplan
    reads through links; at most MAX_NETPLAN_BYTES + 1 bytes, so a larger one shows as
    larger), `O NAME64 L|-` for anything else, `MORE` after MAX_NETPLAN_FILES entries.
    Names and bytes go base64-encoded, so no name or content can forge a line. Exits 0."""
    globs = " ".join(f"{shlex.quote(directory)}/*.yaml" for directory in NETPLAN_DIRS)
    b64 = "base64 | tr -d '\\n'"
    return (
        f'n=0; for f in {globs}; do {{ [ -e "$f" ] || [ -L "$f" ]; }} || continue; '
        f'n=$((n+1)); if [ "$n" -gt {MAX_NETPLAN_FILES} ]; then echo MORE; break; fi; '
        f'm=$(printf %s "$f" | {b64}); if [ -L "$f" ]; then l=L; else l=-; fi; '
        f'if [ -f "$f" ]; then printf \'F %s %s %s b64:%s\\n\' "$m" "$l" "$(stat -L -c %a -- "$f")" '
        f'"$(head -c {MAX_NETPLAN_BYTES + 1} -- "$f" | {b64})"; '
        f'else printf \'O %s %s\\n\' "$m" "$l"; fi; done; true'
    )


NETPLAN_FILES_COMMAND = netplan_files_command()

#: kernels (and lab nodes) without /proc/modules: the same first column from /sys/module
#: (`[` is built into sh, so this costs no process when /proc/modules exists)
MODULES_SYS_COMMAND = "[ -e /proc/modules ] || " + _cmd("ls", "-1", "/sys/module")


def modules_section(found: Sections) -> str:
    """Which section lists the loaded modules: `modules-sys` when /proc/modules was missing
    and /sys/module answered, else `modules` (/proc/modules)."""
    fallback = found.get("modules-sys")
    if fallback is not None and fallback.status == 0 and fallback.output.strip():
        return "modules-sys"
    return "modules"


def new_marker() -> str:
    """A section marker no file on the node can contain by accident or on purpose."""
    return f"@@sparkbase-facts-{secrets.token_hex(8)}@@"


def marker_stdin(marker: str) -> str:
    """What a fenced script is sent on its stdin: the marker, one line."""
    return marker + "\n"


def read_marker(variable: str) -> str:
    """The shell line that reads the marker from stdin into `variable` (never exported),
    and stops the script when none came (an empty marker would fence nothing)."""
    return f'IFS= read -r {variable} && [ -n "${variable}" ] || exit 125'


class SectionError(ValueError):
    """An answer whose sections cannot be trusted: a section printed twice, or a section
    the script never prints (`section` names it)."""

    def __init__(self, section: str, problem: str) -> None:
        super().__init__(f"section {section!r} {problem}: the answer is refused")
        self.section = section
        self.problem = problem


#: sections whose parser needs clean stdout: the command's stderr goes to the script's own
#: stderr, fenced there by the same marker (`Section.stderr`), so warnings (`Deprecated
#: feature: …`, `Error! …`) never mix into what the parser reads
STDERR_APART = frozenset({"dkms", "modinfo", "sb-state", "mok-enrolled", "mok-new", "dpkg"})
#: the shell functions every fenced command needs (`b`/`e` print the fences)
FENCE_PRELUDE = (
    "export LC_ALL=C",
    'b() { printf \'%s BEGIN %s\\n\' "$M" "$1"; }',
    'e() { printf \'\\n%s END %s %s\\n\' "$M" "$1" "$2"; }',
)


def fence(name: str, command: str, *, stderr_apart: bool = False) -> str:
    """One section's shell line: fences around `command`, stdin closed.

    stderr is merged into the section, or with `stderr_apart` left on the script's stderr
    between fences of its own (builtins only: no process is added).
    """
    quoted = shlex.quote(name)
    if not stderr_apart:
        return f"b {quoted}; {{ {command}; }} </dev/null 2>&1; e {quoted} $?"
    return f"b {quoted}; b {quoted} >&2; {{ {command}; }} </dev/null; r=$?; e {quoted} $r >&2; e {quoted} $r"


#: the first line of every fenced script: the marker, from stdin (`marker_stdin`)
MARKER_FROM_STDIN = read_marker("M")


def fenced_script(named: Sequence[tuple[str, str]], apart: frozenset[str] = STDERR_APART) -> str:
    """A POSIX sh script printing each (name, command) fenced by the marker it reads from
    its stdin (send `marker_stdin(marker)`; the pure inverse is `split_sections`); used by
    the audit's script and by the deploy's pyinfra facts."""
    lines = [MARKER_FROM_STDIN, *FENCE_PRELUDE]
    lines += [fence(name, command, stderr_apart=name in apart) for name, command in named]
    return "\n".join(lines) + "\n"


def build_script(plan: FactPlan) -> str:
    """The POSIX sh script: every section's command, fenced by the marker sent on stdin."""
    return "#!/bin/sh\n" + fenced_script(sections(plan))


def section_names(plan: FactPlan) -> frozenset[str]:
    """The names of every section the plan's script prints (what an answer may hold)."""
    return frozenset(name for name, _ in sections(plan))


@dataclass(frozen=True)
class Section:
    """One section of the answer: the command's output and exit status (and its stderr,
    for the sections that keep it apart)."""

    output: str
    status: int
    stderr: str = ""


@dataclass
class Sections:
    """The parsed answer: sections by name."""

    by_name: dict[str, Section] = field(default_factory=dict)

    def get(self, name: str) -> Section | None:
        """The section called `name`, if the node answered it."""
        return self.by_name.get(name)


def _fenced(text: str, marker: str) -> Iterator[re.Match[str]]:
    pattern = re.compile(
        rf"^{re.escape(marker)} BEGIN (?P<name>[^\n]+)\n(?P<body>.*?)\n"
        rf"{re.escape(marker)} END (?P=name) (?P<rc>\d+)$",
        re.DOTALL | re.MULTILINE,
    )
    return pattern.finditer(text)


def _bodies(text: str, marker: str, expected: Collection[str] | None) -> dict[str, tuple[str, int]]:
    """Each fenced section's (body, exit status) by name; `SectionError` for a name seen
    twice or not in `expected` (when given)."""
    found: dict[str, tuple[str, int]] = {}
    for match in _fenced(text, marker):
        name = match["name"]
        if name in found:
            raise SectionError(name, "appears twice")
        if expected is not None and name not in expected:
            raise SectionError(name, "is not one the script prints")
        found[name] = (match["body"], int(match["rc"]))
    return found


def split_sections(text: str, marker: str, stderr: str = "",
                   expected: Collection[str] | None = None) -> Sections:
    """Split the script's output into sections (pure; the inverse of `build_script`);
    `stderr` is the script's stderr, whose fenced parts are the sections' own stderr.

    A section printed twice, or (with `expected`, the names the script prints) one it
    never prints, raises `SectionError`: something on the node printed fences.
    """
    errors = _bodies(stderr, marker, expected)
    return Sections({name: Section(body, status, errors.get(name, ("", 0))[0])
                     for name, (body, status) in _bodies(text, marker, expected).items()})


def unfinished_section(text: str, marker: str) -> str | None:
    """The last section of a cut answer whose BEGIN fence came without its END (where a
    command printed without end, or hung), or None."""
    begun = re.findall(rf"^{re.escape(marker)} BEGIN ([^\n]+)$", text, re.MULTILINE)
    ended = set(re.findall(rf"^{re.escape(marker)} END ([^\n]+) \d+$", text, re.MULTILINE))
    left = [name for name in begun if name not in ended]
    return left[-1] if left else None


_GREP_ERROR = re.compile(r"^grep: (?P<path>.+?): (?P<reason>[^:]+)$")


def expand_files(found: Sections, reads: list[tuple[str, tuple[str, ...]]]) -> Sections:
    """Split the `files` section into one section per file read (pure).

    A file's section holds its lines (status 0), or grep's message about it (status 2:
    missing, unreadable). A glob section holds the `FILE:line` lines of every file the
    glob matched. Sections already present (an answer from an older script, one `cat`
    per file) are kept as they are.
    """
    section = found.get(FILES_SECTION)
    if section is None:
        return found
    exact = {path: name for name, paths in reads for path in paths if not _is_glob(path)}
    globs = [(pattern, name) for name, paths in reads for pattern in paths if _is_glob(pattern)]
    colon_paths = sorted((path for path in exact if ":" in path), key=len, reverse=True)
    lines: dict[str, list[str]] = {name: [] for name, _ in reads}
    errors: dict[str, list[str]] = {}
    for line in node_lines(section.output):
        error = _GREP_ERROR.match(line)
        if error is not None:
            path = error["path"]
            name = exact.get(path) or next((n for pattern, n in globs if pattern == path), None)
            if name is not None:
                errors.setdefault(name, []).append(line)
            continue
        # a path with a colon in it is matched whole, before the first colon is tried
        path = next((p for p in colon_paths if line.startswith(p + ":")), None)
        if path is None:
            path = line.partition(":")[0]
        if path in exact:
            lines[exact[path]].append(line[len(path) + 1 :])
            continue
        name = next((n for pattern, n in globs if fnmatch.fnmatchcase(path, pattern)), None)
        if name is not None:
            lines[name].append(line)
    expanded = Sections(dict(found.by_name))
    for name, _paths in reads:
        if name in found.by_name:
            continue
        if lines[name]:
            expanded.by_name[name] = Section("\n".join(lines[name]) + "\n", 0)
        elif name in errors:
            expanded.by_name[name] = Section("\n".join(errors[name]), 2)
        elif section.status in {0, 1, 2}:
            expanded.by_name[name] = Section("", 0)  # an empty file
        else:
            expanded.by_name[name] = Section(section.output[-200:], section.status)
    return expanded
