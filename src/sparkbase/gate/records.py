"""Qualification records: each qualified release of a lane, frozen in `releases/<lane>/<release>/`.

A release directory holds
- `release.json` (`RECORD_FORMAT`): what ran (`Shape`: the lane's baseline with its version
  and render hash, the image digest when the lane runs as a container, the lane's settings),
  the prompt set (name, hash, where it came from), each prompt's completion hash, the A/B/A
  figures and verdict (none for a lane's first release: determinism only), who (user@host)
  and when;
- `lane.yaml`: the lane file as it was, byte for byte (what a later A/B/A restarts as "the
  previous release");
- `completions.json`: each prompt's completion (token ids or text), so that a later run can
  say where it first differs, not only that its hash did.

A release is written once (`write_release`): into a private temporary directory beside it,
every file fsynced, then renamed into place under a lock of the lane's releases directory;
a name that exists is refused, never rewritten. Readers (`list_releases`) read bounded
regular files and refuse what is not a record with the file's name (`RecordError`).

What "what runs" means, and why these three: the render hash is everything the baseline
puts on a host (the lock's digest, `render.baseline_digest`, which each converged node's
stamp carries and the audit checks); the image digest is the engine build; the settings are
the lane file's fields that change what runs (model, engine, baseline and version, shape,
nodes, the unit or container), not the ones that say how it is found or watched
(`description`, `enabled`, `runtime.match`, `runtime.metrics`, `runtime.endpoint`). A field
the lane model gains later counts by default.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from sparkbase.atomicfile import fsync_directory
from sparkbase.boundedfile import FileRefused, read_regular_file
from sparkbase.model.lanes import Lane
from sparkbase.model.site import Site
from sparkbase.render import baseline_digest

#: the site directory holding every lane's releases
RELEASES_DIR = "releases"
#: bump when release.json's layout changes
RECORD_FORMAT = 1
RECORD_FILE = "release.json"
LANE_COPY = "lane.yaml"
COMPLETIONS_FILE = "completions.json"
#: the largest record file read (a record is kilobytes; completions of 64 prompts x 4096 tokens less)
MAX_RECORD_BYTES = 16 * 1024 * 1024
#: lane fields that say how a lane is found or watched, not what runs
NOT_SETTINGS = ("description", "enabled")
NOT_RUNTIME_SETTINGS = ("match", "metrics", "endpoint")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@dataclass(frozen=True)
class Completion:
    """One prompt's output: token ids (when the engine returns them) and text."""

    prompt_id: str
    text: str
    token_ids: tuple[int, ...] | None = None

    def canonical(self) -> str:
        """What is hashed: the token ids when present, else the text (JSON, one form)."""
        if self.token_ids is not None:
            return json.dumps({"token_ids": list(self.token_ids)}, separators=(",", ":"))
        return json.dumps({"text": self.text}, separators=(",", ":"), ensure_ascii=False)

    def digest(self) -> str:
        """`sha256:<hex>` of the canonical form."""
        return "sha256:" + hashlib.sha256(self.canonical().encode()).hexdigest()


class RecordError(Exception):
    """A release record cannot be read or written; one line naming the file."""


def valid_release_name(name: str) -> bool:
    """A release name is a file name: letters, digits, `.`, `_`, `-`, at most 63, not hidden."""
    return 0 < len(name) <= 63 and name[0].isalnum() and name.isascii() and set(name) <= _NAME_CHARS


@dataclass(frozen=True)
class Shape:
    """What runs, as a launch must match it: baseline (name, version, render hash), the
    engine image digest (None: the lane runs no container), the lane's settings."""

    baseline: str
    baseline_version: str
    render_hash: str
    image_digest: str | None
    settings: dict[str, Any]

    def matches(self, other: Shape) -> bool:
        """What runs is what `other` ran: the same render hash, image digest and settings."""
        return (self.render_hash, self.image_digest, self.settings) == (
            other.render_hash, other.image_digest, other.settings)

    def differences(self, other: Shape, other_name: str) -> list[str]:
        """What of `self` (now) differs from `other` (release `other_name`), one line each."""
        found: list[str] = []
        if self.render_hash != other.render_hash:
            now = f"{self.render_hash[:12]}… ({self.baseline} {self.baseline_version})"
            then = f"{other.render_hash[:12]}… ({other.baseline} {other.baseline_version})"
            found.append(f"baseline render hash {now}; {other_name}: {then}")
        if self.image_digest != other.image_digest:
            found.append(f"image digest {self.image_digest or 'none (no container)'}; "
                         f"{other_name}: {other.image_digest or 'none (no container)'}")
        for path, now, then in setting_differences(self.settings, other.settings):
            found.append(f"lane setting {path}: {now}; {other_name}: {then}")
        return found

    def to_json(self) -> dict[str, Any]:
        """As release.json holds it."""
        return {"baseline": {"name": self.baseline, "version": self.baseline_version,
                             "render_hash": self.render_hash},
                "image_digest": self.image_digest, "settings": self.settings}


def setting_differences(now: Any, then: Any, path: str = "") -> list[tuple[str, str, str]]:
    """(dotted path, value now, value then) of every setting that differs (values as JSON)."""
    if isinstance(now, dict) and isinstance(then, dict):
        found: list[tuple[str, str, str]] = []
        for key in sorted(set(now) | set(then)):
            where = f"{path}.{key}" if path else str(key)
            found += setting_differences(now.get(key), then.get(key), where)
        return found
    if now == then:
        return []
    return [(path or "(all)", _shown(now), _shown(then))]


def _shown(value: Any) -> str:
    return "unset" if value is None else json.dumps(value, sort_keys=True, ensure_ascii=False)


def lane_settings(lane: Lane) -> dict[str, Any]:
    """The lane's fields that change what runs (see the module text), as plain JSON data."""
    data = lane.model_dump(mode="json")
    for key in NOT_SETTINGS:
        data.pop(key, None)
    runtime = data.get("runtime")
    if isinstance(runtime, dict):
        for key in NOT_RUNTIME_SETTINGS:
            runtime.pop(key, None)
    return data


def image_digest(lane: Lane) -> str | None:
    """`sha256:<hex>` of the engine image the lane file pins (`runtime.container.image`), or
    None when the lane runs no container. What the node really runs is the gate's runtime
    checks' to compare with the lane file (a container running another image is refused)."""
    container = lane.runtime.container if lane.runtime is not None else None
    return container.digest() if container is not None else None


def shape_of(site: Site, lane_name: str) -> Shape:
    """What the site says runs for the lane now (its baseline as rendered, its image, settings)."""
    lane = site.lanes[lane_name]
    baseline = site.baselines[lane.baseline]
    return Shape(lane.baseline, baseline.version, baseline_digest(lane.baseline, baseline),
                 image_digest(lane), lane_settings(lane))


@dataclass(frozen=True)
class Release:
    """One release record as read from its directory."""

    lane: str
    name: str
    path: Path
    when: str
    who: str
    shape: Shape
    prompt_set: dict[str, str]
    completion_hashes: dict[str, str]
    qualification: dict[str, Any] = field(default_factory=dict)

    def completions(self) -> dict[str, Completion]:
        """Each prompt's completion as recorded (`completions.json`)."""
        document = _read_json(self.path / COMPLETIONS_FILE)
        recorded = document.get("completions")
        if not isinstance(recorded, dict):
            raise RecordError(f"{self.path / COMPLETIONS_FILE}: no `completions` mapping")
        found: dict[str, Completion] = {}
        for prompt_id, entry in recorded.items():
            if not isinstance(entry, dict) or not isinstance(entry.get("text"), str):
                raise RecordError(f"{self.path / COMPLETIONS_FILE}: completions.{prompt_id} is not a "
                                  "completion")
            ids = entry.get("token_ids")
            if ids is not None and not (isinstance(ids, list) and all(isinstance(i, int) for i in ids)):
                raise RecordError(f"{self.path / COMPLETIONS_FILE}: completions.{prompt_id}.token_ids "
                                  "is not a list of token ids")
            found[str(prompt_id)] = Completion(str(prompt_id), entry["text"],
                                               tuple(ids) if ids is not None else None)
        return found


def releases_dir(root: Path, lane: str) -> Path:
    """Where the lane's releases are kept in the site at `root`."""
    return root / RELEASES_DIR / lane


def list_releases(root: Path, lane: str) -> list[Release]:
    """Every release of the lane, oldest first (by the time recorded, then name); none when
    the lane has no releases directory. `RecordError` for a directory that is no record."""
    directory = releases_dir(root, lane)
    if not directory.is_dir():
        return []
    found = [read_release(entry, lane) for entry in sorted(directory.iterdir())
             if not entry.name.startswith(".") and entry.is_dir()]
    return sorted(found, key=lambda release: (release.when, release.name))


def read_release(path: Path, lane: str) -> Release:
    """The release record in directory `path`; `RecordError` naming the file when it is none."""
    file = path / RECORD_FILE
    document = _read_json(file)
    if document.get("format") != RECORD_FORMAT:
        raise RecordError(f"{file}: record format {document.get('format')!r} is not {RECORD_FORMAT}")
    try:
        baseline = document["baseline"]
        shape = Shape(str(baseline["name"]), str(baseline["version"]), str(baseline["render_hash"]),
                      document["image_digest"], dict(document["settings"]))
        if document["lane"] != lane or document["release"] != path.name:
            raise RecordError(f"{file}: names lane {document['lane']!r}, release {document['release']!r}; "
                              f"it is in releases/{lane}/{path.name}")
        return Release(lane, path.name, path, str(document["when"]), str(document["who"]), shape,
                       {k: str(v) for k, v in dict(document["prompt_set"]).items()},
                       {k: str(v) for k, v in dict(document["completions"]).items()},
                       dict(document.get("qualification") or {}))
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"{file}: not a release record ({type(exc).__name__}: {exc})") from None


def _read_json(file: Path) -> dict[str, Any]:
    try:
        data = read_regular_file(file, MAX_RECORD_BYTES)
    except FileRefused as exc:
        raise RecordError(f"{file}: {exc.message}") from None
    try:
        document = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"{file}: not JSON ({type(exc).__name__})") from None
    if not isinstance(document, dict):
        raise RecordError(f"{file}: not a JSON object")
    return document


def next_name(root: Path, lane: str) -> str:
    """`r<N>`: one more than the highest `r<number>` among the lane's release directories."""
    directory = releases_dir(root, lane)
    numbers = [int(e.name[1:]) for e in directory.iterdir() if e.name[:1] == "r" and e.name[1:].isdigit()] \
        if directory.is_dir() else []
    return f"r{max(numbers, default=0) + 1}"


@dataclass(frozen=True)
class NewRelease:
    """Everything `write_release` records."""

    lane: str
    name: str
    lane_file: Path
    shape: Shape
    prompt_set: Mapping[str, str]
    completions: Mapping[str, Completion]
    qualification: Mapping[str, Any]
    who: str
    when: str

    def record(self, lane_sha256: str) -> dict[str, Any]:
        """release.json's document."""
        return {
            "format": RECORD_FORMAT, "lane": self.lane, "release": self.name, "when": self.when,
            "who": self.who, **self.shape.to_json(),
            "lane_file": {"file": LANE_COPY, "sha256": lane_sha256},
            "prompt_set": dict(self.prompt_set),
            "completions": {pid: c.digest() for pid, c in sorted(self.completions.items())},
            "qualification": dict(self.qualification),
        }


def write_release(root: Path, release: NewRelease) -> Path:
    """Write `release` into `releases/<lane>/<name>/` at once (see the module text); the
    directory. `RecordError` when the name is taken or the files cannot be written."""
    if not valid_release_name(release.name):
        raise RecordError(f"release name {release.name!r}: use letters, digits, '.', '_' and '-' "
                          "(at most 63)")
    directory = releases_dir(root, release.lane)
    final = directory / release.name
    taken = RecordError(f"releases/{release.lane}/{release.name} exists; a release is never rewritten "
                        "(name the new one with --release NAME)")
    if os.path.lexists(final):
        raise taken
    try:
        lane_text = read_regular_file(release.lane_file, MAX_RECORD_BYTES)
    except FileRefused as exc:
        raise RecordError(f"{release.lane_file}: {exc.message}") from None
    directory.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=directory, prefix=f".{release.name}.", suffix=".new"))
    try:
        record = release.record(hashlib.sha256(lane_text).hexdigest())
        completions = {"format": RECORD_FORMAT, "completions": {
            pid: {"text": c.text, "token_ids": list(c.token_ids) if c.token_ids is not None else None}
            for pid, c in sorted(release.completions.items())}}
        _write_file(staging / LANE_COPY, lane_text)
        _write_file(staging / COMPLETIONS_FILE, (json.dumps(completions, indent=1, ensure_ascii=False) + "\n")
                    .encode())
        _write_file(staging / RECORD_FILE, (json.dumps(record, indent=2, ensure_ascii=False) + "\n").encode())
        os.chmod(staging, 0o755)  # noqa: S103 - a record others read, like the site's files
        fsync_directory(staging)
        try:
            with FileLock(str(directory / ".write.lock"), timeout=30):
                if os.path.lexists(final):
                    raise taken
                os.rename(staging, final)
        except Timeout:
            raise RecordError(f"releases/{release.lane}: another qualify is writing a release") from None
        fsync_directory(directory)
    except OSError as exc:
        raise RecordError(f"releases/{release.lane}/{release.name}: cannot write the record: {exc}") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return final


def _write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
