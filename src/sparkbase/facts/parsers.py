"""Pure parsers: one command's output in, one typed value out; no host needed.

Each takes the text a real DGX OS node prints (see `docs/emulation.md`) and raises
`ValueError` on text it cannot read, so a garbled answer is recorded, never guessed at.
"""

from __future__ import annotations

import json
import re

from sparkbase.facts.model import DkmsEntry, GpuFacts, Interface, ModuleInfo, SwapEntry, UnitState

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
