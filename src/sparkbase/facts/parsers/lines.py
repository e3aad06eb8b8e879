"""How node text is cut into lines and words: on ASCII separators only.

`str.splitlines` also ends a line at U+2028, U+2029, U+0085, `\\v`, `\\f` and `\\x1c`-`\\x1e`,
and `str.split()` cuts words at any Unicode space. A node's tools and the kernel end a line
at `\\n` alone, so a file holding U+2028 would read as extra lines (a forged `/proc/cmdline`
line in an fstab comment). Every parser of node text cuts with these two.
"""

from __future__ import annotations

import re

#: the bytes the kernel's own argument parser treats as spaces (`isspace` in lib/ctype.c)
_ASCII_SPACE = re.compile(r"[ \t\n\v\f\r]+")


def node_lines(text: str) -> list[str]:
    """`text` cut at `\\n` only (a `\\r` before it dropped, as `splitlines` drops it from
    `\\r\\n`); no empty last line for a final newline."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def node_words(text: str) -> list[str]:
    """`text` cut at runs of ASCII spaces (tab, newline, `\\v`, `\\f`, `\\r` included) only."""
    return [word for word in _ASCII_SPACE.split(text) if word]


def parse_single_line(text: str) -> str:
    """A command that prints one word/line (`uname -r`, a sysfs file): stripped, non-empty."""
    value = text.strip()
    if not value or "\n" in value:
        raise ValueError(f"expected one line, got {text!r}")
    return value
