"""Read YAML into plain Python data plus the source location of every key.

ruamel.yaml keeps line and column for every mapping key and sequence item; we walk the
loaded document once, convert it to plain dicts/lists/scalars (what pydantic validates)
and record `path -> Location` so that any later error can point at the line that caused
it. Limits guard against hostile files: size, nesting depth and node count (alias bombs).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkbase.errors import ConfigError, Problem

MAX_FILE_BYTES = 1024 * 1024
MAX_DEPTH = 40
MAX_NODES = 50_000

PathKey = tuple[str | int, ...]
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.:@+-]+")


@dataclass(frozen=True)
class Location:
    """Where a value came from: file and 1-based line/column."""

    file: Path
    line: int
    column: int


@dataclass
class YamlDocument:
    """Plain data loaded from one file and the location of each key path in it."""

    file: Path
    data: Any
    locations: dict[PathKey, Location] = field(default_factory=dict)

    def locate(self, path: PathKey) -> Location:
        """The location of `path`, or of its nearest located ancestor (the file start)."""
        probe = tuple(path)
        while probe:
            if probe in self.locations:
                return self.locations[probe]
            probe = probe[:-1]
        return self.locations.get((), Location(self.file, 1, 1))


def dotted(path: PathKey) -> str:
    """`('nodes', 'spark1', 'links', 0)` -> `nodes.spark1.links[0]`.

    A key with characters outside `[A-Za-z0-9_.:@+-]` (spaces, quotes, newlines: text a
    hostile file chose) is shown quoted, `extra["A=1\\nB"]`, so a path is always one line.
    """
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not _PLAIN_KEY.fullmatch(part):
            text += f"[{json.dumps(part)}]"
        else:
            text += f".{part}" if text else str(part)
    return text


class _Walker:
    """Converts ruamel's round-trip objects into plain data, recording locations."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.locations: dict[PathKey, Location] = {(): Location(file, 1, 1)}
        self.count = 0

    def walk(self, node: Any, path: PathKey, depth: int) -> Any:
        from ruamel.yaml.comments import CommentedMap, CommentedSeq

        self.count += 1
        if self.count > MAX_NODES:
            raise _LimitError(path, f"more than {MAX_NODES} values (alias bomb?)")
        if depth > MAX_DEPTH:
            raise _LimitError(path, f"nested deeper than {MAX_DEPTH} levels")
        tag = getattr(getattr(node, "tag", None), "value", None)
        if isinstance(node, CommentedMap | CommentedSeq) and tag is not None:
            raise _LimitError(path, f"YAML tag {tag!r} is not allowed (plain mappings and lists only)")
        if isinstance(node, CommentedMap):
            out: dict[str, Any] = {}
            for key in node:
                if not isinstance(key, str | int | float | bool) or key is None:
                    raise _LimitError(path, f"mapping key {key!r} is not a plain scalar")
                name = str(key)
                self.locations[(*path, name)] = self._at(node.lc.key(key), path)
                out[name] = self.walk(node[key], (*path, name), depth + 1)
            return out
        if isinstance(node, CommentedSeq):
            items: list[Any] = []
            for index, item in enumerate(node):
                self.locations[(*path, index)] = self._at(node.lc.item(index), path)
                items.append(self.walk(item, (*path, index), depth + 1))
            return items
        if isinstance(node, dict | list):  # pragma: no cover - ruamel always gives Commented*
            raise _LimitError(path, "unexpected container type")
        return _plain_scalar(node)

    def _at(self, position: Any, parent: PathKey) -> Location:
        """ruamel's 0-based (line, column), or the parent's location when it has none."""
        if isinstance(position, tuple) and len(position) >= 2:
            return Location(self.file, int(position[0]) + 1, int(position[1]) + 1)
        return self.locations.get(parent, Location(self.file, 1, 1))


class _LimitError(Exception):
    def __init__(self, path: PathKey, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def _plain_scalar(value: Any) -> Any:
    """ruamel wraps scalars (ScalarFloat, TaggedScalar…); hand pydantic plain types."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    # dates, binary, tagged scalars: keep their text so pydantic reports a type error
    return str(value)


def load_yaml(file: Path) -> YamlDocument:
    """Load one YAML file; raise ConfigError with a located problem on any failure."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError
    from ruamel.yaml.reader import ReaderError

    def fail(line: int, column: int, message: str, path: str = "") -> ConfigError:
        return ConfigError([Problem(file, line, column, path, message)])

    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise fail(1, 1, f"cannot read file: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise fail(1, 1, f"file is {len(raw)} bytes; the limit is {MAX_FILE_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise fail(line, column, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x})") from None
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        loaded = yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        column = mark.column + 1 if mark is not None else 1
        message = " ".join(part for part in (exc.context, exc.problem) if part)
        if "found duplicate key" in str(exc):
            message = _duplicate_key_message(str(exc))
        raise fail(line, column, f"YAML: {_one_line(message) or 'syntax error'}") from None
    except ReaderError as exc:  # a character YAML does not allow (NUL, most C0 controls)
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        code = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "?")
        raise fail(line, column, f"YAML: character U+{code:04X} is not allowed here") from None
    except YAMLError as exc:
        raise fail(1, 1, f"YAML: {_one_line(str(exc))}") from None
    except RecursionError:
        raise fail(1, 1, f"YAML: nested deeper than {MAX_DEPTH} levels") from None
    except Exception as exc:  # ruamel's constructors raise plain errors on odd scalars ('._')
        raise fail(1, 1, f"YAML: cannot read a value: {_one_line(str(exc))}") from None
    walker = _Walker(file)
    try:
        data = walker.walk(loaded, (), 0)
    except _LimitError as exc:
        location = walker.locations.get(exc.path, Location(file, 1, 1))
        raise fail(location.line, location.column, exc.message, dotted(exc.path)) from None
    except RecursionError:
        raise fail(1, 1, f"nested deeper than {MAX_DEPTH} levels") from None
    return YamlDocument(file=file, data=data, locations=walker.locations)


def _one_line(text: str) -> str:
    """ruamel's messages span lines (context, marks); a problem is printed on one."""
    return " ".join(text.split())


def _duplicate_key_message(text: str) -> str:
    for line in text.splitlines():
        if "found duplicate key" in line:
            return line.strip().split(" with value")[0] + " (each key may appear once)"
    return "duplicate key (each key may appear once)"
