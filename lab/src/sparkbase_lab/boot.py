"""Pure boot computations of an emulated node: GRUB, kernel choice, command line, GIDs, swap.

Standard library only: this module is also copied into every node (as
`/usr/local/lib/sparkbase-lab/sparkbase_lab/boot.py`) where the shims, run by the node's
`/usr/bin/python3`, import it. Nothing here touches a file system; callers pass text in.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import shlex
from dataclasses import dataclass

SUBMENU = "Advanced options for Ubuntu"
TOP_ENTRY = "Ubuntu"
PAGE_4K = 4096
PAGE_64K = 65536
GRUBENV_SIZE = 1024

#: RDMA device -> netdev (fixed ConnectX-7 topology of a Spark)
FABRIC: dict[str, str] = {
    "rocep1s0f0": "enp1s0f0np0",
    "rocep1s0f1": "enp1s0f1np1",
    "roceP2p1s0f0": "enP2p1s0f0np0",
    "roceP2p1s0f1": "enP2p1s0f1np1",
}
MGMT_NETDEV = "enP7s7"
NCPUS = 20
FAST_CPUS = frozenset([*range(5, 10), *range(15, 20)])

#: emulated sysctl keys and their kernel defaults
SYSCTL_DEFAULTS: dict[str, str] = {
    "vm.watermark_boost_factor": "15000",
    "vm.min_free_kbytes": "67584",
    "vm.swappiness": "60",
    "vm.dirty_ratio": "20",
    "vm.max_map_count": "65530",
    "kernel.numa_balancing": "1",
    "net.core.rmem_max": "212992",
    "net.core.wmem_max": "212992",
}


def version_key(release: str) -> tuple[tuple[int, str], ...]:
    """Sort key for kernel releases (numeric parts compare as numbers)."""
    return tuple(
        (int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"[.\-]", release)
    )


def page_size(release: str) -> int:
    """Page size a kernel release runs with: 64 KiB for the `-64k` flavour, else 4 KiB."""
    return PAGE_64K if release.endswith("-64k") else PAGE_4K


# --- /etc/default/grub ---------------------------------------------------------------

_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def _expand(word: str, env: dict[str, str]) -> str:
    def sub(match: re.Match[str]) -> str:
        return env.get(match.group(1) or match.group(2), "")

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", sub, word)


def parse_shell_assignments(text: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """Evaluate the `KEY=value` lines of a shell fragment as `/bin/sh` would (the subset
    GRUB configuration files use: quotes, `$VAR`/`${VAR}` expansion, comments)."""
    out = dict(env or {})
    for raw in text.splitlines():
        match = _ASSIGN.match(raw)
        if not match:
            continue
        key, rest = match.groups()
        value = ""
        i = 0
        while i < len(rest):
            ch = rest[i]
            if ch == "'":
                end = rest.index("'", i + 1) if "'" in rest[i + 1 :] else len(rest)
                value += rest[i + 1 : end]
                i = end + 1
            elif ch == '"':
                j = i + 1
                chunk = ""
                while j < len(rest) and rest[j] != '"':
                    if rest[j] == "\\" and j + 1 < len(rest):
                        j += 1
                    chunk += rest[j]
                    j += 1
                value += _expand(chunk, out)
                i = j + 1
            elif ch in " \t;#":
                break
            else:
                j = i
                while j < len(rest) and rest[j] not in " \t;'\"":
                    j += 1
                value += _expand(rest[i:j], out)
                i = j
        out[key] = value
    return out


def grub_settings(default_text: str, dropins: list[str], uuid: str | None = None) -> dict[str, str]:
    """`GRUB_*` settings from `/etc/default/grub` then `grub.d/*.cfg` (already name-sorted),
    sourced after grub-mkconfig has set `GRUB_DEVICE_UUID` (the root file system's UUID), as
    util/grub-mkconfig.in does: a drop-in may name an entry id by it."""
    root = uuid or DEFAULT_ROOT_UUID
    env = parse_shell_assignments(default_text, {"GRUB_DEVICE_UUID": root, "GRUB_DEVICE_BOOT_UUID": root})
    for text in dropins:
        env = parse_shell_assignments(text, env)
    return env


def kernel_args(settings: dict[str, str]) -> str:
    """Arguments GRUB appends after `root=... ro` for the normal entries."""
    parts = [settings.get("GRUB_CMDLINE_LINUX", ""), settings.get("GRUB_CMDLINE_LINUX_DEFAULT", "")]
    return " ".join(" ".join(p.split()) for p in parts if p.strip())


def entry_title(release: str) -> str:
    """Menu entry title of a kernel inside the advanced submenu."""
    return f"Ubuntu, with Linux {release}"


def entry_path(release: str) -> str:
    """The `GRUB_DEFAULT` / `grub-reboot` form naming a kernel's entry by titles."""
    return f"{SUBMENU}>{entry_title(release)}"


#: the root file system's UUID when the node's own is not given (grub-mkconfig names the
#: root by UUID and builds every menu entry id from it)
DEFAULT_ROOT_UUID = "5d6b1f0e-3c41-4f7a-9a52-1b2c3d4e5f60"
#: what grub-mkconfig puts before the settings' arguments on a `linux` line
ROOT_ARGS = f"root=UUID={DEFAULT_ROOT_UUID} ro"


def root_uuid(node: str) -> str:
    """A stable ext4 UUID for a node's root file system (menu entry ids differ per node,
    as they do between real machines)."""
    digest = hashlib.sha256(f"sparkbase-lab rootfs {node}".encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-4{digest[13:16]}-a{digest[17:20]}-{digest[20:32]}"


def entry_id_path(release: str, uuid: str = DEFAULT_ROOT_UUID) -> str:
    """A kernel's entry as Ubuntu writes `saved_entry`: `gnulinux-advanced-UUID>gnulinux-R-advanced-UUID`."""
    return f"gnulinux-advanced-{uuid}>gnulinux-{release}-advanced-{uuid}"


_GRUB_HEADER = """\
#
# DO NOT EDIT THIS FILE
#
# It is automatically generated by grub-mkconfig using templates
# from /etc/grub.d and settings from /etc/default/grub
#

### BEGIN /etc/grub.d/00_header ###
if [ -s $prefix/grubenv ]; then
  set have_grubenv=true
  load_env
fi
if [ "${{initrdfail}}" = 2 ]; then
   set initrdfail=
elif [ "${{initrdfail}}" = 1 ]; then
   set next_entry="${{prev_entry}}"
   set prev_entry=
   save_env prev_entry
   if [ "${{next_entry}}" ]; then
      set initrdfail=2
   fi
fi
if [ "${{next_entry}}" ] ; then
   set default="${{next_entry}}"
   set next_entry=
   save_env next_entry
   set boot_once=true
else
   set default="{default}"
fi

if [ x"${{feature_menuentry_id}}" = xy ]; then
  menuentry_id_option="--id"
else
  menuentry_id_option=""
fi

export menuentry_id_option

if [ "${{prev_saved_entry}}" ]; then
  set saved_entry="${{prev_saved_entry}}"
  save_env saved_entry
  set prev_saved_entry=
  save_env prev_saved_entry
  set boot_once=true
fi

function savedefault {{
  if [ -z "${{boot_once}}" ]; then
    saved_entry="${{chosen}}"
    save_env saved_entry
  fi
}}
function recordfail {{
  set recordfail=1
  if [ -n "${{have_grubenv}}" ]; then if [ -z "${{boot_once}}" ]; then save_env recordfail; fi; fi
}}
function load_video {{
  if [ x$feature_all_video_module = xy ]; then
    insmod all_video
  else
    insmod efi_gop
    insmod efi_uga
    insmod ieee1275_fb
    insmod vbe
    insmod vga
    insmod video_bochs
    insmod video_cirrus
  fi
}}

if [ x$feature_default_font_path = xy ] ; then
   font=unicode
else
insmod part_gpt
insmod ext2
set root='hd0,gpt2'
if [ x$feature_platform_search_hint = xy ]; then
  search --no-floppy --fs-uuid --set=root {hints}  {uuid}
else
  search --no-floppy --fs-uuid --set=root {uuid}
fi
    font="/usr/share/grub/unicode.pf2"
fi

if loadfont $font ; then
  set gfxmode=auto
  load_video
  insmod gfxterm
  set locale_dir=$prefix/locale
  set lang=en_US
  insmod gettext
fi
terminal_output gfxterm
if [ "${{recordfail}}" = 1 ] ; then
  set timeout=30
else
  if [ x$feature_timeout_style = xy ] ; then
    set timeout_style={timeout_style}
    set timeout={timeout}
  # Fallback normal timeout code in case the timeout_style feature is
  # unavailable.
  else
    set timeout={timeout}
  fi
fi
### END /etc/grub.d/00_header ###

### BEGIN /etc/grub.d/05_debian_theme ###
set menu_color_normal=white/black
set menu_color_highlight=black/light-gray
### END /etc/grub.d/05_debian_theme ###

### BEGIN /etc/grub.d/10_linux ###
function gfxmode {{
	set gfxpayload="${{1}}"
	if [ "${{1}}" = "keep" ]; then
		set vt_handoff=vt.handoff=7
	else
		set vt_handoff=
	fi
}}
if [ "${{recordfail}}" != 1 ]; then
  set linux_gfx_mode=keep
else
  set linux_gfx_mode=text
fi
export linux_gfx_mode
"""

_GRUB_FOOTER = """\

### END /etc/grub.d/10_linux ###

### BEGIN /etc/grub.d/25_bli ###
if [ "$grub_platform" = "efi" ]; then
  insmod bli
fi
### END /etc/grub.d/25_bli ###

### BEGIN /etc/grub.d/30_os-prober ###
### END /etc/grub.d/30_os-prober ###

### BEGIN /etc/grub.d/30_uefi-firmware ###
if [ "$grub_platform" = "efi" ]; then
	fwsetup --is-supported
	if [ "$?" = 0 ]; then
		menuentry 'UEFI Firmware Settings' $menuentry_id_option 'uefi-firmware' {
			fwsetup
		}
	fi
fi
### END /etc/grub.d/30_uefi-firmware ###

### BEGIN /etc/grub.d/40_custom ###
# This file provides an easy way to add custom menu entries.  Simply type the
# menu entries you want to add after this comment.  Be careful not to change
# the 'exec tail' line above.
### END /etc/grub.d/40_custom ###

### BEGIN /etc/grub.d/41_custom ###
if [ -f  ${config_directory}/custom.cfg ]; then
  source ${config_directory}/custom.cfg
elif [ -z "${config_directory}" -a -f  $prefix/custom.cfg ]; then
  source $prefix/custom.cfg
fi
### END /etc/grub.d/41_custom ###
"""

_CLASSES = "--class ubuntu --class gnu-linux --class gnu --class os"
_HINTS = "--hint-bios=hd0,gpt2 --hint-efi=hd0,gpt2 --hint-baremetal=ahci0,gpt2"


def _entry_body(release: str, args: str, uuid: str, indent: str, *, recovery: bool = False) -> list[str]:
    """The lines inside one 10_linux menu entry (root on the node's NVMe, /boot on it)."""
    video = [] if recovery else ["gfxmode $linux_gfx_mode"]
    lines = [
        "recordfail", "load_video", *video, "insmod gzio",
        "if [ x$grub_platform = xxen ]; then insmod xzio; insmod lzopio; fi",
        "insmod part_gpt", "insmod ext2", "set root='hd0,gpt2'",
        "if [ x$feature_platform_search_hint = xy ]; then",
        f"  search --no-floppy --fs-uuid --set=root {_HINTS}  {uuid}",
        "else", f"  search --no-floppy --fs-uuid --set=root {uuid}", "fi",
        f"echo\t'Loading Linux {release} ...'",
        f"linux\t/boot/vmlinuz-{release} root=UUID={uuid} ro{(' ' + args) if args else ''}",
        "echo\t'Loading initial ramdisk ...'",
        f"initrd\t/boot/initrd.img-{release}",
    ]
    return [indent + line for line in lines]


def render_grub_cfg(releases: list[str], settings: dict[str, str], uuid: str = DEFAULT_ROOT_UUID) -> str:
    """The `/boot/grub/grub.cfg` `grub-mkconfig` writes for the installed kernel `releases`.

    Shaped as Ubuntu 24.04's (real sample: tests/fixtures/real/boot_grub_grub.cfg__…): the
    00_header default block (`${next_entry}` one-shot, `set default="${saved_entry}"` for
    `GRUB_DEFAULT=saved`), a top `Ubuntu` entry for the newest kernel, then `Advanced options
    for Ubuntu` with a normal and a recovery entry per kernel, each with its
    `$menuentry_id_option 'gnulinux-…-UUID'` id.
    """
    ordered = sorted(releases, key=version_key, reverse=True)
    args = kernel_args(settings)
    default = settings.get("GRUB_DEFAULT", "0") or "0"
    if default == "saved":  # as grub-mkconfig's 00_header writes it: read at boot from grubenv
        default = "${saved_entry}"
    timeout = settings.get("GRUB_TIMEOUT", "0") or "0"
    style = settings.get("GRUB_TIMEOUT_STYLE", "menu") or "menu"
    header = _GRUB_HEADER.format(
        default=default, uuid=uuid, timeout=timeout, timeout_style=style, hints=_HINTS
    )
    lines = [header]
    if ordered:
        newest = ordered[0]
        lines += [f"menuentry 'Ubuntu' {_CLASSES} $menuentry_id_option 'gnulinux-simple-{uuid}' {{",
                  *_entry_body(newest, args, uuid, "\t"), "}",
                  f"submenu '{SUBMENU}' $menuentry_id_option 'gnulinux-advanced-{uuid}' {{"]
        for release in ordered:
            lines += [
                f"\tmenuentry '{entry_title(release)}' {_CLASSES} "
                f"$menuentry_id_option 'gnulinux-{release}-advanced-{uuid}' {{",
                *_entry_body(release, args, uuid, "\t\t"), "\t}",
                f"\tmenuentry '{entry_title(release)} (recovery mode)' {_CLASSES} "
                f"$menuentry_id_option 'gnulinux-{release}-recovery-{uuid}' {{",
                *_entry_body(release, "recovery nomodeset dis_ucode_ldr", uuid, "\t\t", recovery=True),
                "\t}",
            ]
        lines.append("}")
    return "\n".join(lines) + "\n" + _GRUB_FOOTER


@dataclass(frozen=True)
class MenuEntry:
    """One bootable entry of grub.cfg."""

    path: str
    """`Title` or `Submenu>Title`."""
    release: str
    args: str
    """Everything after the image path on the `linux` line."""
    ident: str = ""
    """The `$menuentry_id_option` id path (`gnulinux-advanced-UUID>gnulinux-R-advanced-UUID`)."""


@dataclass(frozen=True)
class GrubMenu:
    """What grub.cfg says: the default and the entries in menu order."""

    default: str
    entries: tuple[MenuEntry, ...]
    tree: tuple[_Node, ...] = ()
    """The menu as GRUB walks it (top-level items, submenus with their children)."""


@dataclass
class _Node:
    kind: str
    title: str
    ident: str
    entry: MenuEntry | None = None
    children: list[_Node] | None = None


_MENU_RE = re.compile(r"^\s*(menuentry|submenu)\s+'([^']*)'(.*)\{\s*$")
_ID_RE = re.compile(r"\$menuentry_id_option\s+'([^']*)'")
_LINUX_RE = re.compile(r"^\s*linux\s+(?:/boot)?/vmlinuz-(\S+)\s*(.*)$")
_DEFAULT_RE = re.compile(r'^\s*set default="([^"]*)"')


def parse_grub_cfg(text: str) -> GrubMenu:
    """Parse a grub.cfg as GRUB reads its menu: entries with titles, ids and `linux` lines.

    Blocks other than menu entries (`if`, `function`) are skipped; the default is the last
    `set default=` that is not the `${next_entry}` one-shot.
    """
    default = "0"
    top: list[_Node] = []
    stack: list[_Node | None] = []  # None: a `{` block that is no menu item
    lines: dict[int, tuple[str, str]] = {}  # id(node) -> (release, args)
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            continue
        match = _DEFAULT_RE.match(line)
        if match and "next_entry" not in match.group(1):
            default = match.group(1)
            continue
        match = _MENU_RE.match(line)
        if match:
            kind, title, rest = match.groups()
            ident = _ID_RE.search(rest)
            children: list[_Node] | None = [] if kind == "submenu" else None
            node = _Node(kind, title, ident.group(1) if ident else "", children=children)
            parent = next((n for n in reversed(stack) if n is not None), None)
            siblings = parent.children if parent is not None and parent.children is not None else top
            siblings.append(node)
            stack.append(node)
            continue
        match = _LINUX_RE.match(line)
        current = next((n for n in reversed(stack) if n is not None), None)
        if match and current is not None and current.kind == "menuentry":
            lines[id(current)] = (match.group(1), match.group(2).strip())
            continue
        if stripped == "}" and stack:
            stack.pop()
        elif stripped.endswith("{"):
            stack.append(None)
    entries: list[MenuEntry] = []

    def walk(nodes: list[_Node], titles: tuple[str, ...], idents: tuple[str, ...]) -> None:
        for node in nodes:
            here_titles, here_idents = (*titles, node.title), (*idents, node.ident or node.title)
            if node.children is not None:
                walk(node.children, here_titles, here_idents)
            elif id(node) in lines:
                release, args = lines[id(node)]
                node.entry = MenuEntry(">".join(here_titles), release, args, ">".join(here_idents))
                entries.append(node.entry)

    walk(top, (), ())
    return GrubMenu(default, tuple(entries), tuple(top))


def resolve_entry(menu: GrubMenu, name: str) -> MenuEntry | None:
    """The entry `name` designates as GRUB finds it: `>`-separated parts, each an index, an
    id or a title at its level (`1>2`, `gnulinux-advanced-UUID>gnulinux-R-advanced-UUID`,
    `Advanced options for Ubuntu>Ubuntu, with Linux R`). A bare title of an entry inside
    the submenu names nothing (GRUB then boots entry 0)."""
    items: list[_Node] = list(menu.tree)
    found: _Node | None = None
    for part in (name.strip() or "0").split(">"):
        if part.isdigit():
            index = int(part)
            found = items[index] if index < len(items) else None
        else:
            found = next((n for n in items if n.ident == part), None) or next(
                (n for n in items if n.title == part), None)
        if found is None:
            return None
        items = found.children or []
    return found.entry if found is not None else None


@dataclass(frozen=True)
class BootChoice:
    """The outcome of GRUB's choice plus the lab's fallback rule."""

    release: str
    args: str
    fallback_reason: str | None = None
    used_oneshot: bool = False


def select_boot(
    menu: GrubMenu,
    grubenv: dict[str, str],
    installed: set[str],
    unbootable: set[str],
    previous: str | None,
) -> BootChoice:
    """Which kernel boots, with which arguments.

    `next_entry` (from `grub-reboot`) wins once; else `default` (`saved` reads
    `saved_entry`). A name that designates no entry boots entry 0, as GRUB does. A chosen
    kernel whose image is missing, or that is `unbootable` (fault `kernel-panic`), falls
    back to `previous`, else to the newest bootable kernel.
    """
    oneshot = grubenv.get("next_entry", "")
    name = oneshot or menu.default
    if name in {"saved", "${saved_entry}"}:
        name = grubenv.get("saved_entry", "0")
    entry = resolve_entry(menu, name)
    note = None
    if entry is None and name.strip() not in ("", "0"):
        note = f"no GRUB entry {name!r}; GRUB booted entry 0"
        entry = resolve_entry(menu, "0")

    def ok(release: str) -> bool:
        return release in installed and release not in unbootable

    def default_args() -> str:
        for e in menu.entries:
            if ">" not in e.path:
                return e.args
        return ROOT_ARGS

    if entry is not None and ok(entry.release):
        return BootChoice(entry.release, entry.args, note, bool(oneshot))
    if entry is None:
        reason = f"no GRUB entry {name!r}"
    elif entry.release not in installed:
        reason = f"kernel image /boot/vmlinuz-{entry.release} missing"
    else:
        reason = f"kernel {entry.release} panicked at boot"
    candidates: list[str] = []
    if previous:
        candidates.append(previous)
    candidates += sorted(installed, key=version_key, reverse=True)
    for release in candidates:
        if ok(release):
            args = next(
                (e.args for e in menu.entries if e.release == release and "recovery" not in e.path),
                default_args(),
            )
            return BootChoice(release, args, f"{reason}; fell back to {release}", bool(oneshot))
    raise RuntimeError(f"{reason}; no bootable kernel left")


def proc_cmdline(release: str, args: str) -> str:
    """`/proc/cmdline` for a boot: image, then the entry's arguments."""
    if "root=" not in args.split("=", 1)[0] and not any(w.startswith("root=") for w in args.split()):
        args = f"{ROOT_ARGS} {args}".strip()
    return f"BOOT_IMAGE=/boot/vmlinuz-{release} {args}".strip()


def cmdline_param(cmdline: str, key: str) -> str | None:
    """Value of `key=value` on a command line (last one wins); `""` for a bare flag."""
    found: str | None = None
    for word in shlex.split(cmdline):
        name, sep, value = word.partition("=")
        if name == key:
            found = value if sep else ""
    return found


def parse_grubenv(text: str) -> dict[str, str]:
    """Variables of a GRUB environment block."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key] = value
    return out


def render_grubenv(values: dict[str, str]) -> str:
    """A GRUB environment block (1024 bytes, `#`-padded) holding `values`."""
    body = "# GRUB Environment Block\n" + "".join(
        f"{k}={v}\n" for k, v in values.items() if v != ""
    )
    return body + "#" * max(0, GRUBENV_SIZE - len(body.encode()))


# --- THP, sysctl, modprobe ------------------------------------------------------------

THP_MODES = ("always", "madvise", "never")


def thp_text(mode: str) -> str:
    """`/sys/kernel/mm/transparent_hugepage/enabled` as the kernel prints it."""
    return " ".join(f"[{m}]" if m == mode else m for m in THP_MODES) + "\n"


def thp_mode(text: str) -> str:
    """The selected THP mode from the bracketed or the bare form."""
    match = re.search(r"\[(\w+)\]", text)
    return match.group(1) if match else text.strip()


def parse_sysctl_conf(texts: list[str]) -> dict[str, str]:
    """Settings of sysctl.conf-format files, applied in the given order."""
    out: dict[str, str] = {}
    for text in texts:
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            key, sep, value = line.partition("=")
            if not sep:
                continue
            out[key.strip().lstrip("-").replace("/", ".")] = value.strip()
    return out


def parse_modprobe_options(texts: list[str]) -> dict[str, dict[str, str]]:
    """`options MODULE key=value ...` lines: module -> parameters (later files win)."""
    out: dict[str, dict[str, str]] = {}
    for text in texts:
        for raw in text.splitlines():
            words = raw.split("#", 1)[0].split()
            if len(words) >= 3 and words[0] == "options":
                module = words[1].replace("-", "_")
                for word in words[2:]:
                    key, _, value = word.partition("=")
                    out.setdefault(module, {})[key] = value
    return out


#: (module, parameter) pairs the kernel declares `bool` (printed `Y`/`N`)
BOOL_PARAMS = frozenset({("nvidia_drm", "modeset"), ("nvidia_drm", "fbdev")})


def sysfs_param(value: str, boolean: bool = False) -> str:
    """How the kernel prints a module parameter: a `bool` one as `Y`/`N`, else verbatim."""
    low = value.strip().lower()
    if boolean and low in ("1", "y", "yes", "true", "on"):
        return "Y"
    if boolean and low in ("0", "n", "no", "false", "off"):
        return "N"
    return value.strip()


# --- fabric ---------------------------------------------------------------------------


def gid_from_ipv4(address: str) -> str:
    """RoCE GID text of an IPv4 address (`::ffff:a.b.c.d`, fully expanded)."""
    ip = ipaddress.IPv4Address(address.split("/")[0])
    return "0000:0000:0000:0000:0000:ffff:" + "{:04x}:{:04x}".format(*divmod(int(ip), 1 << 16))


def gid_link_local(mac: str) -> str:
    """Link-local GID (fe80::/64 with the EUI-64 of `mac`)."""
    octets = [int(b, 16) for b in mac.split(":")]
    octets[0] ^= 0x02
    eui = [*octets[:3], 0xFF, 0xFE, *octets[3:]]
    words = [f"{eui[i]:02x}{eui[i + 1]:02x}" for i in range(0, 8, 2)]
    return "fe80:0000:0000:0000:" + ":".join(words)


def mac_address(node: str, netdev: str) -> str:
    """A stable, locally administered MAC for a node's netdev."""
    digest = hashlib.sha256(f"{node}/{netdev}".encode()).digest()
    return "4c:bb:47:" + ":".join(f"{b:02x}" for b in digest[:3])


def gid_table(mac: str, ipv4: str | None, moved: bool = False) -> dict[int, tuple[str, str]]:
    """GID index -> (GID text, type) for one RoCE port."""
    link_local = gid_link_local(mac)
    table = {0: (link_local, "IB/RoCE v1"), 1: (link_local, "RoCE v2")}
    if ipv4:
        base = 4 if moved else 2
        gid = gid_from_ipv4(ipv4)
        table[base] = (gid, "IB/RoCE v1")
        table[base + 1] = (gid, "RoCE v2")
    return table


# --- swap -----------------------------------------------------------------------------

SWAP_MAGIC = b"SWAPSPACE2"


def swap_header_page_size(header: bytes) -> int | None:
    """Page size a swap header was made for (`SWAPSPACE2` ends at byte `pagesize`)."""
    for size in (4096, 8192, 16384, 65536):
        if len(header) >= size and header[size - len(SWAP_MAGIC) : size] == SWAP_MAGIC:
            return size
    return None


def parse_size(text: str) -> int:
    """A size like `16G`, `512M`, `4096`, `1GiB` in bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMGTP]?)(i?B)?\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"invalid size {text!r}")
    number, unit = match.group(1), match.group(2)
    power = "KMGTP".find(unit.upper()) + 1 if unit else 0
    result: int = int(number) * 1024 ** int(power)
    return result


# --- /proc files ----------------------------------------------------------------------


def cpuinfo_text() -> str:
    """`/proc/cpuinfo` of a GB10 (20 CPUs: A725 = 0xd87, X925 = 0xd85), each block as the real
    sample (tests/fixtures/real/proc_cpuinfo__GB10_DellProMax__processors0-1__…)."""
    blocks = []
    for cpu in range(NCPUS):
        part = "0xd85" if cpu in FAST_CPUS else "0xd87"
        blocks.append(
            f"processor\t: {cpu}\nBogoMIPS\t: 2000.00\n"
            "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp "
            "cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm "
            "dit uscat ilrcpc flagm sb paca pacg dcpodp sve2 sveaes svepmull svebitperm "
            "svesha3 svesm4 flagm2 frint svei8mm svebf16 i8mm bf16 dgh bti ecv afp wfxt\n"
            "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\n"
            f"CPU part\t: {part}\nCPU revision\t: 1\n"
        )
    return "\n".join(blocks) + "\n"


def modules_text(modules: list[tuple[str, int, str]]) -> str:
    """`/proc/modules` lines for (name, size, used-by) triples."""
    return "".join(
        f"{name} {size} {1 if by != '-' else 0} {by}, Live 0x0000000000000000\n"
        if by != "-"
        else f"{name} {size} 0 - Live 0x0000000000000000\n"
        for name, size, by in modules
    )


def sha1_fingerprint(data: bytes) -> str:
    """`aa:bb:...` SHA-1 fingerprint as mokutil prints it."""
    digest = hashlib.sha1(data).hexdigest()  # noqa: S324 (the format mokutil uses)
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))
