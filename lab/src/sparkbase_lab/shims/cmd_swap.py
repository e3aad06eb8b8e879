"""`fallocate`, `mkswap`, `swapon`, `swapoff`: swap areas checked against the running page size."""

from __future__ import annotations

import os
import sys

from sparkbase_lab.shims.common import (
    RUN,
    SWAPS,
    Fail,
    LazyModule,
    read_json,
    read_text,
    state,
    write_json,
    write_text,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from sparkbase_lab import boot as B
else:
    B = LazyModule("sparkbase_lab.boot")


def active_swaps() -> list[dict[str, Any]]:
    """The active swap areas (path, size, priority)."""
    data: list[dict[str, Any]] = read_json(SWAPS, [])
    return data


#: the node's /proc/swaps (bind-mounted over /proc/swaps at boot; rewritten in place)
PROC_SWAPS = f"{RUN}/proc/swaps"


def proc_swaps_text(swaps: list[dict[str, Any]]) -> str:
    """/proc/swaps as the kernel prints it (mm/swapfile.c `swap_show`): the name padded to
    40 columns, sizes in KiB, an extra tab after a size of fewer than 8 digits."""
    lines = ["Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority"]
    for swap in swaps:
        name = swap["path"].replace(" ", "\\040").replace("\t", "\\011").replace("\n", "\\012")
        size, used = swap["size"] // 1024, 0
        lines.append(f"{name}{' ' * max(1, 40 - len(name))}file\t\t{size}\t{chr(9) if size < 10**7 else ''}"
                     f"{used}\t{chr(9) if used < 10**7 else ''}{swap['prio']}")
    return "\n".join(lines) + "\n"


def save_swaps(swaps: list[dict[str, Any]]) -> None:
    """Record the active swap areas and show them in the node's /proc/swaps."""
    write_json(SWAPS, swaps)
    write_text(PROC_SWAPS, proc_swaps_text(swaps))


def usable_size(file_size: int, page_size: int) -> int:
    """What the kernel swaps on: every whole page but the header page (`swapon --show`
    SIZE and /proc/swaps report this, not the file's size)."""
    return max(file_size // page_size - 1, 0) * page_size


def swap_activate(path: str, prio: int) -> None:
    """`swapon FILE`: refuse what the kernel would refuse, else add it to the active swaps."""
    real = os.path.realpath(path)
    try:
        with open(real, "rb") as fh:
            header = fh.read(65536)
        size = os.path.getsize(real)
    except OSError as exc:
        raise Fail(f"swapon: cannot open {path}: {exc.strerror}", 255) from exc
    if real in {s["path"] for s in active_swaps()}:
        raise Fail(f"swapon: {path}: swapon failed: Device or resource busy", 255)
    found = B.swap_header_page_size(header)
    if found is None:
        raise Fail(f"swapon: {path}: read swap header failed", 255)
    page_size = state()["page_size"]
    if found != page_size:
        raise Fail(f"swapon: {path}: swapspace has wrong page size", 255)
    mode = os.stat(real).st_mode & 0o777
    if mode & 0o077:
        print(f"swapon: {path}: insecure permissions {mode:04o}, 0600 suggested.", file=sys.stderr)
    swaps = active_swaps()
    swaps.append({"path": real, "size": usable_size(size, page_size), "prio": prio})
    save_swaps(swaps)


def _human(size: int) -> str:
    units = ["B", "K", "M", "G", "T", "P"]
    value = float(size)
    unit = 0
    while value >= 1024 and unit < len(units) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{size}B"
    text = f"{value:.1f}".rstrip("0").rstrip(".")
    return f"{text}{units[unit]}"


def cmd_swapon(argv: list[str]) -> int:
    """`swapon FILE|-a|--show[=COLS] [--bytes] [--noheadings]|-s`."""
    show: str | None = None
    as_bytes = noheadings = do_all = False
    prio = -2
    files: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--show"):
            show = arg.split("=", 1)[1] if "=" in arg else "NAME,TYPE,SIZE,USED,PRIO"
        elif arg in ("-s", "--summary"):
            show = "summary"
        elif arg in ("--bytes", "-b"):
            as_bytes = True
        elif arg in ("--noheadings", "-n"):
            noheadings = True
        elif arg in ("-a", "--all"):
            do_all = True
        elif arg in ("-p", "--priority"):
            prio = int(argv[i + 1])
            i += 1
        elif arg.startswith("-"):
            pass
        else:
            files.append(arg)
        i += 1
    if show is None and not files and not do_all:
        show = "NAME,TYPE,SIZE,USED,PRIO"
    if show == "summary":
        print("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority")
        for s in active_swaps():
            print(f"{s['path']:<40}file\t\t{s['size'] // 1024}\t\t0\t\t{s['prio']}")
        return 0
    if show is not None:
        cols = [c.strip().upper() for c in show.split(",") if c.strip()]
        rows = []
        for s in active_swaps():
            values = {"NAME": s["path"], "TYPE": "file",
                      "SIZE": str(s["size"]) if as_bytes else _human(s["size"]),
                      "USED": "0" if as_bytes else "0B", "PRIO": str(s["prio"]),
                      "UUID": "", "LABEL": ""}
            rows.append([values.get(c, "") for c in cols])
        if not rows:
            return 0
        if not noheadings:
            rows.insert(0, cols)
        widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
        for row in rows:
            parts = [row[i].ljust(widths[i]) if i == 0 else row[i].rjust(widths[i]) for i in range(len(cols))]
            print(" ".join(parts).rstrip())
        return 0
    if do_all:
        active = {s["path"] for s in active_swaps()}
        for line in read_text("/etc/fstab").splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) >= 3 and words[2] == "swap" and os.path.realpath(words[0]) not in active:
                swap_activate(words[0], prio)
    for f in files:
        swap_activate(f, prio)
    return 0


def cmd_swapoff(argv: list[str]) -> int:
    """`swapoff FILE|-a`."""
    swaps = active_swaps()
    if "-a" in argv or "--all" in argv:
        save_swaps([])
        return 0
    for f in [a for a in argv if not a.startswith("-")]:
        real = os.path.realpath(f)
        if real not in {s["path"] for s in swaps}:
            raise Fail(f"swapoff: {f}: swapoff failed: Invalid argument", 255)
        swaps = [s for s in swaps if s["path"] != real]
    save_swaps(swaps)
    return 0


def cmd_fallocate(argv: list[str]) -> int:
    """`fallocate -l SIZE FILE` (divergence: the file is sparse)."""
    size = None
    files = []
    i = 0
    while i < len(argv):
        if argv[i] in ("-l", "--length"):
            size = B.parse_size(argv[i + 1])
            i += 1
        elif argv[i].startswith("--length="):
            size = B.parse_size(argv[i].split("=", 1)[1])
        elif not argv[i].startswith("-"):
            files.append(argv[i])
        i += 1
    if size is None or len(files) != 1:
        raise Fail("fallocate: no length argument specified", 1)
    with open(files[0], "ab") as fh:
        if os.path.getsize(files[0]) < size:
            fh.truncate(size)
    return 0


def cmd_mkswap(argv: list[str]) -> int:
    """The machine's mkswap, with the node's running page size unless `-p` is given."""
    import subprocess
    args = list(argv)
    if not any(a in ("-p", "--pagesize") or a.startswith("--pagesize=") for a in args):
        args = ["--pagesize", str(state()["page_size"]), *args]
    return subprocess.call(["/usr/sbin/mkswap", *args])


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "fallocate": cmd_fallocate, "mkswap": cmd_mkswap, "swapon": cmd_swapon, "swapoff": cmd_swapoff,
}
