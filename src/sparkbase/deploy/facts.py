"""pyinfra facts the deploy reads: thin adapters over the one parser per command in
`sparkbase.facts.parsers`.

Each fact runs its commands fenced the way the audit's fact script fences them
(`facts.script.fenced_script`: a nonce marker read from stdin, which the fact batch sends;
stderr merged, as pyinfra passes facts stdout alone), splits the answer with the same
`split_sections`, and hands every section to the same parser the audit uses. So plan,
apply and audit cannot disagree about what a node is. Commands always exit 0 (pyinfra
marks a host failed when a fact command fails) and quote every argument.
"""

from __future__ import annotations

import base64
import binascii
import shlex
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any, NamedTuple, TypeVar

from pyinfra.api.exceptions import FactProcessError
from pyinfra.api.facts import FactBase

from sparkbase.deploy.reboot import STAGED_PATH
from sparkbase.facts import parsers as p
from sparkbase.facts.model import DkmsStatus, GrubBoot, Interface, ModuleInfo, MokCertificate, SecureBoot
from sparkbase.facts.model import UnitState as UnitStateValue
from sparkbase.facts.parsers.netplan import NetplanListing, parse_netplan_listing
from sparkbase.facts.script import (
    GRUB_CFG,
    GRUBENV,
    MODULES_SYS_COMMAND,
    NETPLAN_FILES_COMMAND,
    THP_PATH,
    Section,
    Sections,
    fenced_script,
    header_bytes,
    modules_section,
    new_marker,
    split_sections,
)

T = TypeVar("T")
MISSING = "__sparkbase_missing__"


def _q(value: str) -> str:
    return shlex.quote(value)


def _cmd(*argv: str) -> str:
    return " ".join(_q(arg) for arg in argv)


class _Fenced(FactBase[T]):
    """A fact whose command is several fenced sections, read back by `split_sections`.

    The command holds no marker: it reads one from its stdin (`fence_on_stdin`), which the
    fact batch sends (`deploy/fact_batch.py`, which also sets `marker` before `process`),
    so nothing on the node can print this fact's fences. A section printed twice or one
    the command never prints raises `SectionError`."""

    marker = ""
    names: frozenset[str] = frozenset()
    #: the command reads its fence marker from stdin (the fact batch provides it)
    fence_on_stdin = True

    def fenced(self, named: Sequence[tuple[str, str]]) -> str:
        """The command: each (name, command) fenced by the marker read from stdin; always
        exits 0 once the marker came."""
        self.marker = new_marker()  # replaced by the batch's before `process`
        self.names = frozenset(name for name, _ in named)
        # pyinfra hands `process` stdout alone: stderr stays merged into each section
        return fenced_script(named, apart=frozenset()) + "true"

    def sections(self, output: list[str]) -> Sections:
        """The answer split back into sections."""
        return split_sections("\n".join(output) + "\n", self.marker, expected=self.names)


class _FixedSections(_Fenced[T]):
    """A fenced fact with fixed sections (`named`) read by one pure function (`read`)."""

    named: Sequence[tuple[str, str]] = ()
    read: Callable[[Sections], T]

    def command(self) -> str:
        return self.fenced(self.named)

    # pyinfra declares `default` static but always calls it on an instance (`cls().default()`)
    def default(self) -> T:  # type: ignore[override]
        return type(self).read(Sections())

    def process(self, output: list[str]) -> T:
        return type(self).read(self.sections(output))


def _parsed(section: Section | None, parser: Callable[[str], T], default: T) -> T:
    """`parser(output)` of a section that exited 0, else `default` (never raises)."""
    if section is None or section.status != 0:
        return default
    try:
        return parser(section.output)
    except (ValueError, KeyError, TypeError):
        return default


# --- files ------------------------------------------------------------------------------

#: the name every upload's private temp directory starts with, beside the file it replaces
#: (`<path>.sparkbase-new.<random>`; 0.4.1 and before uploaded to `<path>.sparkbase-new`)
TEMP_SUFFIX = ".sparkbase-new"
#: the upload inside its private directory (`<path>.sparkbase-new.<hex>/new`)
TEMP_NAME = "new"
LEFTOVER = "__sparkbase_leftover__"
#: the first line of an answer about a symbolic link (its target, base64, follows)
LINK = "__sparkbase_link__"
#: the first line of an answer about something that is neither a file nor a link (`stat -c
#: %F` of it follows)
OTHER = "__sparkbase_other__"


def parse_key_values(lines: list[str]) -> dict[str, str]:
    """`key=value` lines into a dict (later keys win; lines without `=` are ignored)."""
    return p.parse_kv_conf("\n".join(lines))


def parse_file_state(lines: list[str]) -> tuple[int, str] | None:
    """`stat -c %a` then `sha256sum` -> (mode, sha256); None when the file is missing."""
    if not lines or lines[0] == MISSING or len(lines) < 2 or not lines[0].isdigit():
        return None
    digests = [digest for digest in p.parse_sha256sum("\n".join(lines[1:])).values() if digest]
    return (int(lines[0], 8), digests[0]) if digests else None


class Found(Enum):
    """What is at a path, read without following a symbolic link there."""

    REGULAR = "regular file"
    SYMLINK = "symbolic link"
    DIRECTORY = "directory"
    OTHER = "other"


class FileInfo(NamedTuple):
    """What is at a path: a regular file's mode and sha256, or (`found`) a symbolic link
    (`detail`: where it points, as text; never followed), a directory or another kind
    (`detail`: its kind as `stat` names it); and whether an interrupted upload sits beside it."""

    mode: int
    sha256: str
    leftover: bool = False
    found: Found = Found.REGULAR
    detail: str = ""

    @property
    def regular(self) -> bool:
        """Whether a regular file is there (the only thing sparkbase writes over)."""
        return self.found is Found.REGULAR


def _decoded(lines: list[str]) -> str:
    try:
        return base64.b64decode("".join(lines), validate=True).decode("utf-8", errors="replace")
    except binascii.Error:
        return "?"


def parse_file_info(lines: list[str]) -> FileInfo | None:
    """`FileState` output -> FileInfo; None when nothing is at the path."""
    leftover = LEFTOVER in lines
    lines = [line for line in lines if line != LEFTOVER]
    if lines[:1] == [LINK]:
        return FileInfo(0, "", leftover, Found.SYMLINK, _decoded(lines[1:]))
    if lines[:1] == [OTHER]:
        kind = " ".join(lines[1:]).strip() or "not a regular file"
        found = Found.DIRECTORY if kind == "directory" else Found.OTHER
        return FileInfo(0, "", leftover, found, kind)
    found_file = parse_file_state(lines)
    if found_file is None:
        return None
    return FileInfo(found_file[0], found_file[1], leftover)


def leftovers_glob(path: str) -> str:
    """Shell words matching every upload an interrupted run may have left beside `path`
    (this version's private directories and 0.4.1's fixed name)."""
    temp = _q(path + TEMP_SUFFIX)
    return f"{temp} {temp}.*"


#: the name of one upload's private directory: `<path>.sparkbase-new.` and 16 hex digits
_TEMP_DIR_NAME = "*" + TEMP_SUFFIX + "." + "[0-9a-f]" * 16


def is_leftover(var: str = "left") -> str:
    """Shell test: `$var` is what an interrupted upload of sparkbase left, by its shape, and
    nothing else: 0.4.1's fixed name as a regular file, or one of this version's private
    directories (its exact name) holding nothing or only the upload. A link, a directory
    with anything else in it, or another name is not sparkbase's: it is kept, never removed."""
    v = f'"${var}"'
    return (f'{{ [ ! -L {v} ] && case {v} in *{TEMP_SUFFIX}) [ -f {v} ];; {_TEMP_DIR_NAME}) [ -d {v} ] && '
            f'[ -z "$(ls -A -- {v} | grep -vx {TEMP_NAME})" ];; *) false;; esac; }}')


def what_is_at(path: str, regular: str) -> str:
    """Shell: print what is at `path` without following a link there (a link: `LINK` and its
    target in base64; neither file nor link: `OTHER` and its kind; nothing: `MISSING`); for
    a regular file run `regular` instead."""
    p_ = _q(path)
    return (f"if [ -L {p_} ]; then echo {LINK}; readlink -n -- {p_} | base64; "
            f"elif [ -f {p_} ]; then {regular}; "
            f"elif [ -e {p_} ]; then echo {OTHER}; stat -c %F -- {p_}; "
            f"else echo {MISSING}; fi")


class FileState(FactBase[FileInfo | None]):
    """Mode and sha256 of a regular file (and any leftover upload); what else is there when
    it is not a regular file (a link is never followed); None when nothing is there."""

    def command(self, path: str) -> str:
        p_ = _q(path)
        return (what_is_at(path, f"stat -c %a -- {p_}; sha256sum -- {p_}") + "; "
                f"for left in {leftovers_glob(path)}; do "
                f"if {is_leftover()}; then echo {LEFTOVER}; break; fi; done")

    def process(self, output: list[str]) -> FileInfo | None:
        return parse_file_info(output)


#: the first line of `FileText`'s answer for a file that exists (its base64 follows)
TEXT_FOLLOWS = "__sparkbase_text__"
#: a line of `FileText`'s answer when the file could not be read without following a link
UNREAD = "__sparkbase_unread__"


def file_text(data: bytes) -> str:
    """A file's bytes as `FileText` answers them: UTF-8 (a byte that is not shown as U+FFFD),
    each line ended by a newline, as pyinfra hands a `cat` of the file to a fact."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines[-1] == "":
        lines.pop()
    return "".join(f"{line}\n" for line in lines)


class FileText(FactBase[str | None]):
    """A regular file's text (for diffs of non-secret files, and the one fstab sparkbase
    edits), or None when no regular file is there: nothing, a symbolic link (never followed:
    its target's text is never read), a directory or another kind (`FileState` says which).

    The node sends the file base64-encoded: paramiko decodes a command's output as strict
    UTF-8, and a file with one byte that is not (a Latin-1 comment) cut pyinfra's reading
    short with a traceback, so `plan` showed an empty diff. Such a byte now reads as U+FFFD,
    whose text no longer hashes to the file's sha256 (the fstab editor then keeps the file).
    The file is opened with O_NOFOLLOW (`dd iflag=nofollow`): a link put there after the
    `[ -L ]` test fails the read (`UNREAD`) instead of being read through."""

    def command(self, path: str) -> str:
        p_ = _q(path)
        read = (f"echo {TEXT_FOLLOWS}; {{ {{ dd if={p_} iflag=nofollow,nonblock status=none "
                f"|| echo {UNREAD} >&3; }} | base64; }} 3>&1")
        return what_is_at(path, read)

    def process(self, output: list[str]) -> str | None:
        if output[:1] in ([MISSING], [LINK], [OTHER]) or UNREAD in output:
            return None
        if not output or output[0] != TEXT_FOLLOWS:
            raise FactProcessError(f"FileText: unexpected answer {output[:1]!r}")
        try:
            data = base64.b64decode("".join(output[1:]), validate=True)
        except binascii.Error as exc:
            raise FactProcessError(f"FileText: the file's base64 does not decode: {exc}") from exc
        return file_text(data)


class NetplanFiles(FactBase[NetplanListing]):
    """Every file netplan reads (/lib, /etc and /run/netplan/*.yaml) with its exact text, sha256
    and mode, by the audit's command and parser (`facts.parsers.netplan`); empty when none."""

    def command(self) -> str:
        return NETPLAN_FILES_COMMAND

    @staticmethod
    def default() -> NetplanListing:
        return NetplanListing()

    def process(self, output: list[str]) -> NetplanListing:
        return parse_netplan_listing("\n".join(output))


# --- boot state -------------------------------------------------------------------------

BOOT_SECTIONS = (
    ("uname", _cmd("uname", "-r", "-m")),
    ("pagesize", _cmd("getconf", "PAGESIZE")),
    ("cmdline", _cmd("cat", "/proc/cmdline")),
    ("thp", _cmd("cat", THP_PATH)),
    ("modules", _cmd("cat", "/proc/modules")),
    ("modules-sys", MODULES_SYS_COMMAND),
    ("drm_modeset", _cmd("cat", "/sys/module/nvidia_drm/parameters/modeset")),
    ("drm_fbdev", _cmd("cat", "/sys/module/nvidia_drm/parameters/fbdev")),
    ("staged", _cmd("cat", STAGED_PATH)),
)


def parse_staged(text: str) -> list[str]:
    """`STAGED_PATH` -> what was staged for the next boot, each once, in order."""
    return list(dict.fromkeys(line.strip() for line in text.split("\n") if line.strip()))


def boot_state(found: Sections) -> dict[str, Any]:
    """What the node booted: kernel, page size, command line, THP, modules, drm params; and
    what an earlier apply staged for the next boot (a missing file: nothing)."""
    uname = _parsed(found.get("uname"), p.parse_uname_rm, ("", ""))
    return {
        "kernel": uname[0],
        "page_size": _parsed(found.get("pagesize"), p.parse_page_size, 0),
        "cmdline": list(_parsed(found.get("cmdline"), p.parse_cmdline, tuple[str, ...]())),
        "thp": _parsed(found.get("thp"), p.parse_thp, ""),
        "modules": sorted(_parsed(found.get(modules_section(found)), p.parse_proc_modules, frozenset[str]())),
        "drm_modeset": _parsed(found.get("drm_modeset"), p.parse_single_line, ""),
        "drm_fbdev": _parsed(found.get("drm_fbdev"), p.parse_single_line, ""),
        "staged": _parsed(found.get("staged"), parse_staged, list[str]()),
    }


class BootState(_FixedSections[dict[str, Any]]):
    """Running kernel, page size, /proc/cmdline, THP mode, loaded modules, nvidia-drm params,
    and the reboot an earlier apply staged."""

    named = BOOT_SECTIONS
    read = staticmethod(boot_state)


# --- Secure Boot / MOK / DKMS -----------------------------------------------------------

MOK_SECTIONS = (
    ("sb-state", _cmd("mokutil", "--sb-state")),
    ("mok-enrolled", _cmd("mokutil", "--list-enrolled")),
    ("mok-pending", _cmd("mokutil", "--list-new")),
)


def mok_state(found: Sections) -> dict[str, Any]:
    """Secure Boot state, and the enrolled and pending MOK certificates (and fingerprints)."""
    sb = found.get("sb-state")
    secure_boot: SecureBoot | None = None
    if sb is not None:
        try:
            secure_boot = p.parse_sb_state(sb.output + sb.stderr)
        except ValueError:
            secure_boot = None
    enrolled = _parsed(found.get("mok-enrolled"), p.parse_mok_certificates, tuple[MokCertificate, ...]())
    pending_section = found.get("mok-pending")
    # `mokutil --list-new` exits non-zero when nothing is pending ("MokNew is empty")
    pending = p.parse_mok_certificates(pending_section.output) if pending_section else enrolled[:0]
    return {
        "secure_boot": secure_boot,
        "certificates": list(enrolled),
        "pending_certificates": list(pending),
        "enrolled": [cert.fingerprint for cert in enrolled],
        "pending": [cert.fingerprint for cert in pending],
    }


class MokState(_FixedSections[dict[str, Any]]):
    """Secure Boot state and the enrolled and pending MOK certificates."""

    named = MOK_SECTIONS
    read = staticmethod(mok_state)


def dkms_state(found: Sections, dkms_name: str, version: str, kernel: str) -> dict[str, Any]:
    """Whether DKMS has `dkms_name/version` installed for `kernel`, and the target kernel's
    `modinfo` of the module (its signature as kmod reports it)."""
    status = _parsed(found.get("dkms"), p.parse_dkms_status, DkmsStatus())
    entries = [entry for entry in status.entries
               if entry.name == dkms_name and entry.version == version and entry.kernel == kernel
               and entry.status == "installed"]
    section = found.get("modinfo")
    info = (p.parse_modinfo(section.output + (section.stderr if section.status else ""), section.status)
            if section is not None else ModuleInfo(error="no modinfo answer"))
    # `installed`: DKMS installed what it built (no WARNING note beside the state, as the audit
    # judges it); `warnings`: what DKMS says of a tree it lists as installed but did not build
    return {"installed": any(entry.installed for entry in entries),
            "present": bool(entries),
            "warnings": [warning for entry in entries for warning in entry.warnings],
            "info": info, "noise": list(status.noise)}


class DkmsState(_Fenced[dict[str, Any]]):
    """Whether a DKMS module is installed for a kernel, and its signature (`modinfo -k`)."""

    def command(self, dkms_name: str, version: str, kernel: str, module: str) -> str:
        self.target = (dkms_name, version, kernel)
        return self.fenced([
            ("dkms", _cmd("dkms", "status", f"{dkms_name}/{version}", "-k", kernel)),
            ("modinfo", _cmd("modinfo", "-k", kernel, module)),
        ])

    @staticmethod
    def default() -> dict[str, Any]:
        return {"installed": False, "info": ModuleInfo(error="no answer"), "noise": []}

    def process(self, output: list[str]) -> dict[str, Any]:
        name, version, kernel = getattr(self, "target", ("", "", ""))
        return dkms_state(self.sections(output), name, version, kernel)


def parse_dkms_builds(lines: list[str], dkms_name: str, version: str) -> list[str]:
    """`dkms status NAME/VER` -> the kernels it is built for (`""` for an added-only tree)."""
    status = p.parse_dkms_status("\n".join(lines))
    return [
        entry.kernel or ""
        for entry in status.entries
        if entry.name == dkms_name and entry.version == version
    ]


class DkmsBuilds(FactBase[list[str]]):
    """The kernels a DKMS module/version is built or installed for (empty: DKMS has none)."""

    def command(self, dkms_name: str, version: str) -> str:
        self.target = (dkms_name, version)
        return f"{_cmd('dkms', 'status', f'{dkms_name}/{version}')} 2>/dev/null || true"

    @staticmethod
    def default() -> list[str]:
        return []

    def process(self, output: list[str]) -> list[str]:
        name, version = getattr(self, "target", ("", ""))
        return parse_dkms_builds(output, name, version)


#: the file apply writes into a DKMS source tree it placed: the sha256 of the tarball it
#: came from (a tree without it, or with another sha256, was not placed from that tarball)
SOURCE_STAMP = ".sparkbase-source"


def parse_dkms_source(lines: list[str]) -> dict[str, Any]:
    """`DkmsSourceState` output -> {"present": the tree exists, "sha256": its stamp (None:
    none), "registered": DKMS knows NAME/VERSION}."""
    stamp = next((line.removeprefix("stamp ").strip() for line in lines if line.startswith("stamp ")), "")
    present = "tree present" in lines or bool(stamp)
    registered = any(line.startswith("dkms ") and line.removeprefix("dkms ").strip() for line in lines)
    return {"present": present, "sha256": stamp or None, "registered": registered}


class DkmsSourceState(FactBase[dict[str, Any]]):
    """A DKMS source tree in /usr/src/NAME-VERSION: there at all, the tarball sha256 apply
    stamped into it, and whether DKMS has it registered (`dkms status NAME/VERSION`)."""

    def command(self, dkms_name: str, version: str) -> str:
        tree = f"/usr/src/{dkms_name}-{version}"
        stamp = f"{tree}/{SOURCE_STAMP}"
        quoted = shlex.quote(stamp)
        return (f"test -e {shlex.quote(tree)} && echo 'tree present'; "
                f"test -f {quoted} && printf 'stamp %s\\n' \"$(head -c 64 {quoted})\"; "
                f"printf 'dkms %s\\n' \"$({_cmd('dkms', 'status', f'{dkms_name}/{version}')} 2>/dev/null "
                "| head -n 1)\"; true")

    @staticmethod
    def default() -> dict[str, Any]:
        return {"present": False, "sha256": None, "registered": False}

    def process(self, output: list[str]) -> dict[str, Any]:
        return parse_dkms_source(output)


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
        return p.parse_showhold("\n".join(output))


# --- GRUB, sysctl, swap, systemd --------------------------------------------------------


def grub_state(found: Sections) -> GrubBoot:
    """GRUB's menu and boot choice, read by the audit's parser (no grubenv: empty)."""
    cfg = found.get("grub-cfg")
    env = found.get("grubenv")
    return p.parse_grub(cfg.output if cfg is not None and cfg.status == 0 else "",
                        env.output if env is not None and env.status == 0 else "")


class GrubConfig(_FixedSections[GrubBoot]):
    """/boot/grub/grub.cfg and grubenv: entries (kernel, arguments) and what boots by default."""

    named = (("grub-cfg", _cmd("cat", GRUB_CFG)), ("grubenv", _cmd("cat", GRUBENV)))
    read = staticmethod(grub_state)


class FileNewer(FactBase[bool]):
    """Whether `path` was modified after `than` was (GNU find's `-newer`, to the
    nanosecond): a configuration file written after what was generated from it. False
    when either is missing."""

    def command(self, path: str, than: str) -> str:
        self.path = path
        return f"{_cmd('find', path, '-maxdepth', '0', '-newer', than, '-print')} 2>/dev/null || true"

    @staticmethod
    def default() -> bool:
        return False

    def process(self, output: list[str]) -> bool:
        return getattr(self, "path", None) in output


def parse_sysctls(lines: list[str]) -> dict[str, str]:
    """`sysctl KEY…` output (`key = value`) -> key -> value with whitespace normalised."""
    return p.parse_sysctl_output("\n".join(lines))


class Sysctls(FactBase[dict[str, str]]):
    """Live values of the given sysctl keys."""

    def command(self, keys: tuple[str, ...]) -> str:
        return f"sysctl {' '.join(_q(k) for k in keys)} 2>/dev/null || true"

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def process(self, output: list[str]) -> dict[str, str]:
        return parse_sysctls(output)


#: page sizes a swap header is probed for (4 KiB, 16 KiB, 64 KiB kernels)
SWAP_PAGE_SIZES = (4096, 16384, 65536)


def swap_file_state(found: Sections) -> dict[str, Any] | None:
    """Size, mode, header page size and kind (read without following a link) of a swap
    file; None when it does not exist."""
    stat = found.get("stat")
    if stat is None or stat.status != 0:
        return None
    words = stat.output.split(maxsplit=2)
    if len(words) < 2 or not words[0].isdigit():
        return None
    probes = {size: probe.output for size in SWAP_PAGE_SIZES if (probe := found.get(f"hdr:{size}"))}
    kind = words[2].strip() if len(words) == 3 else "regular file"
    return {
        "size": int(words[0]),
        "header_page_size": p.parse_swap_header_probes(probes),
        "mode": int(words[1], 8) if words[1].isdigit() else None,
        # `stat` never follows a link there: "symbolic link", "directory", "regular file", ...
        "kind": "regular file" if kind == "regular empty file" else kind,
    }


class SwapFile(_Fenced[dict[str, Any] | None]):
    """Size, mode and swap-header page size of a swap file, or None when missing."""

    def command(self, path: str) -> str:
        return self.fenced([
            ("stat", _cmd("stat", "-c", "%s %a %F", "--", path)),
            *((f"hdr:{size}", header_bytes(path, size)) for size in SWAP_PAGE_SIZES),
        ])

    def process(self, output: list[str]) -> dict[str, Any] | None:
        return swap_file_state(self.sections(output))


class ActiveSwaps(FactBase[list[str]]):
    """Paths of active swap areas (`swapon --show`, read by the audit's parser)."""

    def command(self) -> str:
        return "swapon --show=NAME,SIZE --bytes --noheadings 2>/dev/null || true"

    @staticmethod
    def default() -> list[str]:
        return []

    def process(self, output: list[str]) -> list[str]:
        try:
            return sorted(entry.name for entry in p.parse_swapon_show("\n".join(output)))
        except ValueError:
            return []


UNIT_PROPERTIES = ("UnitFileState", "ActiveState")


class UnitState(FactBase[UnitStateValue]):
    """A unit's `UnitFileState` and `ActiveState` (`systemctl show`, the audit's parser);
    a unit that does not exist has an empty UnitFileState."""

    def command(self, unit: str) -> str:
        self.unit = unit
        props = [word for prop in UNIT_PROPERTIES for word in ("-p", prop)]
        return f"{_cmd('systemctl', 'show', *props, unit)} 2>/dev/null || true"

    @staticmethod
    def default() -> UnitStateValue:
        return UnitStateValue("", "")

    def process(self, output: list[str]) -> UnitStateValue:
        unit = getattr(self, "unit", "")
        try:
            return p.unit_state(p.parse_systemctl_show("\n".join(output), [unit])[unit])
        except ValueError:
            return UnitStateValue("", "")


class DefaultTarget(FactBase[str]):
    """`systemctl get-default`."""

    def command(self) -> str:
        return "systemctl get-default 2>/dev/null || true"

    @staticmethod
    def default() -> str:
        return ""

    def process(self, output: list[str]) -> str:
        try:
            return p.parse_single_line("\n".join(output))
        except ValueError:
            return ""


class ThpMode(FactBase[str]):
    """The selected transparent hugepage mode."""

    def command(self) -> str:
        return f"cat {_q(THP_PATH)} 2>/dev/null || true"

    @staticmethod
    def default() -> str:
        return ""

    def process(self, output: list[str]) -> str:
        try:
            return p.parse_thp(" ".join(output))
        except ValueError:
            return ""


# --- what a follow-up step reads: live addresses, systemd's loaded units, the initramfs ---


class LiveInterfaces(FactBase[dict[str, Interface]]):
    """Every netdev's live MTU, state and IPv4 addresses (`ip -j addr show`, the audit's
    parser); empty when they cannot be read."""

    def command(self) -> str:
        return "ip -j addr show 2>/dev/null || true"

    @staticmethod
    def default() -> dict[str, Interface]:
        return {}

    def process(self, output: list[str]) -> dict[str, Interface]:
        try:
            return p.parse_ip_addr_json("\n".join(output))
        except (ValueError, KeyError, TypeError):
            return {}


class NeedDaemonReload(FactBase[bool | None]):
    """Whether systemd's loaded copy of a unit is older than its files on disk (systemd's
    own `NeedDaemonReload` property); None when systemd did not answer."""

    def command(self, unit: str) -> str:
        self.unit = unit
        return f"{_cmd('systemctl', 'show', '-p', 'NeedDaemonReload', unit)} 2>/dev/null || true"

    @staticmethod
    def default() -> bool | None:
        return None

    def process(self, output: list[str]) -> bool | None:
        return p.parse_need_daemon_reload("\n".join(output), getattr(self, "unit", ""))


#: `InitramfsFile`'s answers: no image for the kernel, or the image could not be unpacked
NO_IMAGE = "__sparkbase_no_image__"
UNREADABLE = "__sparkbase_unreadable__"
#: the image was unpacked; a `sha256sum` line follows when it holds the file
UNPACKED = "__sparkbase_unpacked__"


class InitramfsCopy(NamedTuple):
    """What a kernel's initramfs holds of one file."""

    #: the image exists and was unpacked
    read: bool
    #: sha256 of the file as packed; None when the image does not hold it (or was not read)
    sha256: str | None = None
    #: why it was not read ("" when it was)
    problem: str = ""


def parse_initramfs_copy(lines: list[str]) -> InitramfsCopy:
    """`InitramfsFile`'s answer -> what the image holds of the file."""
    if NO_IMAGE in lines:
        return InitramfsCopy(False, problem="no initramfs image")
    if UNPACKED not in lines:
        return InitramfsCopy(False, problem="unmkinitramfs could not unpack the image")
    digests = [d for d in p.parse_sha256sum("\n".join(lines[lines.index(UNPACKED) + 1:])).values() if d]
    return InitramfsCopy(True, digests[0] if digests else None)


def initramfs_image(release: str) -> str:
    """Where Ubuntu's initramfs-tools keeps `release`'s image."""
    return f"/boot/initrd.img-{release}"


class InitramfsFile(FactBase[InitramfsCopy]):
    """The sha256 of `path` as packed in `release`'s initramfs (initramfs-tools copies
    /etc/modprobe.d/*.conf into every image it builds), unpacked by initramfs-tools' own
    `unmkinitramfs` into a private temporary directory that is removed after. An image with
    an early (microcode) archive unpacks to `DIR/early*` and `DIR/main`, one without to `DIR`."""

    def command(self, release: str, path: str) -> str:
        image = _q(initramfs_image(release))
        inside = [_q(f"/main{path}"), _q(path)]
        return (
            f"if [ ! -f {image} ]; then echo {NO_IMAGE}; "
            f'elif d=$(mktemp -d) && unmkinitramfs {image} "$d" >/dev/null 2>&1; then echo {UNPACKED}; '
            f'for f in {" ".join(inside)}; do if [ -f "$d$f" ]; then sha256sum "$d$f"; break; fi; done; '
            f'rm -rf -- "$d"; else echo {UNREADABLE}; [ -n "${{d:-}}" ] && rm -rf -- "$d"; fi; true'
        )

    @staticmethod
    def default() -> InitramfsCopy:
        return InitramfsCopy(False, problem="no answer")

    def process(self, output: list[str]) -> InitramfsCopy:
        return parse_initramfs_copy(output)
