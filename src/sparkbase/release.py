"""What a release records and ships: the baseline lock and the rendered file tree.

The lock (`baselines/sparkbase.lock`) pins, per concrete baseline, its version and the
digest of everything it renders. A digest that moves while the version stays is a silent
change to a qualified baseline: `check_lock` names it so CI can refuse it.

`export_nodes` writes what `node_files` gives for each node under `OUT/<node>/<path>`,
all or nothing: every node is rendered in memory before anything is written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from sparkbase.boundedfile import FileRefused
from sparkbase.model.site import Site
from sparkbase.model.yamlio import read_site_file
from sparkbase.render import RENDER_FORMAT, baseline_digest, node_files, node_lines

#: bump when the lock file's layout changes
LOCK_FORMAT = 1
LOCK_PATH = Path("baselines") / "sparkbase.lock"
#: suffix of the fragment file holding the lines sparkbase owns in a shared file
MANAGED_SUFFIX = ".sparkbase-managed"
#: a rendered tree is recognised (and may be replaced) by the stamp it carries
_STAMP_RELATIVE = Path("etc") / "sparkbase" / "stamp.json"


class LockFileError(ValueError):
    """The lock file exists but cannot be read as a sparkbase lock."""


@dataclass(frozen=True)
class LockEntry:
    """What the lock records for one baseline."""

    version: str
    digest: str


class IssueKind(StrEnum):
    """Why a baseline fails the lock check."""

    UNBUMPED = "unbumped"  # rendered output changed, version did not
    MISSING = "missing"  # baseline not in the lock
    STALE = "stale"  # version bumped, lock not re-generated
    REMOVED = "removed"  # lock names a baseline that no longer exists


@dataclass(frozen=True)
class LockIssue:
    """One baseline the lock check refuses, with the action that fixes it."""

    baseline: str
    kind: IssueKind
    message: str


def current_entries(site: Site) -> dict[str, LockEntry]:
    """Version and digest of every concrete baseline of `site`, by name."""
    return {name: LockEntry(base.version, baseline_digest(name, base))
            for name, base in sorted(site.baselines.items())}


def lock_text(entries: dict[str, LockEntry]) -> str:
    """The lock file's content: stable JSON with a format version."""
    baselines = {name: {"version": e.version, "digest": e.digest} for name, e in sorted(entries.items())}
    document = {"format": LOCK_FORMAT, "render_format": RENDER_FORMAT, "baselines": baselines}
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def read_lock(path: Path) -> dict[str, LockEntry] | None:
    """The entries recorded in the lock at `path`; None when there is no lock yet."""
    if not os.path.lexists(path):
        return None
    try:  # a regular file of bounded size only: a FIFO or /dev/zero here must not hang
        text = read_site_file(path).decode("utf-8")
    except FileRefused as exc:
        raise LockFileError(f"{path}: {exc.message}") from None
    except UnicodeDecodeError as exc:
        raise LockFileError(f"{path}: cannot read: {exc}") from None
    try:
        document: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LockFileError(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    if not isinstance(document, dict) or document.get("format") != LOCK_FORMAT:
        found = document.get("format") if isinstance(document, dict) else None
        raise LockFileError(f"{path}: lock format {found!r} is not {LOCK_FORMAT}; regenerate it with "
                            "`sparkbase lock`")
    recorded = document.get("baselines")
    if not isinstance(recorded, dict):
        raise LockFileError(f"{path}: 'baselines' must be a mapping")
    entries: dict[str, LockEntry] = {}
    for name, entry in recorded.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("version"), str)
                and isinstance(entry.get("digest"), str)):
            raise LockFileError(f"{path}: baselines.{name} needs string 'version' and 'digest'")
        entries[str(name)] = LockEntry(entry["version"], entry["digest"])
    return entries


def check_lock(recorded: dict[str, LockEntry] | None, current: dict[str, LockEntry]) -> list[LockIssue]:
    """Every baseline whose lock entry is wrong, sorted by name; empty when the lock holds."""
    known = recorded or {}
    issues: list[LockIssue] = []
    for name, entry in sorted(current.items()):
        old = known.get(name)
        if old is None:
            issues.append(LockIssue(name, IssueKind.MISSING,
                                    f"{name}: not in the lock; run `sparkbase lock`"))
        elif old.digest != entry.digest and old.version == entry.version:
            issues.append(LockIssue(name, IssueKind.UNBUMPED, f"{name}: what it renders changed but its "
                                    f"version is still {entry.version}: bump version in "
                                    f"baselines/{name}.yaml, then run `sparkbase lock`"))
        elif old != entry:
            issues.append(LockIssue(name, IssueKind.STALE, f"{name}: version {entry.version}, the lock "
                                    f"records {old.version}: run `sparkbase lock`"))
    return issues + [LockIssue(name, IssueKind.REMOVED, f"{name}: in the lock but no longer a concrete "
                               "baseline; run `sparkbase lock`")
                     for name in sorted(set(known) - set(current))]


def export_nodes(site: Site, nodes: list[str], out: Path) -> dict[str, list[Path]]:
    """Write every file each of `nodes` must carry under `out/<node>/`, all or nothing.

    Every target is checked and every node rendered in memory first: a node that cannot
    be rendered, or a target that is not a previous sparkbase render (never replaced),
    stops the export before anything is written. The trees are then built in one staging
    directory and swapped in; when `out` does not exist yet, the whole staging directory
    becomes `out` in one rename. Returns the written paths by node.
    """
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out} is not a directory")
    for node in nodes:
        target = out / node
        if target.is_symlink() or (target.exists() and not _is_render(target)):
            raise FileExistsError(f"{target} exists and is not a sparkbase render; not replacing it")
    trees = {node: _node_files(site, node) for node in nodes}
    fresh = not out.exists()
    parent = out.parent if fresh else out
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}.", suffix=".new"))
    try:
        written: dict[str, list[Path]] = {}
        for node, files in trees.items():
            written[node] = []
            (staging / node).mkdir()  # a node whose baseline manages nothing has no file
            for relative, content, mode in files:
                destination = staging / node / relative
                destination.parent.mkdir(parents=True, exist_ok=True)
                destination.write_bytes(content)
                os.chmod(destination, mode)
                written[node].append(out / node / relative)
        _fix_dir_modes(staging)
        if fresh:
            os.replace(staging, out)
        else:
            _swap_in_all(staging, out, nodes)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written


def _node_files(site: Site, node: str) -> list[tuple[Path, bytes, int]]:
    """(relative path, content, mode) of every file `node` must carry, rendered in memory."""
    files = [(f.path, f.content, f.mode) for f in node_files(site, node)]
    by_path: dict[str, list[str]] = {}
    for line in node_lines(site.baseline_of(node)):
        by_path.setdefault(line.path, []).append(line.line)
    for path, lines in by_path.items():
        files.append((path + MANAGED_SUFFIX, "".join(f"{line}\n" for line in lines), 0o644))
    return [(_relative(path), content.encode("utf-8"), mode) for path, content, mode in sorted(files)]


def _relative(path: str) -> Path:
    """A rendered absolute path as a relative one that cannot leave the node's tree."""
    parts = Path(path).parts
    if not path.startswith("/") or any(part in {"..", "."} for part in parts[1:]):
        raise ValueError(f"refusing to write rendered path {path!r}")
    return Path(*parts[1:])


def _is_render(directory: Path) -> bool:
    """A previous render (it carries the stamp), or an empty directory: what a node whose
    baseline manages nothing renders (nothing is lost replacing it)."""
    if not directory.is_dir():
        return False
    return (directory / _STAMP_RELATIVE).is_file() or not any(directory.iterdir())


def _fix_dir_modes(root: Path) -> None:
    """mkdtemp makes 0700; the tree's directories are 0755 like the node's."""
    os.chmod(root, 0o755)  # noqa: S103 - directories of a rendered tree, like /etc
    for directory in root.rglob("*"):
        if directory.is_dir():
            os.chmod(directory, 0o755)  # noqa: S103 - as above


def _swap_in_all(staging: Path, out: Path, nodes: list[str]) -> None:
    """Move each `staging/<node>` to `out/<node>`, retiring old trees; on failure put back."""
    retired = staging / ".retired"
    retired.mkdir()
    moved: list[tuple[str, bool]] = []  # (node, an old tree was retired)
    try:
        for node in nodes:
            target = out / node
            had_old = target.exists()
            if had_old:
                os.replace(target, retired / node)
            moved.append((node, had_old))
            os.replace(staging / node, target)
    except BaseException:
        for node, had_old in reversed(moved):
            target = out / node
            if target.exists() and not (staging / node).exists():
                os.replace(target, staging / node)
            if had_old:
                os.replace(retired / node, target)
        raise
