"""pyinfra facts the deploy reads: each a shell command plus a pure parser.

Commands always exit 0 (pyinfra marks a host failed when a fact command fails), quote
every argument, and print `key=value` lines where a parser must tell fields apart. The
`parse_*` functions need no host and are unit-tested on captured output.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, NamedTuple

from pyinfra.api.facts import FactBase

MISSING = "__sparkbase_missing__"
_FINGERPRINT = re.compile(r"SHA1 Fingerprint:\s*([0-9A-Fa-f:]+)")
_GRUB_DEFAULT = re.compile(r'^\s*set default="([^"$]*)"\s*$')
_GRUB_LINUX = re.compile(r"^\s*linux\s+/boot/vmlinuz-(\S+)\s*(.*)$")


def _q(value: str) -> str:
    return shlex.quote(value)


def parse_key_values(lines: list[str]) -> dict[str, str]:
    """`key=value` lines into a dict (later keys win; lines without `=` are ignored)."""
    out: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


# --- files ------------------------------------------------------------------------------


def parse_file_state(lines: list[str]) -> tuple[int, str] | None:
    """`stat -c %a` then the sha256 -> (mode, sha256); None when the file is missing."""
    if not lines or lines[0] == MISSING or len(lines) < 2:
        return None
    return int(lines[0], 8), lines[1].split()[0]


#: where a file is uploaded before it is checked and renamed over the real path
TEMP_SUFFIX = ".sparkbase-new"
LEFTOVER = "__sparkbase_leftover__"


class FileInfo(NamedTuple):
    """A regular file's mode and sha256, and whether an interrupted upload sits beside it."""

    mode: int
    sha256: str
    leftover: bool = False


def parse_file_info(lines: list[str]) -> FileInfo | None:
    """`FileState` output -> FileInfo; None when the file is missing."""
    found = parse_file_state([line for line in lines if line != LEFTOVER])
    if found is None:
        return None
    return FileInfo(found[0], found[1], LEFTOVER in lines)


class FileState(FactBase[FileInfo | None]):
    """Mode and sha256 of a regular file (and any leftover upload), or None when it does not exist."""

    def command(self, path: str) -> str:
        p = _q(path)
        temp = _q(path + TEMP_SUFFIX)
        return (f"if [ -f {p} ]; then stat -c %a {p}; sha256sum {p}; else echo {MISSING}; fi; "
                f"if [ -e {temp} ]; then echo {LEFTOVER}; fi")

    def process(self, output: list[str]) -> FileInfo | None:
        return parse_file_info(output)


class FileText(FactBase[str | None]):
    """A file's text (for diffs of non-secret files), or None when it does not exist."""

    def command(self, path: str) -> str:
        p = _q(path)
        return f"if [ -f {p} ]; then cat {p}; else echo {MISSING}; fi"

    def process(self, output: list[str]) -> str | None:
        if output == [MISSING]:
            return None
        return "".join(f"{line}\n" for line in output)


# --- boot state -------------------------------------------------------------------------

BOOT_COMMAND = "; ".join(
    [
        'printf "kernel=%s\\n" "$(uname -r)"',
        'printf "page_size=%s\\n" "$(getconf PAGESIZE)"',
        'printf "cmdline=%s\\n" "$(cat /proc/cmdline)"',
        'printf "thp=%s\\n" "$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"',
        "printf \"modules=%s\\n\" \"$(lsmod 2>/dev/null | awk 'NR > 1 {print $1}' | tr '\\n' ' ')\"",
        'printf "drm_modeset=%s\\n" "$(cat /sys/module/nvidia_drm/parameters/modeset 2>/dev/null)"',
        'printf "drm_fbdev=%s\\n" "$(cat /sys/module/nvidia_drm/parameters/fbdev 2>/dev/null)"',
    ]
)


def thp_selected(text: str) -> str:
    """The selected THP mode from `always [madvise] never` or a bare `never`."""
    match = re.search(r"\[(\w+)\]", text)
    if match:
        return match.group(1)
    return text.strip()


def parse_boot_state(lines: list[str]) -> dict[str, Any]:
    """What the node booted: kernel, page size, command line, THP, modules, drm params."""
    raw = parse_key_values(lines)
    page = raw.get("page_size", "")
    return {
        "kernel": raw.get("kernel", ""),
        "page_size": int(page) if page.isdigit() else 0,
        "cmdline": raw.get("cmdline", "").split(),
        "thp": thp_selected(raw.get("thp", "")),
        "modules": sorted(raw.get("modules", "").split()),
        "drm_modeset": raw.get("drm_modeset", ""),
        "drm_fbdev": raw.get("drm_fbdev", ""),
    }


class BootState(FactBase[dict[str, Any]]):
    """Running kernel, page size, /proc/cmdline, THP mode, loaded modules, nvidia-drm params."""

    def command(self) -> str:
        return BOOT_COMMAND

    @staticmethod
    def default() -> dict[str, Any]:
        return parse_boot_state([])

    def process(self, output: list[str]) -> dict[str, Any]:
        return parse_boot_state(output)


# --- Secure Boot / MOK / DKMS -----------------------------------------------------------


def parse_mok_state(lines: list[str]) -> dict[str, Any]:
    """`mokutil --sb-state`, `--list-enrolled`, `--list-new` output split by markers."""
    section = "sb"
    state: dict[str, Any] = {"secure_boot": False, "enrolled": [], "pending": []}
    for line in lines:
        if line == "--enrolled--":
            section = "enrolled"
            continue
        if line == "--pending--":
            section = "pending"
            continue
        if section == "sb" and "SecureBoot enabled" in line:
            state["secure_boot"] = True
        match = _FINGERPRINT.search(line)
        if match and section in ("enrolled", "pending"):
            state[section].append(match.group(1).lower())
    return state


class MokState(FactBase[dict[str, Any]]):
    """Secure Boot state and the SHA-1 fingerprints of enrolled and pending MOK keys."""

    def command(self) -> str:
        return (
            "mokutil --sb-state 2>&1 || true; echo --enrolled--; "
            "mokutil --list-enrolled 2>/dev/null || true; echo --pending--; "
            "mokutil --list-new 2>/dev/null || true"
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return parse_mok_state([])

    def process(self, output: list[str]) -> dict[str, Any]:
        return parse_mok_state(output)


def parse_dkms_state(lines: list[str], kernel: str) -> dict[str, Any]:
    """`dkms status NAME/VER -k REL` plus `sig_key=` from modinfo -> installed, sig_key."""
    installed = any(
        line.rstrip().endswith(": installed") and f", {kernel}," in line for line in lines
    )
    sig_key = parse_key_values([line for line in lines if line.startswith("sig_key=")]).get(
        "sig_key", ""
    )
    return {"installed": installed, "sig_key": sig_key.lower()}


class DkmsState(FactBase[dict[str, Any]]):
    """Whether a DKMS module is installed for a kernel and which key signed it."""

    def command(self, dkms_name: str, version: str, kernel: str, module: str) -> str:
        self.kernel = kernel
        return (
            f"dkms status {_q(f'{dkms_name}/{version}')} -k {_q(kernel)} 2>/dev/null || true; "
            f'printf "sig_key=%s\\n" "$(modinfo -k {_q(kernel)} -F sig_key {_q(module)} 2>/dev/null)"'
        )

    @staticmethod
    def default() -> dict[str, Any]:
        return {"installed": False, "sig_key": ""}

    def process(self, output: list[str]) -> dict[str, Any]:
        return parse_dkms_state(output, getattr(self, "kernel", ""))


def parse_dkms_builds(lines: list[str], dkms_name: str, version: str) -> list[str]:
    """`dkms status NAME/VER` -> the kernels it is built for (`""` for an added-only tree)."""
    prefix = f"{dkms_name}/{version}"
    builds: list[str] = []
    for line in lines:
        line = line.strip()
        if line.startswith(prefix + ","):
            builds.append(line.split(",")[1].strip())
        elif line.startswith(prefix + ":"):
            builds.append("")
    return builds


class DkmsBuilds(FactBase[list[str]]):
    """The kernels a DKMS module/version is built or installed for (empty: DKMS has none)."""

    def command(self, dkms_name: str, version: str) -> str:
        self.target = (dkms_name, version)
        return f"dkms status {_q(f'{dkms_name}/{version}')} 2>/dev/null || true"

    @staticmethod
    def default() -> list[str]:
        return []

    def process(self, output: list[str]) -> list[str]:
        name, version = getattr(self, "target", ("", ""))
        return parse_dkms_builds(output, name, version)


def parse_key_dir(lines: list[str]) -> dict[str, Any] | None:
    """`MokKeyDir` output -> {"fingerprint": aa:bb:… of the certificate, or None}; None: no dir."""
    if not lines or lines == [MISSING]:
        return None
    raw = parse_key_values(lines)
    digest = raw.get("sha1", "").split()[0] if raw.get("sha1") else ""
    if len(digest) != 40:
        return {"fingerprint": None}
    return {"fingerprint": ":".join(digest[i : i + 2] for i in range(0, 40, 2)).lower()}


class MokKeyDir(FactBase[dict[str, Any] | None]):
    """Whether a MOK key directory exists, and the SHA-1 fingerprint of the certificate in it
    (never reads the private key)."""

    def command(self, path: str, certificate: str) -> str:
        d, c = _q(path), _q(certificate)
        return (f"if [ -d {d} ]; then echo dir=yes; if [ -f {c} ]; then "
                f'printf "sha1=%s\\n" "$(sha1sum {c})"; fi; else echo {MISSING}; fi')

    def process(self, output: list[str]) -> dict[str, Any] | None:
        return parse_key_dir(output)


# --- packages ---------------------------------------------------------------------------


class HeldPackages(FactBase[list[str]]):
    """Packages marked hold (`apt-mark showhold`)."""

    def command(self) -> str:
        return "apt-mark showhold 2>/dev/null || true"

    @staticmethod
    def default() -> list[str]:
        return []

    def process(self, output: list[str]) -> list[str]:
        return sorted(line.strip() for line in output if line.strip())


# --- GRUB, sysctl, swap, systemd --------------------------------------------------------


def parse_grub_cfg(lines: list[str]) -> dict[str, Any]:
    """grub.cfg -> its default entry and the kernel arguments of each release's entry."""
    default: str | None = None
    entries: dict[str, list[str]] = {}
    for line in lines:
        match = _GRUB_DEFAULT.match(line)
        if match:
            default = match.group(1)
            continue
        linux = _GRUB_LINUX.match(line)
        if linux:
            entries.setdefault(linux.group(1), linux.group(2).split())
    return {"default": default, "entries": entries}


class GrubConfig(FactBase[dict[str, Any]]):
    """The generated /boot/grub/grub.cfg: default entry and per-release kernel arguments."""

    def command(self) -> str:
        return "cat /boot/grub/grub.cfg 2>/dev/null || true"

    @staticmethod
    def default() -> dict[str, Any]:
        return {"default": None, "entries": {}}

    def process(self, output: list[str]) -> dict[str, Any]:
        return parse_grub_cfg(output)


def parse_sysctls(lines: list[str]) -> dict[str, str]:
    """`sysctl KEY…` output (`key = value`) -> key -> value with whitespace normalised."""
    out: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = " ".join(value.split())
    return out


class Sysctls(FactBase[dict[str, str]]):
    """Live values of the given sysctl keys."""

    def command(self, keys: tuple[str, ...]) -> str:
        return f"sysctl {' '.join(_q(k) for k in keys)} 2>/dev/null || true"

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def process(self, output: list[str]) -> dict[str, str]:
        return parse_sysctls(output)


SWAP_MAGIC = "SWAPSPACE2"
SWAP_PAGE_SIZES = (4096, 16384, 65536)


def parse_swap_file(lines: list[str]) -> dict[str, Any] | None:
    """size= and header= lines -> {"size": bytes, "header_page_size": int | None}."""
    if not lines or lines == [MISSING]:
        return None
    raw = parse_key_values(lines)
    headers = [int(v) for v in raw.get("header", "").split() if v.isdigit()]
    size = raw.get("size", "0")
    return {
        "size": int(size) if size.isdigit() else 0,
        "header_page_size": headers[0] if headers else None,
        "mode": int(raw["mode"], 8) if raw.get("mode", "").isdigit() else None,
    }


class SwapFile(FactBase[dict[str, Any] | None]):
    """Size, mode and swap-header page size of a swap file, or None when missing."""

    def command(self, path: str) -> str:
        p = _q(path)
        probes = " ".join(str(size) for size in SWAP_PAGE_SIZES)
        return (
            f"if [ -f {p} ]; then printf 'size=%s\\nmode=%s\\n' \"$(stat -c %s {p})\" "
            f'"$(stat -c %a {p})"; h=""; for ps in {probes}; do '
            f'if [ "$(dd if={p} bs=1 skip=$((ps - 10)) count=10 2>/dev/null)" = {SWAP_MAGIC} ]; '
            f'then h="$h $ps"; fi; done; printf "header=%s\\n" "$h"; else echo {MISSING}; fi'
        )

    def process(self, output: list[str]) -> dict[str, Any] | None:
        return parse_swap_file(output)


class ActiveSwaps(FactBase[list[str]]):
    """Paths of active swap areas (`swapon --show=NAME`)."""

    def command(self) -> str:
        return "swapon --show=NAME --noheadings 2>/dev/null || true"

    @staticmethod
    def default() -> list[str]:
        return []

    def process(self, output: list[str]) -> list[str]:
        return sorted(line.strip() for line in output if line.strip())


class UnitState(FactBase[dict[str, str]]):
    """`systemctl is-enabled` / `is-active` of a unit (enabled is empty when it is missing)."""

    def command(self, unit: str) -> str:
        u = _q(unit)
        return (
            f'printf "enabled=%s\\n" "$(systemctl is-enabled {u} 2>/dev/null)"; '
            f'printf "active=%s\\n" "$(systemctl is-active {u} 2>/dev/null)"'
        )

    @staticmethod
    def default() -> dict[str, str]:
        return {"enabled": "", "active": ""}

    def process(self, output: list[str]) -> dict[str, str]:
        raw = parse_key_values(output)
        return {"enabled": raw.get("enabled", ""), "active": raw.get("active", "")}


class DefaultTarget(FactBase[str]):
    """`systemctl get-default`."""

    def command(self) -> str:
        return "systemctl get-default 2>/dev/null || true"

    @staticmethod
    def default() -> str:
        return ""

    def process(self, output: list[str]) -> str:
        return output[0].strip() if output else ""


class ThpMode(FactBase[str]):
    """The selected transparent hugepage mode."""

    def command(self) -> str:
        return "cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || true"

    @staticmethod
    def default() -> str:
        return ""

    def process(self, output: list[str]) -> str:
        return thp_selected(" ".join(output))
