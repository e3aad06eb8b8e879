"""Files: the one `files` section that reads every plain file the areas name (`grep_command`,
split back by `expand_files`), and what is at the paths sparkbase writes: their sha256
(`sha256sum`), whether they are links, the stamp; and the parsers of a file's state and text,
whether one is newer than another, what an initramfs packs, what an apply staged for the next
boot, a DKMS source tree (those commands are in `facts/state.py`)."""

from __future__ import annotations

import base64
import binascii
import fnmatch
import json
import re
import shlex
from collections.abc import Sequence
from typing import Any

from sparkbase.facts.model import FileInfo, Found, InitramfsCopy
from sparkbase.facts.parsers.lines import node_lines
from sparkbase.facts.script import FILES_SECTION, FactPlan, FileRead, Read, Reader, Section, Sections, cmd
from sparkbase.facts.state import (
    LEFTOVER,
    LINK,
    MISSING,
    NO_IMAGE,
    OTHER,
    TEXT_FOLLOWS,
    UNPACKED,
    UNREAD,
)


def _decoded(lines: list[str]) -> str:
    try:
        return base64.b64decode("".join(lines), validate=True).decode("utf-8", errors="replace")
    except binascii.Error:
        return "?"


def parse_file_state(lines: list[str]) -> tuple[int, str] | None:
    """`stat -c %a` then `sha256sum` -> (mode, sha256); None when the file is missing."""
    if not lines or lines[0] == MISSING or len(lines) < 2 or not lines[0].isdigit():
        return None
    digests = [digest for digest in parse_sha256sum("\n".join(lines[1:])).values() if digest]
    return (int(lines[0], 8), digests[0]) if digests else None


def parse_file_info(text: str) -> FileInfo | None:
    """`state.file_state_command`'s answer -> FileInfo; None when nothing is at the path."""
    lines = node_lines(text)
    leftover = LEFTOVER in lines
    lines = [line for line in lines if line != LEFTOVER]
    if lines[:1] == [LINK]:
        return FileInfo(0, "", leftover, Found.SYMLINK, _decoded(lines[1:]))
    if lines[:1] == [OTHER]:
        kind = lines[1].strip() if len(lines) > 1 and lines[1].strip() else "not a regular file"
        if kind == "directory":
            mode = lines[2].strip() if len(lines) > 2 else ""
            return FileInfo(int(mode, 8) if mode.isdigit() else 0, "", leftover, Found.DIRECTORY, kind)
        return FileInfo(0, "", leftover, Found.OTHER, kind)
    found_file = parse_file_state(lines)
    if found_file is None:
        return None
    return FileInfo(found_file[0], found_file[1], leftover)


def file_text(data: bytes) -> str:
    """A file's bytes as text: UTF-8 (a byte that is not shows as U+FFFD, so the text no
    longer hashes to the file's sha256 and the fstab editor keeps the file), each line
    ended by a newline."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines[-1] == "":
        lines.pop()
    return "".join(f"{line}\n" for line in lines)


def parse_file_text(text: str) -> str | None:
    """`state.file_text_command`'s answer -> the file's text; None when no regular file is
    there or it could not be read without following a link. `ValueError` on anything else."""
    lines = node_lines(text)
    if lines[:1] in ([MISSING], [LINK], [OTHER]) or UNREAD in lines:
        return None
    if not lines or lines[0] != TEXT_FOLLOWS:
        raise ValueError(f"unexpected answer {lines[:1]!r}")
    try:
        data = base64.b64decode("".join(lines[1:]), validate=True)
    except binascii.Error as exc:
        raise ValueError(f"the file's base64 does not decode: {exc}") from exc
    return file_text(data)


def parse_newer(text: str, path: str) -> bool:
    """`find PATH -maxdepth 0 -newer THAN -print` -> whether it printed `path`."""
    return path in node_lines(text)


def parse_initramfs_copy(text: str) -> InitramfsCopy:
    """`state.initramfs_file_command`'s answer -> what the image holds of the file."""
    lines = node_lines(text)
    if NO_IMAGE in lines:
        return InitramfsCopy(False, problem="no initramfs image")
    if UNPACKED not in lines:
        return InitramfsCopy(False, problem="unmkinitramfs could not unpack the image")
    digests = [d for d in parse_sha256sum("\n".join(lines[lines.index(UNPACKED) + 1:])).values() if d]
    return InitramfsCopy(True, digests[0] if digests else None)


def parse_staged(text: str) -> tuple[str, ...]:
    """The staged-reboot file -> what was staged for the next boot, each once, in order."""
    return tuple(dict.fromkeys(line.strip() for line in text.split("\n") if line.strip()))


def parse_dkms_source(text: str, registered: bool) -> dict[str, Any]:
    """`state.dkms_source_command`'s answer -> {"present": the tree exists, "sha256": its
    stamp (None: none), "registered": DKMS knows NAME/VERSION (from `dkms status`)}."""
    lines = node_lines(text)
    stamp = next((line.removeprefix("stamp ").strip() for line in lines if line.startswith("stamp ")), "")
    present = "tree present" in lines or bool(stamp)
    return {"present": present, "sha256": stamp or None, "registered": registered}


def parse_stamp(text: str) -> dict[str, object]:
    """The stamp JSON sparkbase writes on a converged node."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("the stamp is not a JSON object")
    return data


def parse_links(text: str) -> dict[str, str]:
    """`PATH<TAB>TARGET` lines (the fact script's link section) → path → where it points."""
    links: dict[str, str] = {}
    for line in node_lines(text):
        path, tab, target = line.partition("\t")
        if tab and path.startswith("/"):
            links[path] = target
    return links


def parse_sha256sum(text: str) -> dict[str, str | None]:
    """`sha256sum P1 P2…` (errors merged in) → path → hash, None for unreadable files."""
    hashes: dict[str, str | None] = {}
    for line in node_lines(text):
        match = re.match(r"^\\?([0-9a-f]{64}) [ *](.+)$", line)
        if match:
            hashes[match[2]] = match[1]
            continue
        missing = re.match(r"^sha256sum: (.+?): ", line)
        if missing:
            hashes[missing[1]] = None
    return hashes


#: the section naming which of the files sparkbase writes are symbolic links
LINKS_SECTION = "links"


def written_paths(plan: FactPlan) -> tuple[str, ...]:
    """The paths sparkbase writes whose content the audit reads or hashes: the rendered files
    and the stamp (not the NCCL library, a package's file, which may well be a link)."""
    paths = [path for path in plan.hashed_paths if path != plan.nccl_library_path]
    return tuple(dict.fromkeys([*paths, plan.stamp_path]))


def links_command(paths: Sequence[str]) -> str:
    """Shell text printing `PATH<TAB>TARGET` for each of `paths` that is a symbolic link
    (builtins only, and one `readlink` per link found): the audit never judges a file
    sparkbase writes by the content of whatever a link points to, nor shows it."""
    words = " ".join(shlex.quote(path) for path in paths)
    line = r"""printf '%s\t%s\n' "$f" "$(readlink -- "$f")";"""
    return f'for f in {words}; do [ -L "$f" ] && {line} done; true'


def _is_glob(path: str) -> bool:
    return any(char in path for char in "*?[")


def grep_command(reads: list[FileRead]) -> str:
    """One grep over every file (globs left for the shell to expand)."""
    words = [shlex.quote(path) if not _is_glob(path) else path for _, paths in reads for path in paths]
    return cmd("grep", "-aH", "", "--") + " " + " ".join(words)


def stamp_files(plan: FactPlan) -> list[FileRead]:
    """The stamp sparkbase writes."""
    return [("stamp", (plan.stamp_path,))]


def link_sections(plan: FactPlan) -> list[Read]:
    """Which of the files sparkbase writes are symbolic links."""
    written = written_paths(plan)
    return [(LINKS_SECTION, links_command(written))] if written else []


def hash_sections(plan: FactPlan) -> list[Read]:
    """The sha256 of every hashed path."""
    return [("sha256", cmd("sha256sum", "--", *plan.hashed_paths))] if plan.hashed_paths else []


def facts(r: Reader, plan: FactPlan) -> dict[str, Any]:
    """The files' `NodeFacts` fields: no file is hashed or read through a link."""
    links = (r.parse(LINKS_SECTION, parse_links, quiet=True) or {}) if r.sections.get(LINKS_SECTION) else {}
    sha256 = r.sections.get("sha256")
    found = parse_sha256sum(sha256.output) if sha256 is not None else {}
    stamp = r.parse("stamp", parse_stamp, quiet=True) if r.sections.get("stamp") else None
    return {
        "links": links,
        "file_sha256": {path: None if path in links else found.get(path) for path in plan.hashed_paths},
        "stamp": stamp if plan.stamp_path not in links else None,
    }


_GREP_ERROR = re.compile(r"^grep: (?P<path>.+?): (?P<reason>[^:]+)$")


def expand_files(found: Sections, reads: list[FileRead]) -> Sections:
    """Split the `files` section into one section per file read (pure).

    A file's section holds its lines (status 0), or grep's message about it (status 2:
    missing, unreadable). A glob section holds the `FILE:line` lines of every file the
    glob matched. Sections already present (an answer from an older script, one `cat`
    per file) are kept as they are.
    """
    section = found.get(FILES_SECTION)
    if section is None:
        return found
    exact = {path: name for name, paths in reads for path in paths if not _is_glob(path)}
    globs = [(pattern, name) for name, paths in reads for pattern in paths if _is_glob(pattern)]
    colon_paths = sorted((path for path in exact if ":" in path), key=len, reverse=True)
    lines: dict[str, list[str]] = {name: [] for name, _ in reads}
    errors: dict[str, list[str]] = {}
    for line in node_lines(section.output):
        error = _GREP_ERROR.match(line)
        if error is not None:
            path = error["path"]
            name = exact.get(path) or next((n for pattern, n in globs if pattern == path), None)
            if name is not None:
                errors.setdefault(name, []).append(line)
            continue
        # a path with a colon in it is matched whole, before the first colon is tried
        path = next((p for p in colon_paths if line.startswith(p + ":")), None)
        if path is None:
            path = line.partition(":")[0]
        if path in exact:
            lines[exact[path]].append(line[len(path) + 1 :])
            continue
        name = next((n for pattern, n in globs if fnmatch.fnmatchcase(path, pattern)), None)
        if name is not None:
            lines[name].append(line)
    expanded = Sections(dict(found.by_name))
    for name, _paths in reads:
        if name in found.by_name:
            continue
        if lines[name]:
            expanded.by_name[name] = Section("\n".join(lines[name]) + "\n", 0)
        elif name in errors:
            expanded.by_name[name] = Section("\n".join(errors[name]), 2)
        elif section.status in {0, 1, 2}:
            expanded.by_name[name] = Section("", 0)  # an empty file
        else:
            expanded.by_name[name] = Section(section.output[-200:], section.status)
    return expanded
