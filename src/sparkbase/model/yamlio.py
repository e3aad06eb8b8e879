"""Read YAML into plain Python data plus the source location of every key.

ruamel.yaml keeps line and column for every mapping key and sequence item; we walk the
loaded document once, convert it to plain dicts/lists/scalars (what pydantic validates)
and record `path -> Location` so that any later error can point at the line that caused
it. Limits guard against hostile files: regular files only (checked before reading, so a
FIFO or a link to a device never blocks), size, nesting depth and node count (alias bombs).

The dialect is YAML 1.2 and nothing more: a `%YAML 1.1` directive (which would turn `010`
into 8 and `off` into false), `%TAG` directives, explicit tags, merge keys (`<<`) and keys
that are not text (`1:` next to `"1":`) are refused with a located error.
"""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from sparkbase.boundedfile import FileRefused, Refusal, read_regular_file
from sparkbase.errors import ConfigError, Problem

MAX_FILE_BYTES = 1024 * 1024
MAX_DEPTH = 40
MAX_NODES = 50_000

PathKey = tuple[str | int, ...]
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.:@+-]+")
_MERGE_TAG = "tag:yaml.org,2002:merge"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
#: the longest number a site file may write (no field takes more than a few digits)
MAX_NUMBER_CHARS = 40


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
        from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar

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
                if not isinstance(key, str):
                    raise _KeyError(self._at(node.lc.key(key), path), path, _key_message(key))
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
        if isinstance(node, TaggedScalar):
            raise _LimitError(
                path, f"YAML tag {node.tag.value!r} is not allowed (quote a value to make it text)"
            )
        try:
            return _plain_scalar(node)
        except ValueError as exc:
            raise _LimitError(path, str(exc)) from None

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


class _KeyError(_LimitError):
    """A mapping key that is not text, located at the key itself."""

    def __init__(self, location: Location, path: PathKey, message: str) -> None:
        super().__init__(path, message)
        self.location = location


def _key_message(key: object) -> str:
    """Why a non-text key is refused: `1:` and `"1":` would silently become one key."""
    if key is None:
        kind, shown = "null", "null"
    elif isinstance(key, bool):
        kind, shown = "a boolean", str(key).lower()
    elif isinstance(key, int | float):
        kind, shown = "a number", _one_line(str(key))[:40]
    else:
        return "mapping key is a list or mapping; keys must be text"
    return f'mapping key {shown} is {kind}; keys must be text (quote it, "{shown}":, if you mean the name)'


def _plain_scalar(value: Any) -> Any:
    """ruamel wraps scalars (ScalarFloat, ScalarInt…); hand pydantic plain types.

    Binary data and sets (`!!binary`, `!!set`) are refused with ValueError.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, datetime.date):  # an unquoted 2026-01-31: its text, as written
        return str(value)
    name = type(value).__name__.removeprefix("Commented").lower()
    kind = "binary data" if isinstance(value, bytes) else f"a {name}"
    raise ValueError(f"{kind} is not allowed here (plain text, numbers, booleans, lists and mappings)")


def load_yaml(file: Path) -> YamlDocument:
    """Load one YAML file; raise ConfigError with a located problem on any failure."""
    # ruamel.yaml is imported here and in the walker, not at the top: on a site read from
    # the cache (`model.cache`) nothing is parsed, and it takes 0.06 s to import
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError
    from ruamel.yaml.reader import ReaderError

    def fail(line: int, column: int, message: str, path: str = "") -> ConfigError:
        return ConfigError([Problem(file, line, column, path, message)])

    try:
        raw = read_site_file(file)
    except FileRefused as exc:
        raise fail(1, 1, exc.message) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise fail(line, column, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x})") from None
    directive = _refused_directive(text)
    if directive is not None:
        raise fail(directive[0], 1, directive[1])
    too_deep = flow_too_deep(text)
    if too_deep is not None:
        raise fail(too_deep[0], too_deep[1], f"YAML: nested deeper than {MAX_DEPTH} levels")
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    yaml.Constructor = _no_merge_constructor()
    try:
        loaded = yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        column = mark.column + 1 if mark is not None else 1
        context = exc.context
        started = exc.context_mark
        if context and started is not None and mark is not None and started.line != mark.line:
            context = f"{context} (started at line {started.line + 1})"
        message = " ".join(part for part in (context, exc.problem) if part)
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
    except _KeyError as exc:
        located = exc.location
        raise fail(located.line, located.column, exc.message, dotted(exc.path)) from None
    except _LimitError as exc:
        location = walker.locations.get(exc.path, Location(file, 1, 1))
        raise fail(location.line, location.column, exc.message, dotted(exc.path)) from None
    except RecursionError:
        raise fail(1, 1, f"nested deeper than {MAX_DEPTH} levels") from None
    return YamlDocument(file=file, data=data, locations=walker.locations)



def read_site_file(file: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of `file`, which must be a regular file of at most `limit` bytes
    (`boundedfile.read_regular_file`). Raises `FileRefused`."""
    try:
        return read_regular_file(file, limit)
    except FileRefused as exc:
        if exc.refusal is Refusal.NOT_REGULAR:
            raise FileRefused(exc.refusal, exc.detail,
                              f"is {exc.detail}; site files must be regular files") from None
        raise


def _refused_directive(text: str) -> tuple[int, str] | None:
    """(line, message) of a directive other than `%YAML 1.2`, before the document starts.

    A `%` at the start of a line before any content can only be a directive; `%YAML 1.1`
    would change how values read (`010` -> 8, `off` -> false), `%TAG` what tags mean.
    """
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not line.startswith("%"):
            return None
        words = line.split("#", 1)[0].split()
        if words[:1] == ["%YAML"] and words[1:] == ["1.2"]:
            continue
        shown = _one_line(" ".join(words))[:40]
        if words[:1] == ["%YAML"]:
            return number, f"YAML: directive '{shown}' refused: site files are YAML 1.2 only"
        return number, f"YAML: directive '{shown}' is not allowed (plain YAML 1.2 only)"
    return None


def flow_too_deep(text: str) -> tuple[int, int] | None:
    """(line, column) of the first `[` or `{` that opens flow collections deeper than
    `MAX_DEPTH`, outside quotes and comments; None when the text stays within it. Bound any
    YAML text with it before ruamel scans it.

    ruamel's scanner is quadratic in flow depth (a 10 KB file of nested `[` takes it many
    seconds before any limit can apply), so the depth is bounded before it runs. The scan
    may count a bracket inside a plain scalar as an opening one: it can only refuse more
    than `MAX_DEPTH` unclosed brackets, which no site file has.
    """
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return None
    depth = 0
    line, column = 1, 0
    quote = ""
    previous = "\n"
    in_comment = False
    chars = iter(text)
    for char in chars:
        column += 1
        if char == "\n":
            line, column, in_comment, previous = line + 1, 0, False, char
            continue
        if in_comment:
            continue
        if quote:
            if char == "\\" and quote == '"':
                next(chars, "")
                column += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and previous in " \t\n":
            in_comment = True
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return line, column
        elif char in "]}" and depth:
            depth -= 1
        previous = char
    return None


@cache
def _no_merge_constructor() -> type[Any]:
    """ruamel's round-trip constructor, refusing merge keys and over-long numbers.

    A merge key (`<<`) silently copies keys from elsewhere in the file; a site file says
    each value where it applies (`extends:` is the one way to share a baseline's values).
    A number of more than MAX_NUMBER_CHARS characters is no value any field takes, and
    converting thousands of digits costs time: both are refused where they are written.
    """
    from ruamel.yaml.constructor import ConstructorError, RoundTripConstructor

    class BoundedConstructor(RoundTripConstructor):
        def flatten_mapping(self, node: Any) -> Any:
            for key_node, _value in node.value:
                if key_node.tag == _MERGE_TAG:
                    raise ConstructorError(
                        problem="merge key '<<' is not allowed (write the values out, or use "
                        "'extends:' between baselines)",
                        problem_mark=key_node.start_mark,
                    )
            return super().flatten_mapping(node)

        def construct_bounded_number(self, node: Any) -> Any:
            text = str(node.value)
            if len(text) > MAX_NUMBER_CHARS:
                raise ConstructorError(
                    problem=f"a number of {len(text)} characters is out of range "
                    f"(at most {MAX_NUMBER_CHARS})",
                    problem_mark=node.start_mark,
                )
            if node.tag == _INT_TAG:
                return self.construct_yaml_int(node)
            return self.construct_yaml_float(node)

    BoundedConstructor.add_constructor(_INT_TAG, BoundedConstructor.construct_bounded_number)
    BoundedConstructor.add_constructor(_FLOAT_TAG, BoundedConstructor.construct_bounded_number)
    return BoundedConstructor


def _one_line(text: str) -> str:
    """ruamel's messages span lines (context, marks); a problem is printed on one."""
    return " ".join(text.split())


def _duplicate_key_message(text: str) -> str:
    for line in text.splitlines():
        if "found duplicate key" in line:
            return line.strip().split(" with value")[0] + " (each key may appear once)"
    return "duplicate key (each key may appear once)"
