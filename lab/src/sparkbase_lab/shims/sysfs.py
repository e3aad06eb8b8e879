"""The emulated /sys a node's programs read: CPUs, cpufreq, EFI, DRM, thermal zones, ttys,
InfiniBand ports and GIDs, netdevs."""

from __future__ import annotations

from pathlib import Path

from sparkbase_lab.shims.common import NET, LazyModule, faults, read_json, write_text
from sparkbase_lab.shims.netdevs import default_net

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

    from sparkbase_lab import boot as B
else:
    B = LazyModule("sparkbase_lab.boot")


CPU = Path("/sys/devices/system/cpu")
#: the GB10's CPPC frequency limits (kHz): Cortex-X925 and Cortex-A725 cores
MAX_FREQ_FAST, MAX_FREQ_SLOW, MIN_FREQ = 3900000, 2808000, 338000
GOVERNORS = "conservative ondemand userspace powersave performance schedutil"


def _relink(link: Path, target: str) -> None:
    """`link` -> `target` (replacing a directory or file an older boot left there)."""
    import shutil

    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir():
        shutil.rmtree(link)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def write_sysfs_static(node: str) -> None:
    """Directories and files of the emulated /sys that never change: EFI, CPUs with one
    cpufreq policy each (`cpu<N>/cpufreq` -> `../cpufreq/policy<N>`, as cppc_cpufreq makes
    them), the GB10's DRM device, the NVMe controller."""
    if not faults().get("no-efi"):
        Path("/sys/firmware/efi/efivars").mkdir(parents=True, exist_ok=True)
    Path("/sys/kernel/mm/transparent_hugepage").mkdir(parents=True, exist_ok=True)
    for cpu in range(B.NCPUS):
        policy = CPU / "cpufreq" / f"policy{cpu}"
        policy.mkdir(parents=True, exist_ok=True)
        fast = cpu in B.FAST_CPUS
        for name, value in (
            ("related_cpus", str(cpu)), ("affected_cpus", str(cpu)), ("scaling_driver", "cppc_cpufreq"),
            ("cpuinfo_max_freq", str(MAX_FREQ_FAST if fast else MAX_FREQ_SLOW)),
            ("cpuinfo_min_freq", str(MIN_FREQ)), ("scaling_min_freq", str(MIN_FREQ)),
            ("scaling_max_freq", str(MAX_FREQ_FAST if fast else MAX_FREQ_SLOW)),
            ("scaling_available_governors", GOVERNORS),
        ):
            write_text(policy / name, value + "\n")
        _relink(CPU / f"cpu{cpu}" / "cpufreq", f"../cpufreq/policy{cpu}")
    write_text(CPU / "online", f"0-{B.NCPUS - 1}\n")
    write_text(CPU / "possible", f"0-{B.NCPUS - 1}\n")
    write_drm()
    write_tty()
    write_nvme()


#: the governor a kernel starts every policy with, before anything sets one (a lab choice:
#: the GB10's cppc_cpufreq on Ubuntu's arm64 kernels; no source here gives it)
KERNEL_DEFAULT_GOVERNOR = "schedutil"


def _governor_state() -> str:
    from sparkbase_lab.shims.common import RUN

    return f"{RUN}/cpufreq-governor"


def write_governor(boot: bool = False) -> None:
    """The governor of every cpufreq policy: at boot the kernel's default (cpupower, run by
    nv-cpu-governor.service, changes it after), later the last one cpupower set; `powersave`
    under the `governor` fault, whatever was set."""
    from sparkbase_lab.shims.common import read_text

    if boot:
        write_text(_governor_state(), KERNEL_DEFAULT_GOVERNOR + "\n")
    governor = read_text(_governor_state()).strip() or KERNEL_DEFAULT_GOVERNOR
    if faults().get("governor"):
        governor = "powersave"
    for cpu in range(B.NCPUS):
        write_text(CPU / "cpufreq" / f"policy{cpu}" / "scaling_governor", governor + "\n")


def set_governor(governor: str) -> list[int]:
    """What `cpupower frequency-set -g` does: every policy's governor (the fault still wins)."""
    write_text(_governor_state(), governor + "\n")
    write_governor()
    return list(range(B.NCPUS))


#: the GB10's display controller as DRM shows it (PCI 000f:01:00.0, NVIDIA; the recipe's
#: doctor names it /dev/dri/by-path/pci-000f:01:00.0-card: spark-ds41f bin/spark 0161d716)
DRM_DEVICE = "/sys/devices/pci000f:00/000f:00:00.0/000f:01:00.0"
#: the PCI driver directory the GPU binds to once `nvidia` is loaded
NVIDIA_PCI_DRIVER = "/sys/bus/pci/drivers/nvidia"
SYS = Path("/sys")


def _under(sys_root: Path, path: str) -> Path:
    """`path` (an absolute /sys path) inside `sys_root` (the node's /sys, or a test's)."""
    return sys_root / path.removeprefix("/sys/")


def write_drm(sys_root: Path = SYS) -> None:
    """/sys/class/drm: card and render node of the GB10 (when nvidia_drm is loaded), its
    HDMI connector disconnected (a headless node). As the kernel links them: each DRM node
    has a `device` link to the PCI function (`../../../000f:01:00.0`), and the function a
    `driver` link to `/sys/bus/pci/drivers/nvidia` while `nvidia` drives it, so
    `basename $(readlink /sys/class/drm/card0/device/driver)` is `nvidia`, as the recipe's
    doctor reads it."""
    import shutil

    drm = sys_root / "class/drm"
    shutil.rmtree(drm, ignore_errors=True)
    device = _under(sys_root, DRM_DEVICE)
    shutil.rmtree(device / "drm", ignore_errors=True)
    write_text(device / "vendor", "0x10de\n")
    write_text(device / "class", "0x030000\n")
    driver = _under(sys_root, NVIDIA_PCI_DRIVER)
    function = DRM_DEVICE.rsplit("/", 1)[1]
    if (sys_root / "module/nvidia").is_dir():
        _relink(device / "driver", "../../../../bus/pci/drivers/nvidia")
        _relink(driver / function, f"../../../..{DRM_DEVICE.removeprefix('/sys')}")
        _relink(driver / "module", "../../../../module/nvidia")
    else:
        for stale in (device / "driver", driver / function):
            if stale.is_symlink():
                stale.unlink()
    if not (sys_root / "module/nvidia_drm").is_dir():
        return
    write_text(drm / "version", "drm 1.1.0 20060810\n")
    devices = f"../..{DRM_DEVICE.removeprefix('/sys')}/drm"
    for name, dev in (("card0", "226:0"), ("renderD128", "226:128")):
        write_text(device / "drm" / name / "dev", dev + "\n")
        _relink(device / "drm" / name / "device", f"../../../{function}")
        _relink(drm / name, f"{devices}/{name}")
    write_drm_clients(sys_root)
    connector = device / "drm" / "card0" / "card0-HDMI-A-1"
    write_text(connector / "status", "disconnected\n")
    write_text(connector / "enabled", "disabled\n")
    _relink(connector / "device", "../../card0")  # a connector's parent is its card
    _relink(drm / "card0-HDMI-A-1", f"{devices}/card0/card0-HDMI-A-1")


#: debugfs' clients of card 0 as a 7.0 kernel prints them (drm_debugfs.c `drm_clients_info`:
#: command %20s, tgid, dev, master, authenticated, uid, magic, then name and client id; the
#: real sample tests/fixtures/real/sys_kernel_debug_dri_0_clients__name_client-id_…)
DRM_CLIENTS_HEADER = ("             command  tgid dev master a   uid      magic"
                      + " " * 61 + "name client-id\n")
#: the `drm-master` fault's client: a display server holding master of the card
DRM_MASTER_ROW = ("                Xorg  2210   0   y    y     0          0" + " " * 58 + "<unset>    11\n")


def write_drm_clients(sys_root: Path = SYS) -> None:
    """/sys/kernel/debug/dri/0/clients while nvidia_drm drives card 0: no client on a headless
    node (the serving worker closes its DRM file after startup); under the `drm-master`
    fault a display server holds master."""
    clients = sys_root / "kernel/debug/dri/0/clients"
    if not (sys_root / "module/nvidia_drm").is_dir():
        clients.unlink(missing_ok=True)
        return
    write_text(clients, DRM_CLIENTS_HEADER + (DRM_MASTER_ROW if faults().get("drm-master") else ""))


#: the GB10's ACPI thermal zones: seven, all `acpitz`, reading 38.9-41.7 degrees C at idle
#: on a real DGX Spark (lablup/all-smi issue 147); the per-zone values are the lab's
ACPI_ZONES_MILLI_C = (38900, 39700, 40100, 40500, 41000, 41300, 41700)
#: the cooling device the fan-control module registers (the recipe's doctor looks for
#: this `type`: spark-ds41f bin/spark 0161d716); its states are the lab's
FAN_COOLING_TYPE = "dgx_ec_fan_floor"
FAN_MODULE = "dgx_ec_fan_control"


def write_thermal(loaded: list[str], sys_root: Path = SYS) -> None:
    """/sys/class/thermal: the ACPI thermal zones (links into /sys/devices/virtual/thermal,
    as the kernel makes them) and, while the fan-control module is loaded, its cooling
    device."""
    import shutil

    thermal, virtual = sys_root / "class/thermal", sys_root / "devices/virtual/thermal"
    shutil.rmtree(thermal, ignore_errors=True)
    shutil.rmtree(virtual, ignore_errors=True)
    for index, milli in enumerate(ACPI_ZONES_MILLI_C):
        zone = virtual / f"thermal_zone{index}"
        for name, value in (("type", "acpitz"), ("temp", str(milli)), ("mode", "enabled"),
                            ("policy", "step_wise"),
                            ("available_policies",
                             "bang_bang fair_share step_wise user_space power_allocator")):
            write_text(zone / name, value + "\n")
        _relink(thermal / zone.name, f"../../devices/virtual/thermal/{zone.name}")
    if FAN_MODULE in loaded:
        cooling = virtual / "cooling_device0"
        for name, value in (("type", FAN_COOLING_TYPE), ("max_state", "100"), ("cur_state", "0")):
            write_text(cooling / name, value + "\n")
        _relink(thermal / cooling.name, "../../devices/virtual/thermal/cooling_device0")


#: virtual consoles the kernel makes (MAX_NR_CONSOLES)
VIRTUAL_CONSOLES = 63


def write_tty(sys_root: Path = SYS) -> None:
    """/sys/class/tty: `tty`, `console`, `ptmx` and the virtual consoles `tty0`..`tty63`
    (links into /sys/devices/virtual/tty, each with its `dev`); `tty0/active` names the
    foreground console (`tty1`: a headless node sits at the first console, as the recipe's
    host-recovery reads it: spark-ds41f scripts/host-recovery 052248c1)."""
    virtual = sys_root / "devices/virtual/tty"
    cls = sys_root / "class/tty"
    devices = [("tty", "5:0"), ("console", "5:1"), ("ptmx", "5:2"),
               *((f"tty{n}", f"4:{n}") for n in range(VIRTUAL_CONSOLES + 1))]
    for name, dev in devices:
        write_text(virtual / name / "dev", dev + "\n")
        write_text(virtual / name / "uevent",
                   f"MAJOR={dev.split(':')[0]}\nMINOR={dev.split(':')[1]}\nDEVNAME={name}\n")
        _relink(cls / name, f"../../devices/virtual/tty/{name}")
    write_text(virtual / "tty0" / "active", "tty1\n")
    write_text(virtual / "console" / "active", "tty0\n")


#: the node's NVMe controller (a lab model name: no real Spark sample names the drive)
NVME_MODEL = "sparkbase lab NVMe"
#: its PCI vendor: Samsung, as the public DGX Spark notes name the drive (MZALC4T0HBL1);
#: DGX OS's coalescing script acts on Samsung, Kioxia and Micron controllers only
NVME_VENDOR = "0x144d"


def write_nvme() -> None:
    """/sys/class/nvme/nvme0 and the nvme_core parameter APST depends on."""
    from sparkbase_lab.shims.common import RUN, read_text

    node = Path("/sys/class/nvme/nvme0")
    for name, value in (("model", NVME_MODEL), ("serial", "SPARKBASELAB0001"), ("firmware_rev", "ERFM11.0"),
                        ("state", "live"), ("transport", "pcie"), ("device/vendor", NVME_VENDOR)):
        write_text(node / name, value + "\n")
    cmdline = read_text(f"{RUN}/proc/cmdline")
    latency = B.cmdline_param(cmdline, "nvme_core.default_ps_max_latency_us") or "100000"
    write_text(Path("/sys/module/nvme_core/parameters/default_ps_max_latency_us"), latency + "\n")


def write_fabric_sysfs() -> None:
    """/sys/class/infiniband (ports, GIDs) and /sys/class/net for the emulated netdevs."""
    import shutil
    net: dict[str, Any] = read_json(NET, {}) or default_net()
    flt = faults()
    down = set(flt.get("link-down", []))
    moved = bool(flt.get("gid-moved"))
    ib = Path("/sys/class/infiniband")
    shutil.rmtree(ib, ignore_errors=True)
    for hca, netdev in B.FABRIC.items():
        dev = net.get(netdev, {})
        link_up = dev.get("up", True) and hca not in down and netdev not in down
        port = ib / hca / "ports/1"
        (ib / hca / "device/net" / netdev).mkdir(parents=True, exist_ok=True)
        write_text(port / "state", "4: ACTIVE\n" if link_up else "1: DOWN\n")
        write_text(port / "phys_state", "5: LinkUp\n" if link_up else "3: Disabled\n")
        write_text(port / "link_layer", "Ethernet\n")
        write_text(port / "rate", "200 Gb/sec (4X HDR)\n")
        ipv4 = next((a for a in dev.get("addresses", []) if ":" not in a), None) if link_up else None
        table = B.gid_table(dev.get("mac", "00:00:00:00:00:00"), ipv4, moved)
        for index in range(8):
            gid, kind = table.get(index, ("0000:0000:0000:0000:0000:0000:0000:0000", ""))
            write_text(port / "gids" / str(index), gid + "\n")
            (port / "gid_attrs/types").mkdir(parents=True, exist_ok=True)
            (port / "gid_attrs/ndevs").mkdir(parents=True, exist_ok=True)
            if kind:
                write_text(port / "gid_attrs/types" / str(index), kind + "\n")
                write_text(port / "gid_attrs/ndevs" / str(index), netdev + "\n")
    netdir = Path("/sys/class/net")
    for netdev, dev in net.items():
        base = netdir / netdev
        base.mkdir(parents=True, exist_ok=True)
        link_up = dev.get("up", True) and netdev not in down and not any(
            h in down for h, n in B.FABRIC.items() if n == netdev
        )
        write_text(base / "mtu", f"{dev.get('mtu', 1500)}\n")
        write_text(base / "operstate", "up\n" if link_up else "down\n")
        write_text(base / "address", dev.get("mac", "") + "\n")
