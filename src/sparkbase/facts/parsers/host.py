"""The host (section `host`) as the recipe's doctor reads it (spark-ds41f docs/doctor.md and
bin/spark, 0161d716; scripts/host-recovery, 052248c1): the UEFI boot order (`efibootmgr`), the
driver each DRM card belongs to and the clients of each card (who holds DRM master), the
active virtual console's mode (KDGETMODE) and systemd's watchdogs (`systemctl show`, the
manager's own properties); and DGX OS's tuning as it reads: the cpufreq governors and the
current value of an NVMe feature (`nvme get-feature DEV -f ID`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sparkbase.facts.parsers.lines import node_lines, node_words, parse_single_line
from sparkbase.facts.parsers.os_release import parse_os_release
from sparkbase.facts.script import FactPlan, Read, Reader, cmd, fixed
from sparkbase.model.host import NVME_COALESCING_FEATURE, NVME_DEVICE

GOVERNOR_GLOB = "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"
DGX_RELEASE = "/etc/dgx-release"

#: `Boot0001* ubuntu` (`*`: active), then, with `-v`, a tab (efibootmgr 17+) or spaces (older)
#: and the device path
_ENTRY = re.compile(r"^Boot([0-9A-Fa-f]{4})(\*?) ?(.*)$")
#: where a device path starts after the label in efibootmgr's spaced `-v` form
_DEVICE_PATH = re.compile(
    r"\s+(HD|PciRoot|Pci|BBS|BIOS|VenMedia|VenHw|Vendor|ACPI|PCI|MAC|Fv|FvVol|FvFile|USB|UsbClass|"
    r"Uri|IPv4|IPv6|File|MemoryMapped|Sata|NVMe|Scsi)\(.*$"
)
#: KDGETMODE's answers (linux include/uapi/linux/kd.h: KD_TEXT 0, KD_GRAPHICS 1)
CONSOLE_MODES = {0: "text", 1: "graphics"}


@dataclass(frozen=True)
class EfiEntry:
    """One `BootXXXX` variable: its number (4 upper-case hex digits), label, active flag and
    device path (as efibootmgr 18 prints it after the label, or with `-v`; "" when not shown)."""

    number: str
    label: str
    active: bool
    path: str = ""


@dataclass(frozen=True)
class EfiBoot:
    """`efibootmgr`: the entry booted (`BootCurrent`), the order tried and every entry."""

    current: str | None
    order: tuple[str, ...]
    entries: tuple[EfiEntry, ...]

    def entry(self, number: str) -> EfiEntry | None:
        """The entry `number` (`0001`), or None when no such variable is listed."""
        return next((e for e in self.entries if e.number == number.upper()), None)

    def find(self, label: str) -> EfiEntry | None:
        """The first entry in boot order (then any) that is `label`'s: labelled so, or loading
        from `\\EFI\\<label>\\` on the ESP, case-insensitively (as the recipe's doctor finds
        the installed OS: spark-ds41f bin/spark 0161d716)."""
        wanted, folder = label.casefold(), f"\\efi\\{label.casefold()}\\"
        ordered = [*(self.entry(n) for n in self.order), *self.entries]
        return next((e for e in ordered if e is not None
                     and (e.label.casefold() == wanted or folder in e.path.casefold())), None)


def _label_and_path(rest: str) -> tuple[str, str]:
    if "\t" in rest:
        label, path = rest.split("\t", 1)
        return label.strip(), path.strip()
    match = _DEVICE_PATH.search(rest)
    if match is None:
        return rest.strip(), ""
    return rest[:match.start()].strip(), rest[match.start():].strip()


def parse_efibootmgr(text: str) -> EfiBoot:
    """`efibootmgr [-v]` → the boot order and entries; text with neither a `BootOrder:` line
    nor an entry is refused (e.g. "EFI variables are not supported on this system.")."""
    current: str | None = None
    order: tuple[str, ...] | None = None
    entries: list[EfiEntry] = []
    for line in node_lines(text):
        key, sep, value = line.partition(":")
        if sep and key == "BootCurrent":
            current = value.strip().upper() or None
        elif sep and key == "BootOrder":
            order = tuple(n.strip().upper() for n in value.split(",") if n.strip())
        elif (match := _ENTRY.match(line)) is not None:
            label, path = _label_and_path(match.group(3))
            entries.append(EfiEntry(match.group(1).upper(), label, match.group(2) == "*", path))
    if order is None and not entries:
        raise ValueError("no BootOrder line and no Boot entry: not efibootmgr output")
    return EfiBoot(current, order or (), tuple(entries))


def parse_drm_drivers(text: str) -> dict[str, str]:
    """`CARD<TAB>LINK` lines (each DRM card and where its `device/driver` link points) →
    card → driver name (the link's last component)."""
    out: dict[str, str] = {}
    for line in node_lines(text):
        if not line.strip():
            continue
        card, sep, link = line.partition("\t")
        if not sep or not link.strip():
            raise ValueError(f"not CARD<TAB>LINK: {line!r}")
        out[card] = link.rstrip("/").rsplit("/", 1)[-1]
    return out


#: a row of /sys/kernel/debug/dri/N/clients (linux drivers/gpu/drm/drm_debugfs.c
#: `drm_clients_info`): command (%20s, may hold spaces), tgid, dev, master, authenticated, uid,
#: magic, then (newer kernels) the client's name and id
_CLIENT = re.compile(r"^\s*(.+?)\s+([0-9]+)\s+([0-9]+)\s+([yn])\s+([yn])\s+([0-9]+)\s+([0-9]+)(\s.*)?$")
#: what the DRM clients probe prints for a card whose clients file cannot be read
UNREADABLE = "(unreadable)"


@dataclass(frozen=True)
class DrmClient:
    """One open DRM file: the process (command, tgid) and whether it is the card's master."""

    command: str
    pid: int
    master: bool


def parse_drm_clients_file(text: str) -> tuple[DrmClient, ...]:
    """/sys/kernel/debug/dri/N/clients → its clients (the header line skipped)."""
    out: list[DrmClient] = []
    for line in node_lines(text):
        if not line.strip() or node_words(line)[:2] in (["command", "tgid"], ["command", "pid"]):
            continue
        match = _CLIENT.match(line)
        if match is None:
            raise ValueError(f"not a DRM clients row: {line.strip()[:80]!r}")
        out.append(DrmClient(match.group(1).strip(), int(match.group(2)), match.group(4) == "y"))
    return tuple(out)


def parse_drm_clients(text: str) -> dict[str, tuple[DrmClient, ...] | None]:
    """`CARD<TAB>LINE` lines (each card's clients file, line by line, or `CARD<TAB>(unreadable)`)
    → card → its clients, None when the file could not be read."""
    lines: dict[str, list[str] | None] = {}
    for line in node_lines(text):
        if not line.strip():
            continue
        card, sep, rest = line.partition("\t")
        if not sep or not re.fullmatch(r"card[0-9]{1,3}", card):
            raise ValueError(f"not CARD<TAB>LINE: {line[:80]!r}")
        if rest == UNREADABLE:
            lines[card] = None
        else:
            held = lines.setdefault(card, [])
            if held is not None:
                held.append(rest)
    return {card: None if held is None else parse_drm_clients_file("\n".join(held))
            for card, held in lines.items()}


@dataclass(frozen=True)
class ConsoleMode:
    """The active virtual console (`/sys/class/tty/tty0/active`) and its KDGETMODE answer."""

    vt: str
    mode: int

    @property
    def name(self) -> str:
        """`text`, `graphics`, or `mode N` for a value kd.h does not name."""
        return CONSOLE_MODES.get(self.mode, f"mode {self.mode}")


def parse_console_mode(text: str) -> ConsoleMode:
    """`VT MODE` (the console probe's one line, `CONSOLE_COMMAND`) → the console and its mode."""
    words = node_words(text)
    if len(words) != 2 or not re.fullmatch(r"tty[0-9]{1,2}", words[0]) or not words[1].isdigit():
        raise ValueError(f"not 'ttyN MODE': {text.strip()[:80]!r}")
    return ConsoleMode(words[0], int(words[1]))


def parse_manager_properties(text: str) -> dict[str, str]:
    """`systemctl show -p P ...` with no unit (the manager's own properties) → P → value."""
    out: dict[str, str] = {}
    for line in node_lines(text):
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", key):
            out[key] = value
    if not out:
        raise ValueError("no PROPERTY=VALUE line")
    return out


def parse_governors(text: str) -> dict[int, str]:
    """`grep . /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor` → CPU → governor."""
    governors: dict[int, str] = {}
    for line in node_lines(text):
        match = re.match(r"^/sys/devices/system/cpu/cpu(\d+)/cpufreq/scaling_governor:(.+)$", line)
        if match:
            governors[int(match[1])] = match[2].strip()
    return governors


#: nvme-cli prints `get-feature:%#0*x (%s), %s value:%#0*x` (nvme.c get_feature_id_print;
#: nvme-print-stdout.c stdout_feature_show): C's `#` flag adds no `0x` to zero, so a zero
#: value prints as `00000000` and any other as `0x00000107` (both hexadecimal)
_FEATURE_LINE = re.compile(
    r"^get-feature:\s*(?P<fid>0x[0-9a-fA-F]+|0+)\s*\((?P<name>[^)]*)\),\s*(?P<sel>\w+) value:\s*"
    r"(?P<value>(?:0x)?[0-9a-fA-F]+)\s*$"
)


def parse_nvme_feature(text: str, feature: int | None = None) -> int:
    """The current value of the feature `nvme get-feature` printed (of `feature`, when given).

    Raises ValueError on anything else (`NVMe status: …`, a missing device, another feature).
    """
    for line in node_lines(text):
        match = _FEATURE_LINE.match(line.strip())
        if match is None:
            continue
        fid = int(match["fid"], 16)
        if feature is not None and fid != feature:
            raise ValueError(f"nvme printed feature {fid:#04x}, not {feature:#04x}")
        if match["sel"] != "Current":
            raise ValueError(f"nvme printed the {match['sel']} value, not the current one")
        return int(match["value"], 16)
    first = next((line.strip() for line in node_lines(text) if line.strip()), "(no output)")
    raise ValueError(f"not a get-feature answer: {first[:120]}")


#: the interrupt-coalescing feature, read as the recipe reads it (spark-ds41f
#: experiments/2026-10-02-nvme-coalescing/run.sh, 3df77d2e)
NVME_COALESCING_COMMAND = cmd("nvme", "get-feature", NVME_DEVICE, "-f", f"{NVME_COALESCING_FEATURE:#04x}")
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
CONSOLE_COMMAND = cmd("python3", "-c", CONSOLE_PROGRAM)
#: the systemd manager's watchdog settings as PID 1 runs them (scripts/host-recovery, 052248c1)
WATCHDOG_COMMAND = cmd("systemctl", "show", "-p", "RuntimeWatchdogUSec", "-p", "RebootWatchdogUSec")


#: every CPU's cpufreq governor
governor_files = fixed(("governors", (GOVERNOR_GLOB,)))
#: DGX OS's release file
release_files = fixed(("dgx-release", (DGX_RELEASE,)))
#: systemd's default target
target_sections = fixed(("default-target", cmd("systemctl", "get-default")))


def nvme_sections(plan: FactPlan) -> list[Read]:
    """NVMe interrupt coalescing, when the plan asks it."""
    return [("nvme-coalescing", NVME_COALESCING_COMMAND)] if plan.nvme_coalescing else []


def boot_sections(plan: FactPlan) -> list[Read]:
    """The UEFI boot order, the DRM cards' drivers and clients, the console's mode and
    systemd's watchdogs, each when the plan asks it."""
    return [*([("efibootmgr", cmd("efibootmgr"))] if plan.efi_boot else []),
            *([("drm-drivers", DRM_DRIVERS_COMMAND), ("drm-clients", DRM_CLIENTS_COMMAND)]
              if plan.drm_drivers else []),
            *([("console", CONSOLE_COMMAND)] if plan.console_mode else []),
            *([("watchdog", WATCHDOG_COMMAND)] if plan.watchdog else [])]


def facts(r: Reader, plan: FactPlan) -> dict[str, Any]:
    """The host's `NodeFacts` fields."""
    coalescing = (r.parse("nvme-coalescing", lambda out: parse_nvme_feature(out, NVME_COALESCING_FEATURE))
                  if plan.nvme_coalescing else None)
    return {
        "default_target": r.parse("default-target", parse_single_line),
        "efi_boot": r.parse("efibootmgr", parse_efibootmgr) if plan.efi_boot else None,
        "drm_drivers": (r.parse("drm-drivers", parse_drm_drivers) or {}) if plan.drm_drivers else {},
        "drm_clients": (r.parse("drm-clients", parse_drm_clients) or {}) if plan.drm_drivers else {},
        "console": r.parse("console", parse_console_mode) if plan.console_mode else None,
        "watchdog": (r.parse("watchdog", parse_manager_properties) or {}) if plan.watchdog else {},
        "governors": r.parse("governors", parse_governors, quiet=True) or {},
        "nvme_coalescing": coalescing,
        "dgx_release": r.parse("dgx-release", parse_os_release, quiet=True) if not plan.core_only else None,
    }
