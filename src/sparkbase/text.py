"""Text that reaches a terminal: control and invisible characters are shown, never interpreted.

Every piece of user-controlled text (YAML keys and values, file names, node, lane and
baseline names, trigger descriptions, override reasons, what a node answered) goes through
`shown` before it is printed, so an escape sequence cannot recolour or rewrite a line, a
carriage return or newline inside one field cannot forge another line ("QUIET" where a
trigger fired), and a bidi override cannot reorder what a person reads.

`TerminalStream` is the safety net under that: the CLI wraps stdout and stderr in it, so
whatever a printer forgot is still escaped (only newlines and tabs between lines pass).
JSON output needs neither: `json.dumps` already escapes every such character.
"""

from __future__ import annotations

import unicodedata
from typing import IO, Any

#: Unicode categories never printed raw: controls (C0, C1, DEL), format characters (bidi
#: overrides and isolates, zero-width joiners and spaces, BOM, soft hyphen), line and
#: paragraph separators, and lone surrogates (undecodable bytes kept by surrogateescape)
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: letters and symbols that draw nothing (Hangul fillers, braille blank): not visible text
_BLANK_GLYPHS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def is_hidden(char: str) -> bool:
    """The character would be interpreted or invisible on a terminal."""
    return unicodedata.category(char) in _HIDDEN_CATEGORIES


def escape_char(char: str) -> str:
    """The visible spelling of one hidden character: `\\n`, `\\x1b`, `\\u202e`, `\\U000e0001`."""
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def shown(text: object, keep: str = "") -> str:
    """`text` (or `str(text)`) as one printable field: every hidden character escaped,
    newlines included, so the result is always exactly one line. Characters in `keep`
    (e.g. a tab in a diff line) pass as they are."""
    value = text if isinstance(text, str) else str(text)
    if value.isprintable():  # the common case: nothing to escape (isprintable rejects all of them)
        return value
    return "".join(escape_char(char) if char not in keep and is_hidden(char) else char for char in value)


def shown_lines(text: str) -> str:
    """Several lines of text: like `shown`, but newlines and tabs stay as they are."""
    return shown(text, keep="\n\t")


def visible(text: str) -> str:
    """What a person sees of `text`: controls and line breaks become spaces, invisible format
    characters (zero-width spaces, bidi overrides) are dropped, the ends are stripped. An
    override reason of only zero-width spaces has no visible text."""
    kept: list[str] = []
    for char in text:
        if char in _BLANK_GLYPHS:
            continue
        if not is_hidden(char):
            kept.append(char)
        elif unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            kept.append(" ")
    return "".join(kept).strip()


class TerminalStream:
    """A text stream that escapes hidden characters (newlines and tabs pass) before writing."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        """Write `text` escaped; returns the length of `text` (as `TextIO.write` would)."""
        self.stream.write(shown_lines(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        """Write each line escaped."""
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)
