"""NCCL's `KEY=value` config files: /etc/nccl.conf, ~/.nccl.conf, $NCCL_CONF_FILE.

Two readings live here. `parse_nccl_conf` reads a file exactly as NCCL does when a process
loads it (what the runtime checks judge); `parse_kv_conf` is the plain `KEY=value` reading
sparkbase uses for the files it renders itself and compares whole. Both read text only and
know no fact type, so the serving-process values (`facts/runtime.py`), which
`facts/model.py` holds, can use them without the model importing itself back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkbase.facts.parsers.lines import node_lines
from sparkbase.facts.script import FactPlan, FileRead, Reader

#: fgets(line, 4096, file): at most 4095 bytes per read; a longer line is read in pieces
FGETS_BYTES = 4095
#: envVar[1024] / envValue[1024] with strncpy(.., 1023): names and values are cut there
NAME_BYTES = 1023
VALUE_BYTES = 1023


@dataclass(frozen=True)
class ConfAssignment:
    """One `setenv(name, value, 0)` call NCCL makes for a file, and the line it came from."""

    line: int
    name: str
    value: str


@dataclass(frozen=True)
class NcclConf:
    """A conf file as NCCL applies it: every assignment in file order."""

    assignments: tuple[ConfAssignment, ...]

    def value(self, name: str) -> str | None:
        """The value NCCL takes from this file for `name`: the FIRST line that sets it
        (setenv with overwrite 0 never replaces a value already set)."""
        return next((a.value for a in self.assignments if a.name == name), None)

    def lines_of(self, name: str) -> tuple[ConfAssignment, ...]:
        """Every line that sets exactly `name`, in file order."""
        return tuple(a for a in self.assignments if a.name == name)

    def duplicates(self) -> dict[str, tuple[ConfAssignment, ...]]:
        """Names set on more than one line (NCCL uses the first; the rest are dead text)."""
        names = dict.fromkeys(a.name for a in self.assignments)
        return {name: lines for name in names if len(lines := self.lines_of(name)) > 1}


def _cut(line: bytes) -> list[bytes]:
    return [line[i : i + FGETS_BYTES] for i in range(0, len(line), FGETS_BYTES)]


def _pieces(data: bytes) -> list[tuple[int, bytes]]:
    """(line number, what one `fgets` call returns) for `data`, split after each `\\n` only
    (not at the other separators `bytes.splitlines` knows), long lines in pieces."""
    out: list[tuple[int, bytes]] = []
    start, number = 0, 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end + 1
        number += 1
        out.extend((number, piece) for piece in _cut(data[start:end]))
        start = end
    return out


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def parse_nccl_conf(text: str) -> NcclConf:
    """A conf file read exactly as NCCL's `setEnvFile` reads it.

    Mirrors NVIDIA/nccl `src/misc/param.cc` at master 5067397c2676d5aed50042fc39e5c8ee96eb0027
    (v2.30.7-1; quoted in /work/shared/real-outputs/etc_nccl.conf__how_NCCL_reads_conf_files_
    and_which_value_wins__nccl-src-misc-param.cc.txt), lines 27-50:

    - the file is read with `fgets(line, 4096)`: a line longer than 4095 bytes is read in
      pieces, each handled as a line of its own; `strlen` ends a line at a NUL byte;
    - one trailing `\\n`, then one trailing `\\r`, are removed; nothing else is trimmed;
    - a line whose FIRST byte is `#` is a comment (a `#` anywhere else is text);
    - a line with no `=` is skipped; the name is everything before the first `=` (spaces
      and quotes included: `NCCL_X = 1` sets `NCCL_X ` to ` 1`, `NCCL_X="1"` sets the
      value `"1"` with its quotes), cut at 1023 bytes; the value is everything after it,
      cut at 1023 bytes;
    - every line is `setenv(name, value, 0)`: the FIRST line for a name wins, and a name
      already in the environment is never replaced (`NcclConf.value`). An empty name makes
      setenv fail (EINVAL): nothing is set.

    NCCL before v2.26 had no `#` rule (a `#NCCL_X=1` line set a variable named `#NCCL_X`,
    which nothing reads: the same effect for every real key), and before v2.30 kept `\\r`
    in the value.
    """
    assignments: list[ConfAssignment] = []
    for number, piece in _pieces(text.encode("utf-8", errors="replace")):
        line = piece.split(b"\0", 1)[0]
        if line.endswith(b"\n"):
            line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
        if line.startswith(b"#"):
            continue
        name, sep, value = line.partition(b"=")
        if not sep:
            continue
        name, value = name[:NAME_BYTES], value[:VALUE_BYTES]
        if name:
            assignments.append(ConfAssignment(number, _text(name), _text(value)))
    return NcclConf(tuple(assignments))


def parse_kv_conf(text: str) -> dict[str, str]:
    """`KEY=value` lines of a file sparkbase renders itself: comments and blanks ignored,
    whitespace around names and values trimmed, a later key wins. Not how NCCL reads a
    file (`parse_nccl_conf`); the rendered nccl.conf sets each key once, on a line with no
    spaces, so both read it alike."""
    values: dict[str, str] = {}
    for line in node_lines(text):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def conf_files(plan: FactPlan) -> list[FileRead]:
    """/etc/nccl.conf."""
    return [("nccl-conf", (plan.nccl_conf_path,))]


def facts(r: Reader, plan: FactPlan) -> dict[str, Any]:
    """NCCL's `NodeFacts` fields: the library's sha256 and nccl.conf's text (`files.facts`'s)."""
    links = r.facts["links"]
    return {
        "nccl_library_sha256": r.facts["file_sha256"].get(plan.nccl_library_path or ""),
        "nccl_conf": r.text("nccl-conf", quiet=True) if plan.nccl_conf_path not in links else None,
    }
