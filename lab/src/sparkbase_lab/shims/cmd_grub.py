"""`update-grub`, `grub-mkconfig`, `grub-reboot`, `grub-set-default`, `grub-editenv`."""

from __future__ import annotations

import sys

from sparkbase_lab.shims.common import Fail, LazyModule, glob, node_info, read_text, sorted_conf, write_text

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable

    from sparkbase_lab import boot as B
else:
    B = LazyModule("sparkbase_lab.boot")

GRUB_CFG = "/boot/grub/grub.cfg"
GRUBENV = "/boot/grub/grubenv"


def installed_kernels() -> set[str]:
    """Releases with a kernel image in /boot."""
    return {p[len("/boot/vmlinuz-") :] for p in glob("/boot/vmlinuz-*")}


def _uuid() -> str:
    """This node's root file system UUID."""
    return B.root_uuid(node_info().get("name", "spark"))


def grub_settings() -> dict[str, str]:
    """`GRUB_*` from /etc/default/grub then /etc/default/grub.d/*.cfg."""
    return B.grub_settings(read_text("/etc/default/grub"), sorted_conf("/etc/default/grub.d/*.cfg"), _uuid())


def render(releases: list[str]) -> str:
    """grub.cfg for `releases` with this node's root file system UUID in every entry id."""
    return B.render_grub_cfg(releases, grub_settings(), _uuid())


def cmd_update_grub(argv: list[str]) -> int:
    """`update-grub` / `grub-mkconfig -o FILE`: write grub.cfg, saying what it found on stderr."""
    out = argv[1] if argv and argv[0] == "-o" and len(argv) > 1 else GRUB_CFG
    print("Sourcing file `/etc/default/grub'", file=sys.stderr)
    for f in sorted(glob("/etc/default/grub.d/*.cfg")):
        print(f"Sourcing file `{f}'", file=sys.stderr)
    print("Generating grub configuration file ...", file=sys.stderr)
    releases = sorted(installed_kernels(), key=B.version_key, reverse=True)
    for release in releases:
        print(f"Found linux image: /boot/vmlinuz-{release}", file=sys.stderr)
    write_text(out, render(releases))
    print("done", file=sys.stderr)
    return 0


def cmd_grub_mkconfig(argv: list[str]) -> int:
    """`grub-mkconfig` prints the configuration; with `-o FILE` writes it."""
    out = next((argv[i + 1] for i, a in enumerate(argv) if a == "-o" and i + 1 < len(argv)), None)
    if out is None:
        print(render(sorted(installed_kernels())), end="")
        return 0
    return cmd_update_grub(["-o", out])


def grubenv_set(key: str, value: str | None) -> None:
    """Set (or, with None, unset) one grubenv variable."""
    env = B.parse_grubenv(read_text(GRUBENV))
    if value is None:
        env.pop(key, None)
    else:
        env[key] = value
    write_text(GRUBENV, B.render_grubenv(env))


def cmd_grub_reboot(argv: list[str]) -> int:
    """`grub-reboot ENTRY`: boot ENTRY once (`next_entry`)."""
    entries = [a for a in argv if not a.startswith("--")]
    if not entries:
        raise Fail("grub-reboot: error: menu entry not specified.", 1)
    grubenv_set("next_entry", entries[0])
    return 0


def cmd_grub_set_default(argv: list[str]) -> int:
    """`grub-set-default ENTRY`: `saved_entry`."""
    entries = [a for a in argv if not a.startswith("--")]
    if not entries:
        raise Fail("grub-set-default: error: menu entry not specified.", 1)
    grubenv_set("saved_entry", entries[0])
    return 0


def cmd_grub_editenv(argv: list[str]) -> int:
    """`grub-editenv [FILE] list|set K=V...|unset K...` as util/grub-editenv.c parses it
    (coreos/grub 0340bdbc): one argument is a command on /boot/grub/grubenv; otherwise the
    first is the file (`-`: /boot/grub/grubenv) and the second the command. Only the
    node's own environment block is emulated."""
    args = [a for a in argv if a not in ("-v", "--verbose")]
    if not args:
        raise Fail("You need to specify at least one command.", 64)
    if len(args) == 1:
        filename, command, rest = GRUBENV, args[0], []
    else:
        filename, command, rest = ("" if args[0] == "-" else args[0]) or GRUBENV, args[1], args[2:]
    if filename != GRUBENV:
        raise Fail(f"grub-editenv: only {GRUBENV} is emulated", 1)
    if command == "list":
        for k, v in B.parse_grubenv(read_text(GRUBENV)).items():
            print(f"{k}={v}")
        return 0
    if command in ("set", "unset"):
        for item in rest:
            key, sep, value = item.partition("=")
            if command == "set" and not sep:
                raise Fail(f"grub-editenv: error: invalid parameter {item}.", 1)
            grubenv_set(key, value if command == "set" else None)
        return 0
    if command == "create":
        write_text(GRUBENV, B.render_grubenv({}))
        return 0
    raise Fail(f"Unknown command `{command}'.", 1)


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "update-grub": cmd_update_grub, "update-grub2": cmd_update_grub,
    "grub-mkconfig": cmd_grub_mkconfig, "grub-reboot": cmd_grub_reboot,
    "grub-set-default": cmd_grub_set_default, "grub-editenv": cmd_grub_editenv,
}
