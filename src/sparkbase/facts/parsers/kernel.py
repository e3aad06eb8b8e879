"""Kernel identity and boot arguments: `uname`, `getconf PAGESIZE`, `/proc/cmdline`."""

from __future__ import annotations

from sparkbase.facts.parsers.lines import node_words


def parse_single_line(text: str) -> str:
    """A command that prints one word/line (`uname -r`, a sysfs file): stripped, non-empty."""
    value = text.strip()
    if not value or "\n" in value:
        raise ValueError(f"expected one line, got {text!r}")
    return value


def parse_uname_rm(text: str) -> tuple[str, str]:
    """`uname -r -m` → (release, machine)."""
    words = text.split()
    if len(words) != 2:
        raise ValueError(f"expected 'RELEASE MACHINE', got {text!r}")
    return words[0], words[1]


def parse_page_size(text: str) -> int:
    """`getconf PAGESIZE` → bytes."""
    value = parse_single_line(text)
    if not value.isdigit():
        raise ValueError(f"not a page size: {value!r}")
    return int(value)


def parse_cmdline(text: str) -> tuple[str, ...]:
    """`/proc/cmdline` → its arguments, in order (cut at ASCII spaces, as the kernel cuts them)."""
    return tuple(node_words(text))
