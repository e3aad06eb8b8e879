"""The boot step of a node (`__boot__`) and the run-time refresh after a fault (`__refresh__`).

Node init runs `shim.py __boot__` at every (re)boot: it chooses the kernel, then writes
every runtime file the commands and the bind mounts over /proc read.
"""

from __future__ import annotations

import json
import os

from sparkbase_lab.shims.cmd_grub import GRUBENV, installed_kernels, render
from sparkbase_lab.shims.cmd_modules import compute_modules, find_module, write_modules
from sparkbase_lab.shims.cmd_net import netplan_apply
from sparkbase_lab.shims.cmd_swap import save_swaps, swap_activate
from sparkbase_lab.shims.cmd_systemd import (
    boot_units,
    compute_active,
    default_target,
    load_manager,
    record_loaded,
    set_active,
)
from sparkbase_lab.shims.common import (
    ACTIVE,
    FIRMWARE,
    NET,
    RUN,
    STATE,
    VAR,
    Fail,
    LazyModule,
    boot_log,
    faults,
    firmware,
    node_info,
    read_text,
    sorted_conf,
    write_json,
    write_text,
)
from sparkbase_lab.shims.modfile import parse_ko
from sparkbase_lab.shims.netdevs import default_net
from sparkbase_lab.shims.sysfs import (
    write_drm_clients,
    write_fabric_sysfs,
    write_governor,
    write_sysfs_static,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable

    from sparkbase_lab import boot as B
else:
    B = LazyModule("sparkbase_lab.boot")


def choose_kernel() -> B.BootChoice:
    """The kernel this boot runs (one-shot entry consumed), as GRUB and the fallback rule decide."""
    installed = installed_kernels()
    grubenv_path = GRUBENV
    grubenv = B.parse_grubenv(read_text(grubenv_path))
    menu = B.parse_grub_cfg(read_text("/boot/grub/grub.cfg"))
    if not menu.entries:
        menu = B.parse_grub_cfg(render(sorted(installed)))
    previous = read_text(f"{VAR}/last-release").strip() or None
    unbootable = set(faults().get("kernel-panic", []))
    choice = B.select_boot(menu, grubenv, installed, unbootable, previous)
    if choice.used_oneshot:
        grubenv.pop("next_entry", None)
        write_text(grubenv_path, B.render_grubenv(grubenv))
    return choice


#: the node's active virtual console (`/sys/class/tty/tty0/active` names it): the preload
#: library opens this file for `/dev/tty1` and answers KDGETMODE/KDSETMODE from its content
CONSOLE = f"{RUN}/dev/tty1"


def write_console(cmdline: str) -> None:
    """The console's KD mode after boot: graphics (1) when Plymouth's splash ran (`splash` on
    the command line: it leaves the console in graphics mode, spark-ds41f docs/doctor.md
    0161d716) or with the `console-graphics` fault, else text (0)."""
    graphics = "splash" in cmdline.split() or bool(faults().get("console-graphics"))
    write_text(CONSOLE, "1\n" if graphics else "0\n")


def do_boot(argv: list[str]) -> int:
    """Compute this boot and write every runtime file (run by node init as PID 1's child)."""
    import time
    os.makedirs(RUN, exist_ok=True)
    node = node_info().get("name", os.uname().nodename)
    fw = firmware()
    # MokManager enrols pending keys only with a person at the console (`sparkbase lab
    # console NODE enroll-mok`, used up by this boot); else it times out, keys still pending
    person = fw.pop("console", None)
    if fw.get("pending") and person == "enroll-mok":
        fw["enrolled"] = fw["enrolled"] + fw["pending"]
        fw["pending"] = []
        boot_log("MokManager: Enroll MOK, Continue, Yes, password, Reboot: the pending MOK keys are enrolled")
    elif fw.get("pending"):
        boot_log("MokManager: MOK enrolment pending, nobody at the console: the boot went on after the "
                 "timeout, the keys are still pending")
    if person is not None:  # the request is used up by this boot
        write_json(FIRMWARE, fw)
    choice = choose_kernel()
    if choice.fallback_reason:
        boot_log(f"boot: {choice.fallback_reason}")
    write_text(f"{VAR}/last-release", choice.release + "\n")
    boot_log(f"boot: {choice.release}{' (one-shot entry)' if choice.used_oneshot else ''}")
    cmdline = B.proc_cmdline(choice.release, choice.args)
    nvidia = find_module("nvidia", choice.release)
    driver = parse_ko(str(nvidia)).get("version") if nvidia else None
    loaded, params = compute_modules(choice.release, fw)
    thp = B.cmdline_param(cmdline, "transparent_hugepage") or "madvise"
    if thp not in B.THP_MODES:
        thp = "madvise"
    target = default_target()
    write_json(STATE, {
        "release": choice.release, "page_size": B.page_size(choice.release),
        "cmdline": cmdline, "driver": driver, "modules": loaded, "params": params,
        "default_target": target, "booted_at": time.time(), "node": node,
        "fallback": choice.fallback_reason,
    })
    # what the preload library answers uname(2) and sysconf(_SC_PAGESIZE) with
    from sparkbase_lab.shims.cmd_kernel import kernel_version

    write_text(f"{RUN}/release", choice.release + "\n")
    write_text(f"{RUN}/kernel_version", kernel_version(choice.release) + "\n")
    write_text(f"{RUN}/page_size", f"{B.page_size(choice.release)}\n")
    write_text(f"{RUN}/proc/cmdline", cmdline + "\n")
    write_console(cmdline)
    load_manager()
    write_text(f"{RUN}/proc/cpuinfo", B.cpuinfo_text())
    write_modules(loaded, params, choice.release)
    write_sysfs_static(node)
    write_text("/sys/kernel/mm/transparent_hugepage/enabled", B.thp_text(thp))
    write_text("/sys/kernel/mm/transparent_hugepage/defrag",
               "always defer defer+madvise [madvise] never\n")
    write_governor(boot=True)
    sysctls = dict(B.SYSCTL_DEFAULTS)
    conf = B.parse_sysctl_conf([read_text("/etc/sysctl.conf"), *sorted_conf("/etc/sysctl.d/*.conf")])
    for key, value in conf.items():
        if key in sysctls:
            sysctls[key] = value
    for key, value in sysctls.items():
        write_text(f"{RUN}/sysctl/{key}", value + "\n")
    # read-only kernel facts a program reads from /proc/sys (bound the same way)
    kernel_files = {"kernel.osrelease": choice.release}
    for key, value in kernel_files.items():
        write_text(f"{RUN}/sysctl/{key}", value + "\n")
    write_text(ACTIVE, "".join(f"{u}\n" for u in compute_active(target)))
    save_swaps([])
    for line in read_text("/etc/fstab").splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 3 and words[2] == "swap" and "noauto" not in words[3:4]:
            try:
                swap_activate(words[0], -2)
            except Fail as exc:
                boot_log(f"swap: {exc}")
    write_json(NET, default_net())
    try:
        netplan_apply()
    except Fail as exc:
        boot_log(f"netplan: {exc}")
    write_fabric_sysfs()
    # last, as systemd reaches multi-user.target: the oneshot/idle units run their commands
    # (DGX OS's governor and NVMe coalescing units), on the node as it now stands
    active = set(compute_active(target))
    record_loaded()  # systemd loads every unit as it is on disk when it starts
    boot_units(active)
    set_active(active)
    print(json.dumps({"sysctls": sorted([*sysctls, *kernel_files])}))
    return 0


def do_refresh(argv: list[str]) -> int:
    """Re-apply fault-driven hardware state (governor, links, GIDs, DRM clients, console mode)
    without a reboot."""
    write_governor()
    write_fabric_sysfs()
    write_drm_clients()
    write_console(read_text(f"{RUN}/proc/cmdline"))
    return 0


COMMANDS: dict[str, Callable[[list[str]], int]] = {"__boot__": do_boot, "__refresh__": do_refresh}
