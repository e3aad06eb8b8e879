"""Kernel identity and boot arguments: `uname`, `getconf PAGESIZE`, `/proc/cmdline`."""

from __future__ import annotations


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


#: what the kernel's isspace() counts as a separator (ASCII; lib/ctype.c)
_SPACE = " \t\n\v\f\r"


def _next_arg(args: str) -> tuple[str, str | None, str]:
    """One argument off the front of `args`, as linux lib/cmdline.c `next_arg()` takes it
    (torvalds/linux 0ea09083): (parameter, value or None, the rest).

    Double quotes group (a space inside them does not split) and are not escapable. Only
    these quotes are removed: one that opens the whole argument (`"acpi_osi=Windows 2016"`),
    one that opens the value (`acpi_osi="Windows 2016"`), and, when either was there, one
    that ends the argument. Quotes anywhere else stay, as in the kernel.
    """
    quoted = in_quote = args.startswith('"')
    if quoted:
        args = args[1:]
    end = equals = 0  # the kernel's `equals`: 0 means none (an `=` in front is no separator)
    while end < len(args) and not (args[end] in _SPACE and not in_quote):
        if equals == 0 and args[end] == "=":
            equals = end
        if args[end] == '"':
            in_quote = not in_quote
        end += 1
    token, rest = args[:end], args[end + 1:].lstrip(_SPACE)
    last_is_quote = end > 0 and token[-1] == '"'
    if not equals:
        return (token[:-1] if quoted and last_is_quote else token), None, rest
    start, stop = equals + 1, end
    if start < end and token[start] == '"':
        start += 1
        stop -= last_is_quote
    elif quoted and last_is_quote:
        stop -= 1
    return token[:equals], token[start:max(start, stop)], rest


def parse_cmdline(text: str) -> tuple[str, ...]:
    """`/proc/cmdline` → its arguments in order, as the kernel itself splits and unquotes
    them (`_next_arg`): `acpi_osi="Windows 2016"` is one argument, `acpi_osi=Windows 2016`.
    A parameter without a value is its name alone; `name=` keeps its empty value; a lone
    `"` is nothing. The newline /proc adds after the command line is not part of it."""
    found: list[str] = []
    rest = text.removesuffix("\n").lstrip(_SPACE)
    while rest:
        param, value, rest = _next_arg(rest)
        if value is not None:
            found.append(f"{param}={value}")
        elif param:
            found.append(param)
    return tuple(found)
