"""Memory settings (section `memory`): transparent huge pages, swap areas and swap headers,
sysctls, /etc/fstab."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkbase.facts.model import FstabEntry, SwapEntry
from sparkbase.facts.parsers.lines import node_lines, parse_single_line
from sparkbase.facts.script import FactPlan, FileRead, Read, Reader, cmd, fixed

THP_PATH = "/sys/kernel/mm/transparent_hugepage/enabled"
FSTAB = "/etc/fstab"

SWAP_MAGIC = "SWAPSPACE2"


def parse_thp(text: str) -> str:
    """THP `enabled`: `always [madvise] never` → `madvise`; a bare `never` → `never`."""
    words = text.split()
    selected = [word[1:-1] for word in words if word.startswith("[") and word.endswith("]")]
    if len(selected) == 1:
        return selected[0]
    if len(words) == 1 and not selected:
        return words[0]
    raise ValueError(f"cannot tell the THP mode from {text!r}")


def parse_swapon_show(text: str) -> tuple[SwapEntry, ...]:
    """`swapon --show=NAME,SIZE --bytes --noheadings` → active swap areas."""
    entries: list[SwapEntry] = []
    for line in node_lines(text):
        words = line.split()
        if not words:
            continue
        if len(words) != 2 or not words[1].isdigit():
            raise ValueError(f"unreadable swapon line: {line!r}")
        entries.append(SwapEntry(name=words[0], size_bytes=int(words[1])))
    return tuple(entries)


def parse_proc_swaps(text: str) -> tuple[SwapEntry, ...]:
    """`/proc/swaps` (`Filename Type Size Used Priority`, sizes in KiB) → active swap areas.

    The kernel escapes spaces in names as `\\040`; the header line is skipped.
    """
    entries: list[SwapEntry] = []
    for line in node_lines(text):
        words = line.split()
        if not words or words[0] == "Filename":
            continue
        if len(words) < 3 or not words[2].isdigit():
            raise ValueError(f"unreadable /proc/swaps line: {line!r}")
        entries.append(SwapEntry(name=words[0].replace("\\040", " "), size_bytes=int(words[2]) * 1024))
    return tuple(entries)


def parse_swap_header_probes(probes: Mapping[int, str]) -> int | None:
    """Page size a swap header was written for: `probes` maps a page size to the 10 bytes
    ending there; `mkswap` writes `SWAPSPACE2` so that it ends at byte `pagesize`.
    None when no probe holds it (not a swap file, or an unreadable one)."""
    return next((size for size, text in sorted(probes.items()) if text.strip() == SWAP_MAGIC), None)


def parse_swap_header(at_4k: str, at_64k: str) -> int | None:
    """`parse_swap_header_probes` for the two page sizes the fact script probes."""
    return parse_swap_header_probes({4096: at_4k, 65536: at_64k})


def parse_sysctl_output(text: str) -> dict[str, str]:
    """`sysctl KEY…` (`key = value` lines) → key → value, whitespace normalised."""
    out: dict[str, str] = {}
    for line in node_lines(text):
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = " ".join(value.split())
    return out


def parse_fstab(text: str) -> tuple[FstabEntry, ...]:
    """/etc/fstab → its entries (comments and blank lines skipped; fields by whitespace)."""
    entries: list[FstabEntry] = []
    for line in node_lines(text):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) < 3:
            raise ValueError(f"unreadable fstab line: {line!r}")
        entries.append(FstabEntry(words[0], words[1], words[2], words[3] if len(words) > 3 else "defaults"))
    return tuple(entries)


def header_bytes(path: str, end: int) -> str:
    """The 10 bytes ending at `end` in `path`, non-alphanumerics shown as dots."""
    return cmd("dd", f"if={path}", "bs=1", f"skip={end - 10}", "count=10", "status=none") + (
        " | " + cmd("tr", "-c", "A-Z0-9", ".")
    )


#: transparent huge pages
thp_files = fixed(("thp", (THP_PATH,)))
#: /etc/fstab
fstab_files = fixed(("fstab", (FSTAB,)))


def sysctl_files(plan: FactPlan) -> list[FileRead]:
    """The plan's sysctls (`vm.min_free_kbytes`: /proc/sys/vm/min_free_kbytes)."""
    return [(f"sysctl:{key}", ("/proc/sys/" + key.replace(".", "/"),)) for key in plan.sysctls]


def swap_sections(plan: FactPlan) -> list[Read]:
    """The active swap areas, and the header of each swap file judged (at 4 KiB and 64 KiB)."""
    out: list[Read] = []
    if plan.swap_paths or plan.swapon:
        out.append(("swapon", cmd("swapon", "--show=NAME,SIZE", "--bytes", "--noheadings")))
    for path in plan.swap_paths:
        out.append((f"swaphdr4k:{path}", header_bytes(path, 4096)))
        out.append((f"swaphdr64k:{path}", header_bytes(path, 65536)))
    return out


def facts(r: Reader, plan: FactPlan) -> dict[str, Any]:
    """Memory's `NodeFacts` fields."""
    headers = {path: parse_swap_header(r.text(f"swaphdr4k:{path}", quiet=True) or "",
                                       r.text(f"swaphdr64k:{path}", quiet=True) or "")
               for path in plan.swap_paths}
    return {
        "thp": r.parse("thp", parse_thp),
        "sysctls": {key: r.parse(f"sysctl:{key}", parse_single_line) for key in plan.sysctls},
        "swaps": (r.parse("swapon", parse_swapon_show) or ()) if plan.swap_paths or plan.swapon else (),
        "swap_header_page_size": headers,
        "fstab": r.parse("fstab", parse_fstab) if not plan.core_only else None,
    }
