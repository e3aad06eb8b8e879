"""Pure parsers: one command's output in, one typed value out; no host needed.

Each takes the text a real DGX OS node prints (see `docs/emulation.md`) and raises
`ValueError` on text it cannot read, so a garbled answer is recorded, never guessed at.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from sparkbase.facts.model import (
    DkmsEntry,
    FstabEntry,
    GpuFacts,
    GrubBoot,
    GrubEntry,
    Interface,
    ModuleInfo,
    SwapEntry,
    UnitState,
)

#: `CPU part` of the GB10's Cortex-X925 (fast) cores
FAST_CPU_PART = "0xd85"
SWAP_MAGIC = "SWAPSPACE2"


def parse_single_line(text: str) -> str:
    """A command that prints one word/line (`uname -r`, a sysfs file): stripped, non-empty."""
    value = text.strip()
    if not value or "\n" in value:
        raise ValueError(f"expected one line, got {text!r}")
    return value


def parse_uname_rm(text: str) -> tuple[str, str]:
    """`uname -r -m` → (release, machine)."""
    words = text.split()
    if len(words) != 2:
        raise ValueError(f"expected 'RELEASE MACHINE', got {text!r}")
    return words[0], words[1]


def parse_page_size(text: str) -> int:
    """`getconf PAGESIZE` → bytes."""
    value = parse_single_line(text)
    if not value.isdigit():
        raise ValueError(f"not a page size: {value!r}")
    return int(value)


def parse_cmdline(text: str) -> tuple[str, ...]:
    """`/proc/cmdline` → its arguments, in order."""
    return tuple(text.split())


def parse_fast_cpus(cpuinfo: str) -> tuple[int, ...]:
    """`/proc/cpuinfo` → processors whose `CPU part` is the Cortex-X925's (0xd85)."""
    fast: list[int] = []
    processor: int | None = None
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "processor":
            processor = int(value)
        elif key == "CPU part" and processor is not None and value.lower() == FAST_CPU_PART:
            fast.append(processor)
    return tuple(sorted(fast))


def parse_thp(text: str) -> str:
    """THP `enabled`: `always [madvise] never` → `madvise`; a bare `never` → `never`."""
    words = text.split()
    selected = [word[1:-1] for word in words if word.startswith("[") and word.endswith("]")]
    if len(selected) == 1:
        return selected[0]
    if len(words) == 1 and not selected:
        return words[0]
    raise ValueError(f"cannot tell the THP mode from {text!r}")


def parse_nvidia_smi_query(text: str, status: int) -> GpuFacts:
    """`nvidia-smi --query-gpu=driver_version,clocks.sm,power.draw --format=csv,noheader,nounits`.

    A failing nvidia-smi (no driver, library mismatch, latched NVML) is a fact too: the
    error is recorded with its exit status.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if status != 0 or len(lines) != 1:
        message = " ".join(line.strip() for line in lines) or "no output"
        return GpuFacts(error=f"nvidia-smi exit {status}: {message}")
    fields = [field.strip() for field in lines[0].split(",")]
    if len(fields) != 3:
        return GpuFacts(error=f"unexpected nvidia-smi output: {lines[0]!r}")
    driver, clock, power = fields
    return GpuFacts(
        driver_version=driver,
        sm_clock_mhz=int(float(clock)) if _is_number(clock) else None,
        power_w=float(power) if _is_number(power) else None,
    )


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def parse_proc_modules(text: str) -> frozenset[str]:
    """`/proc/modules` (or `ls -1 /sys/module`) → names of loaded modules."""
    return frozenset(line.split()[0] for line in text.splitlines() if line.strip())


_DKMS_LINE = re.compile(
    r"^(?P<name>[^/\s,]+)/(?P<version>[^,\s]+)"
    r"(?:, (?P<kernel>[^,\s]+), (?P<arch>[^:\s]+))?: (?P<status>[a-z ]+?)(?: \(.*\))?$"
)


def parse_dkms_status(text: str) -> tuple[DkmsEntry, ...]:
    """`dkms status` lines (`name/ver, kernel, arch: installed`, or `name/ver: added`)."""
    entries: list[DkmsEntry] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("Warning", "Error")):
            continue
        match = _DKMS_LINE.match(line)
        if match is None:
            raise ValueError(f"unreadable dkms status line: {line!r}")
        entries.append(
            DkmsEntry(
                name=match["name"],
                version=match["version"],
                kernel=match["kernel"],
                arch=match["arch"],
                status=match["status"],
            )
        )
    return tuple(entries)


def parse_modinfo(text: str, status: int) -> ModuleInfo:
    """`modinfo NAME` (`key:   value` lines) → the fields the audit reads."""
    if status != 0:
        return ModuleInfo(error=" ".join(text.split()) or f"modinfo exit {status}")
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key and not key.startswith(" ") and key.strip() not in values:
            values[key.strip()] = value.strip()
    return ModuleInfo(
        filename=values.get("filename"),
        version=values.get("version"),
        vermagic=values.get("vermagic"),
        signer=values.get("signer") or None,
        sig_key=(values.get("sig_key") or "").lower() or None,
    )


def parse_sb_state(text: str) -> bool:
    """`mokutil --sb-state` → Secure Boot on?"""
    lowered = text.lower()
    if "secureboot enabled" in lowered:
        return True
    if "secureboot disabled" in lowered or "not supported" in lowered:
        return False
    raise ValueError(f"cannot read the Secure Boot state from {text!r}")


def parse_mok_enrolled(text: str) -> tuple[str, ...]:
    """`mokutil --list-enrolled` → SHA-1 fingerprints (lower-case, colon-separated)."""
    found = re.findall(r"SHA1 Fingerprint:\s*([0-9A-Fa-f:]{59})", text)
    return tuple(fingerprint.lower() for fingerprint in found)


def parse_swapon_show(text: str) -> tuple[SwapEntry, ...]:
    """`swapon --show=NAME,SIZE --bytes --noheadings` → active swap areas."""
    entries: list[SwapEntry] = []
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if len(words) != 2 or not words[1].isdigit():
            raise ValueError(f"unreadable swapon line: {line!r}")
        entries.append(SwapEntry(name=words[0], size_bytes=int(words[1])))
    return tuple(entries)


def parse_swap_header(at_4k: str, at_64k: str) -> int | None:
    """Page size a swap header was written for, from the 10 bytes ending at 4096 / 65536.

    `mkswap` writes `SWAPSPACE2` so that it ends at byte `pagesize`; None when neither
    place holds it (not a swap file, or an unreadable one).
    """
    if at_4k.strip() == SWAP_MAGIC:
        return 4096
    if at_64k.strip() == SWAP_MAGIC:
        return 65536
    return None


def parse_systemctl_show(text: str, units: list[str]) -> dict[str, dict[str, str]]:
    """`systemctl show -p P1 -p P2 U1 U2…` → unit → property → value.

    systemd prints one block per unit, in the order given (blank lines between blocks on a
    real host); a block also ends when a property repeats.
    """
    blocks: list[dict[str, str]] = [{}]
    for line in text.splitlines():
        if not line.strip():
            if blocks[-1]:
                blocks.append({})
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"unreadable systemctl show line: {line!r}")
        if key in blocks[-1]:
            blocks.append({})
        blocks[-1][key] = value.strip()
    blocks = [block for block in blocks if block]
    if len(blocks) != len(units):
        raise ValueError(f"systemctl show gave {len(blocks)} blocks for {len(units)} units")
    return dict(zip(units, blocks, strict=True))


def unit_state(properties: dict[str, str]) -> UnitState:
    """The two properties the audit reads, as a `UnitState`."""
    return UnitState(
        unit_file_state=properties.get("UnitFileState", ""),
        active_state=properties.get("ActiveState", ""),
    )


def parse_sha256sum(text: str) -> dict[str, str | None]:
    """`sha256sum P1 P2…` (errors merged in) → path → hash, None for unreadable files."""
    hashes: dict[str, str | None] = {}
    for line in text.splitlines():
        match = re.match(r"^\\?([0-9a-f]{64}) [ *](.+)$", line)
        if match:
            hashes[match[2]] = match[1]
            continue
        missing = re.match(r"^sha256sum: (.+?): ", line)
        if missing:
            hashes[missing[1]] = None
    return hashes


def parse_stamp(text: str) -> dict[str, object]:
    """The stamp JSON sparkbase writes on a converged node."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("the stamp is not a JSON object")
    return data


def parse_ip_addr_json(text: str) -> dict[str, Interface]:
    """`ip -j addr show` → netdev → MTU, operstate and IPv4 addresses."""
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("ip -j did not print a list")
    interfaces: dict[str, Interface] = {}
    for link in data:
        addresses = tuple(
            f"{addr['local']}/{addr['prefixlen']}"
            for addr in link.get("addr_info", [])
            if addr.get("family") == "inet"
        )
        interfaces[link["ifname"]] = Interface(
            name=link["ifname"],
            mtu=int(link["mtu"]),
            operstate=str(link.get("operstate", "UNKNOWN")),
            addresses=addresses,
        )
    return interfaces


def parse_ls(text: str) -> tuple[str, ...]:
    """`ls -1 DIR` → entries."""
    return tuple(sorted(line.strip() for line in text.splitlines() if line.strip()))


def parse_governors(text: str) -> dict[int, str]:
    """`grep . /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor` → CPU → governor."""
    governors: dict[int, str] = {}
    for line in text.splitlines():
        match = re.match(r"^/sys/devices/system/cpu/cpu(\d+)/cpufreq/scaling_governor:(.+)$", line)
        if match:
            governors[int(match[1])] = match[2].strip()
    return governors


def parse_dpkg_query(text: str) -> dict[str, str]:
    """`dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\n' P…` → installed versions.

    The status abbreviation is want/state/error (`ii `, held `hi `): installed means state
    `i`. Packages dpkg knows but has removed (`rc`, `un`) do not count; names it has never
    heard of only appear on stderr.
    """
    installed: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2][1:2] == "i":
            installed[parts[0]] = parts[1]
    return installed


def parse_kv_conf(text: str) -> dict[str, str]:
    """`KEY=value` lines (nccl.conf): comments and blanks ignored."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


# --- GRUB -----------------------------------------------------------------------------

_GRUB_MENU = re.compile(r"""^\s*(?P<kind>menuentry|submenu)\s+(?P<q>['"])(?P<title>.*?)(?P=q)(?P<rest>.*)$""")
_GRUB_ID = re.compile(r"""\$menuentry_id_option\s+(['"])(?P<id>.*?)\1""")
_GRUB_LINUX = re.compile(r"^\s*linux\s+(?:\([^)]*\))?\S*/vmlinuz-(?P<release>\S+)")
_GRUB_SET_DEFAULT = re.compile(r"""^\s*set\s+default=(?P<q>["']?)(?P<value>[^"']*)(?P=q)\s*$""")


@dataclass
class _MenuItem:
    kind: str
    title: str
    ident: str | None
    path: str
    release: str | None = None
    children: list[_MenuItem] = field(default_factory=list)


def parse_grubenv(text: str) -> dict[str, str]:
    """/boot/grub/grubenv (`key=value` lines, `#`-padded to 1024 bytes) → variables."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key] = value
    return values


def _grub_menu(text: str) -> tuple[list[_MenuItem], list[str]]:
    """The menu tree of a grub.cfg and every `set default=` value, in file order."""
    top: list[_MenuItem] = []
    stack: list[_MenuItem | None] = []  # None: a block that is not a menu (function, if-less {)
    defaults: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        found = _GRUB_SET_DEFAULT.match(line)
        if found is not None:
            defaults.append(found["value"])
            continue
        menu = _GRUB_MENU.match(line)
        if menu is not None and line.endswith("{"):
            parent = next((item for item in reversed(stack) if item is not None), None)
            ident = _GRUB_ID.search(menu["rest"])
            path = f"{parent.path}>{menu['title']}" if parent else menu["title"]
            item = _MenuItem(menu["kind"], menu["title"], ident["id"] if ident else None, path)
            (parent.children if parent else top).append(item)
            stack.append(item)
            continue
        linux = _GRUB_LINUX.match(line)
        if linux is not None and stack and stack[-1] is not None and stack[-1].kind == "menuentry":
            stack[-1].release = linux["release"]
            continue
        if line == "}":
            if stack:
                stack.pop()
        elif line.endswith("{"):
            stack.append(None)
    return top, defaults


def _resolve(menu: list[_MenuItem], name: str) -> _MenuItem | None:
    """The entry GRUB's `default` names: `>`-separated parts, each an index, id or title."""
    items = menu
    found: _MenuItem | None = None
    for part in (name.strip() or "0").split(">"):
        if part.isdigit():
            index = int(part)
            found = items[index] if index < len(items) else None
        else:
            found = next((i for i in items if i.ident == part), None) or next(
                (i for i in items if i.title == part), None
            )
        if found is None:
            return None
        items = found.children
    if found is not None and found.kind == "submenu":
        return None  # a submenu is not bootable
    return found


def _entry(item: _MenuItem | None) -> GrubEntry | None:
    if item is None:
        return None
    return GrubEntry(item.path, item.release, "recovery mode" in item.title)


def _walk(items: list[_MenuItem]) -> list[_MenuItem]:
    out: list[_MenuItem] = []
    for item in items:
        if item.kind == "menuentry":
            out.append(item)
        out += _walk(item.children)
    return out


def _expand_grub_vars(value: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m[1], ""), value)


def parse_grub(cfg: str, grubenv: str) -> GrubBoot:
    """What GRUB boots next and normally, from grub.cfg and grubenv (as GRUB reads them).

    The normal default is the `set default=` that does not read `next_entry` (variables,
    `${saved_entry}` above all, read from grubenv); the one-shot is grubenv's `next_entry`,
    taken only when grub.cfg has the `set default="${next_entry}"` branch.
    """
    menu, defaults = _grub_menu(cfg)
    env = parse_grubenv(grubenv)
    honours_oneshot = any("next_entry" in value for value in defaults)
    normal = [value for value in defaults if "next_entry" not in value]
    default = _expand_grub_vars(normal[-1], env) if normal else "0"
    oneshot = (env.get("next_entry") or None) if honours_oneshot else None
    return GrubBoot(
        entries=tuple(GrubEntry(i.path, i.release, "recovery mode" in i.title) for i in _walk(menu)),
        default=default or "0",
        default_entry=_entry(_resolve(menu, default)),
        oneshot=oneshot,
        oneshot_entry=_entry(_resolve(menu, oneshot)) if oneshot else None,
    )


# --- /etc files -----------------------------------------------------------------------


def parse_fstab(text: str) -> tuple[FstabEntry, ...]:
    """/etc/fstab → its entries (comments and blank lines skipped; fields by whitespace)."""
    entries: list[FstabEntry] = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) < 3:
            raise ValueError(f"unreadable fstab line: {line!r}")
        entries.append(FstabEntry(words[0], words[1], words[2], words[3] if len(words) > 3 else "defaults"))
    return tuple(entries)


def parse_os_release(text: str) -> dict[str, str]:
    """/etc/dgx-release (os-release style `KEY="value"`) → KEY → value.

    DGX OS appends `DGX_OTA_VERSION`/`DGX_OTA_DATE` lines at every over-the-air update,
    so a later line wins.
    """
    import shlex

    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        words = shlex.split(value) if value else [""]
        values[key.strip()] = " ".join(words)
    return values


def parse_module_attrs(text: str) -> dict[str, str]:
    """`grep -H . /sys/module/M/version /sys/module/M/srcversion…` → `M.version` → value."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = re.match(r"^/sys/module/([^/]+)/(version|srcversion):(.*)$", line)
        if match:
            found[f"{match[1]}.{match[2]}"] = match[3].strip()
    return found
