"""Edits of an /etc/fstab line sparkbase did not write: the installer's swap file marked
`noauto`, and that line put back when the node moves to a baseline that does not ask for it.

The recipe (spark-ds41f experiments/2026-10-02-kernel-64k/install-boot-support.sh, db98392f)
keeps the installer's `/swap.img` for the 4 KiB kernel and rewrites its fstab options: `sw`,
`auto` and `noauto` dropped, `noauto` added, the fields joined by tabs. sparkbase makes the
same edit, records the line as it found it and as it wrote it (exact text,
`policy/ownership.py` kind `fstab-line`), and undoes it only while the line still reads
exactly as sparkbase wrote it; anything else is kept and reported.

Pure: fstab text in, the new text (or why there is none) out; no host.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkbase.model.ownership import Kind, OwnedItem, OwnershipRecord, edited_line
from sparkbase.policy.ownership import KEPT

FSTAB = "/etc/fstab"
#: mount options the recipe drops before it adds `noauto`
_BOOT_OPTIONS = ("sw", "auto", "noauto")


@dataclass(frozen=True)
class FstabEdit:
    """What to do with /etc/fstab: its new text (None: leave it), why, what to record or forget."""

    text: str | None
    reason: str
    record: OwnedItem | None = None
    forget: tuple[tuple[Kind, str], ...] = ()


def split_lines(text: str) -> list[str]:
    """The file's lines without their newlines; joining them with "\\n" gives `text` back."""
    return text.split("\n")


def lines_for(lines: list[str], spec: str) -> list[int]:
    """Indices of the (non-comment) lines whose first field is `spec`."""
    found = []
    for index, line in enumerate(lines):
        words = line.split()
        if words and not words[0].startswith("#") and words[0] == spec:
            found.append(index)
    return found


def is_noauto(line: str) -> bool:
    """Whether the line's options (fourth field) hold `noauto`."""
    words = line.split()
    return len(words) >= 4 and "noauto" in words[3].split(",")


def noauto_line(line: str) -> str:
    """The line as the recipe rewrites it: options without sw/auto/noauto, then `noauto`;
    the fields joined by tabs."""
    words = line.split()
    options = [opt for opt in words[3].split(",") if opt not in _BOOT_OPTIONS]
    words[3] = ",".join([*options, "noauto"])
    return "\t".join(words)


def _swap_line_problem(line: str) -> str | None:
    words = line.split()
    if len(words) < 4 or words[2] != "swap":
        return f"is not a swap line ({line.strip()[:80]!r})"
    return None


def decide_noauto(spec: str, text: str | None, owned: OwnershipRecord, baseline: str,
                  when: str) -> FstabEdit:
    """Mark the installer's swap line `noauto` (recorded with the line as found); leave a
    line already `noauto`, a missing one, or several, and say why."""
    if text is None:
        return FstabEdit(None, f"{FSTAB} does not exist: nothing to mark noauto")
    lines = split_lines(text)
    found = lines_for(lines, spec)
    if not found:
        return FstabEdit(None, f"{FSTAB} has no line for {spec}: it is not activated at boot")
    if len(found) > 1:
        return FstabEdit(None, f"{KEPT}{FSTAB} has {len(found)} lines for {spec}: sparkbase edits "
                               "exactly one; left as they are")
    line = lines[found[0]]
    problem = _swap_line_problem(line)
    if problem is not None:
        return FstabEdit(None, f"{KEPT}the {FSTAB} line for {spec} {problem}: left as it is")
    if is_noauto(line):
        return FstabEdit(None, f"the {FSTAB} line for {spec} is noauto")
    new = noauto_line(line)
    lines[found[0]] = new
    item = edited_line(spec, baseline, when, original=line, written=new)
    return FstabEdit("\n".join(lines), f"{spec} marked noauto in {FSTAB}", record=item)


def decide_restore(spec: str, text: str | None, owned: OwnershipRecord) -> FstabEdit:
    """Put back the line sparkbase marked `noauto`, only while it reads exactly as sparkbase
    wrote it; a line sparkbase did not edit, or one changed since, is kept and reported."""
    item = owned.find(Kind.FSTAB_LINE, spec)
    lines = split_lines(text) if text is not None else []
    found = lines_for(lines, spec)
    if item is None or item.original is None or item.written is None:
        if any(is_noauto(lines[index]) for index in found):
            return FstabEdit(None, f"{KEPT}the {FSTAB} line for {spec} was not marked noauto by "
                                   "sparkbase: left as it is")
        return FstabEdit(None, f"sparkbase edited no {FSTAB} line for {spec}")
    if not found:
        return FstabEdit(None, f"{KEPT}{FSTAB} has no line for {spec} any more: sparkbase's edit "
                               f"cannot be undone (it found {item.original.strip()!r})")
    if len(found) == 1 and lines[found[0]] == item.original:
        return FstabEdit(None, f"the {FSTAB} line for {spec} is as sparkbase found it")
    if len(found) != 1 or lines[found[0]] != item.written:
        now = "; ".join(repr(lines[index].strip()) for index in found)
        return FstabEdit(None, f"{KEPT}the {FSTAB} line for {spec} changed since sparkbase marked it "
                               f"noauto (now {now}): left as it is")
    lines[found[0]] = item.original
    return FstabEdit("\n".join(lines), f"{spec} back in {FSTAB} as sparkbase found it",
                     forget=((Kind.FSTAB_LINE, spec),))
