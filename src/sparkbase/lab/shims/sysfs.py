"""The emulated /sys a node's programs read: CPUs, cpufreq, EFI, InfiniBand ports and GIDs, netdevs."""

from __future__ import annotations

from pathlib import Path

from sparkbase.lab.shims.cmd_net import default_net
from sparkbase.lab.shims.common import NET, LazyModule, faults, read_json, write_text

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

    from sparkbase.lab import boot as B
else:
    B = LazyModule("sparkbase.lab.boot")


def write_sysfs_static(node: str) -> None:
    """Directories and files of the emulated /sys that never change (EFI, CPUs)."""
    Path("/sys/firmware/efi/efivars").mkdir(parents=True, exist_ok=True)
    Path("/sys/kernel/mm/transparent_hugepage").mkdir(parents=True, exist_ok=True)
    for cpu in range(B.NCPUS):
        Path(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq").mkdir(parents=True, exist_ok=True)
    write_text(Path("/sys/devices/system/cpu/online"), f"0-{B.NCPUS - 1}\n")
    write_text(Path("/sys/devices/system/cpu/possible"), f"0-{B.NCPUS - 1}\n")


def write_governor() -> None:
    """cpufreq governor files of every CPU (`powersave` under the `governor` fault)."""
    governor = "powersave" if faults().get("governor") else "performance"
    for cpu in range(B.NCPUS):
        base = Path(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq")
        write_text(base / "scaling_governor", governor + "\n")
        write_text(base / "scaling_available_governors",
                   "conservative ondemand userspace powersave performance schedutil\n")
        write_text(base / "scaling_max_freq", "3900000\n" if cpu in B.FAST_CPUS else "2808000\n")


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
