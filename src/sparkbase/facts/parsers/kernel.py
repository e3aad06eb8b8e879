"""The kernel (section `kernel`): its identity and boot arguments (`uname`, `getconf
PAGESIZE`, `/proc/cmdline`), and GRUB: the menu grub-mkconfig writes (`/boot/grub/grub.cfg`)
and its environment block (`/boot/grub/grubenv`, or `grub-editenv list`), read as GRUB reads
them at boot."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sparkbase.facts.model import GrubBoot, GrubEntry
from sparkbase.facts.parsers.lines import node_lines, parse_single_line
from sparkbase.facts.script import FactPlan, Reader, cmd, fixed

GRUB_CFG = "/boot/grub/grub.cfg"
GRUBENV = "/boot/grub/grubenv"


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


#: what the kernel's isspace() counts as a separator (ASCII; lib/ctype.c)
_SPACE = " \t\n\v\f\r"


def _next_arg(args: str) -> tuple[str, str | None, str]:
    """One argument off the front of `args`, as linux lib/cmdline.c `next_arg()` takes it
    (torvalds/linux 0ea09083): (parameter, value or None, the rest).

    Double quotes group (a space inside them does not split) and are not escapable. Only
    these quotes are removed: one that opens the whole argument (`"acpi_osi=Windows 2016"`),
    one that opens the value (`acpi_osi="Windows 2016"`), and, when either was there, one
    that ends the argument. Quotes anywhere else stay, as in the kernel.
    """
    quoted = in_quote = args.startswith('"')
    if quoted:
        args = args[1:]
    end = equals = 0  # the kernel's `equals`: 0 means none (an `=` in front is no separator)
    while end < len(args) and not (args[end] in _SPACE and not in_quote):
        if equals == 0 and args[end] == "=":
            equals = end
        if args[end] == '"':
            in_quote = not in_quote
        end += 1
    token, rest = args[:end], args[end + 1:].lstrip(_SPACE)
    last_is_quote = end > 0 and token[-1] == '"'
    if not equals:
        return (token[:-1] if quoted and last_is_quote else token), None, rest
    start, stop = equals + 1, end
    if start < end and token[start] == '"':
        start += 1
        stop -= last_is_quote
    elif quoted and last_is_quote:
        stop -= 1
    return token[:equals], token[start:max(start, stop)], rest


def parse_cmdline(text: str) -> tuple[str, ...]:
    """`/proc/cmdline` → its arguments in order, as the kernel itself splits and unquotes
    them (`_next_arg`): `acpi_osi="Windows 2016"` is one argument, `acpi_osi=Windows 2016`.
    A parameter without a value is its name alone; `name=` keeps its empty value; a lone
    `"` is nothing. The newline /proc adds after the command line is not part of it."""
    found: list[str] = []
    rest = text.removesuffix("\n").lstrip(_SPACE)
    while rest:
        param, value, rest = _next_arg(rest)
        if value is not None:
            found.append(f"{param}={value}")
        elif param:
            found.append(param)
    return tuple(found)


_GRUB_MENU = re.compile(r"""^\s*(?P<kind>menuentry|submenu)\s+(?P<q>['"])(?P<title>.*?)(?P=q)(?P<rest>.*)$""")
_GRUB_ID = re.compile(r"""(?:\$menuentry_id_option|--id)\s+(['"]?)(?P<id>[^'"\s]+)\1""")
#: `linux /boot/vmlinuz-R args` (one file system), `linux /vmlinuz-R args` (separate /boot),
#: `linux (hd0,gpt2)/vmlinuz-R args`
_GRUB_LINUX = re.compile(r"^\s*linux\s+(?:\([^)]*\))?\S*/vmlinuz-(?P<release>\S+)(?P<args>.*)$")
_GRUB_SET_DEFAULT = re.compile(r"""^\s*set\s+default=(?P<q>["']?)(?P<value>[^"']*)(?P=q)\s*$""")
_GRUB_VARIABLE = re.compile(r"\$\{?(\w+)\}?")


@dataclass
class _MenuItem:
    kind: str
    title: str
    ident: str | None
    path: str
    release: str | None = None
    args: tuple[str, ...] = ()
    children: list[_MenuItem] = field(default_factory=list)

    def entry(self) -> GrubEntry:
        return GrubEntry(self.path, self.release, "recovery mode" in self.title, self.ident, self.args)


def parse_grubenv(text: str) -> dict[str, str]:
    """GRUB's environment → variables: the `/boot/grub/grubenv` block (`key=value` lines,
    `#`-padded to 1024 bytes) or `grub-editenv list` (the same lines, unpadded)."""
    values: dict[str, str] = {}
    for line in node_lines(text):
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
    for raw in node_lines(text):
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
            stack[-1].args = tuple(linux["args"].split())
            continue
        if line == "}":
            if stack:
                stack.pop()
        elif line.endswith("{"):
            stack.append(None)
    return top, defaults


def _resolve(menu: list[_MenuItem], name: str) -> _MenuItem | None:
    """The entry GRUB's `default` names: `>`-separated parts, each an index, id or title
    (`gnulinux-advanced-UUID>gnulinux-R-advanced-UUID`, `Advanced options…>Ubuntu, with
    Linux R`, `1>2`). A bare title of an entry inside a submenu names nothing at boot."""
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


def _walk(items: list[_MenuItem]) -> list[_MenuItem]:
    out: list[_MenuItem] = []
    for item in items:
        if item.kind == "menuentry":
            out.append(item)
        out += _walk(item.children)
    return out


def _expand_grub_vars(value: str, env: dict[str, str]) -> str:
    """`${saved_entry}` and the like, from the environment block (unset: empty)."""
    return _GRUB_VARIABLE.sub(lambda m: env.get(m[1], ""), value)


def parse_grub(cfg: str, grubenv: str) -> GrubBoot:
    """What GRUB boots next and normally, from grub.cfg and grubenv (as GRUB reads them).

    The normal default is the last `set default=` that does not read `next_entry`
    (variables, `${saved_entry}` above all, read from grubenv: `GRUB_DEFAULT=saved`); the
    one-shot is grubenv's `next_entry`, taken only when grub.cfg has the
    `set default="${next_entry}"` branch (Ubuntu's 00_header has it).
    """
    menu, defaults = _grub_menu(cfg)
    env = parse_grubenv(grubenv)
    honours_oneshot = any("next_entry" in value for value in defaults)
    normal = [value for value in defaults if "next_entry" not in value]
    default = _expand_grub_vars(normal[-1], env) if normal else "0"
    oneshot = (env.get("next_entry") or None) if honours_oneshot else None
    default_item = _resolve(menu, default)
    oneshot_item = _resolve(menu, oneshot) if oneshot else None
    return GrubBoot(
        entries=tuple(item.entry() for item in _walk(menu)),
        default=default or "0",
        default_entry=default_item.entry() if default_item else None,
        oneshot=oneshot,
        oneshot_entry=oneshot_item.entry() if oneshot_item else None,
    )


#: the running kernel's release, machine and page size (every plan asks them)
core_sections = fixed(("uname", cmd("uname", "-r", "-m")), ("pagesize", cmd("getconf", "PAGESIZE")))
#: the running kernel's command line
cmdline_files = fixed(("cmdline", ("/proc/cmdline",)))
#: GRUB's menu and environment block
grub_files = fixed(("grub-cfg", (GRUB_CFG,)), ("grubenv", (GRUBENV,)))


def facts(r: Reader, plan: FactPlan) -> dict[str, Any]:
    """The kernel's `NodeFacts` fields."""
    release, machine = r.parse("uname", parse_uname_rm) or (None, None)
    return {
        "kernel_release": release,
        "machine": machine,
        "page_size": r.parse("pagesize", parse_page_size),
        "cmdline": r.parse("cmdline", parse_cmdline) or (),
        "grub": _grub(r, plan),
    }


def _grub(r: Reader, plan: FactPlan) -> GrubBoot | None:
    """GRUB's boot choice; no grubenv is an empty environment, as GRUB reads it."""
    if plan.core_only:
        return None
    cfg = r.text("grub-cfg")
    if cfg is None:
        return None
    env = r.text("grubenv", quiet=True) or ""
    try:
        return parse_grub(cfg, env)
    except ValueError as exc:
        r.errors["grub-cfg"] = f"unreadable output: {exc}"
        return None
