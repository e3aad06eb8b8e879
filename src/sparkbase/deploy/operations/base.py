"""What every operation module shares: quoted commands, decisions, no-op reasons, change triggers."""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NamedTuple

from pyinfra.api.command import FileUploadCommand, StringCommand
from pyinfra.api.exceptions import OperationError
from pyinfra.context import host

from sparkbase.facts.model import FileInfo, Found
from sparkbase.facts.state import TEMP_NAME, TEMP_SUFFIX, is_leftover, leftovers_glob
from sparkbase.model.ownership import Kind
from sparkbase.text import shown

#: the reasons recorded by operations added inside `noop_reasons` (greenlet-local: pyinfra
#: prepares hosts in parallel greenlets, each with its own context)
_REASONS: ContextVar[list[str] | None] = ContextVar("sparkbase_noop_reasons", default=None)


def noop(reason: str) -> None:
    """Log why the current operation changes nothing (pyinfra's `host.noop`), and hand the
    reason to whoever is adding the operation (`noop_reasons`)."""
    recorded = _REASONS.get()
    if recorded is not None:
        recorded.append(reason)
    host.noop(reason)


@contextmanager
def noop_reasons() -> Iterator[list[str]]:
    """The no-op reasons recorded by the operations added inside the block.

    pyinfra runs an operation's body when the operation is added (to find whether it will
    change anything), so an operation that changes nothing says why during its own call;
    no operation hash or module-global table is needed to pair the reason with it.
    """
    reasons: list[str] = []
    token = _REASONS.set(reasons)
    try:
        yield reasons
    finally:
        _REASONS.reset(token)


def cmd(*words: str) -> StringCommand:
    """One shell command from separate words, each quoted."""
    return StringCommand(" ".join(shlex.quote(word) for word in words))


class Decision(NamedTuple):
    """What an operation does: commands (argv lists), or why it does nothing; and the
    ownership record entries to forget once the commands ran (retire operations)."""

    commands: list[list[str]]
    reason: str = ""
    forget: tuple[tuple[Kind, str], ...] = ()


def carry_out(decision: Decision) -> Any:
    """Yield the decision's commands, or record its no-op reason."""
    if not decision.commands:
        noop(decision.reason)
    for argv in decision.commands:
        yield cmd(*argv)


def changed(meta: Any) -> bool:
    """Whether an earlier operation changed (when executed) or will change (when planned)."""
    if meta is None:
        return False
    if meta.is_complete():
        return bool(meta.did_change())
    return bool(meta.will_change)


def temp_dir(path: str) -> str:
    """A fresh, unguessable name beside `path` for one upload's private directory."""
    return f"{path}{TEMP_SUFFIX}.{secrets.token_hex(8)}"


def refused_kind(kind: str) -> str:
    """How a refusal names what is at a path (`stat -c %F`'s words), with its article."""
    return f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"


def obstacle(info: FileInfo | None) -> str | None:
    """What is at a path that sparkbase will not write over (None: nothing, or a regular file)."""
    if info is None or info.regular:
        return None
    if info.found is Found.SYMLINK:
        return f"a symbolic link to {shown(repr(info.detail))}"
    return refused_kind(shown(info.detail))


def refusal(path: str, info: FileInfo | None) -> str | None:
    """Why sparkbase will not write `path` (None: it may): only a regular file is replaced;
    a symbolic link (sparkbase did not make it, and never writes through one), a directory
    or any other kind is refused, naming the path and what is there."""
    there = obstacle(info)
    if there is None:
        return None
    return (f"{path} is {there}: sparkbase writes only regular files, never through a link or into "
            "a directory; nothing was written. Move it away, then apply again")


def refuse_unless_writable(path: str, info: FileInfo | None) -> None:
    """Raise `OperationError` (the operation, and its node, fail) when `refusal` refuses."""
    reason = refusal(path, info)
    if reason is not None:
        raise OperationError(reason)


def guard(path: str) -> str:
    """Shell: exit 1 with a message when `path` is a symbolic link or exists and is not a
    regular file (the same rule as `refusal`, checked again when the commands run)."""
    p = shlex.quote(path)
    message = shlex.quote(f"sparkbase: {path} is a symbolic link or not a regular file: nothing written")
    return f"if [ -L {p} ] || {{ [ -e {p} ] && [ ! -f {p} ]; }}; then echo {message} >&2; exit 1; fi"


def guard_directory(path: str) -> str:
    """Shell: exit 1 with a message when `path` is a symbolic link or exists and is not a
    directory (`install -d` would otherwise change the mode of a link's target)."""
    p = shlex.quote(path)
    message = shlex.quote(f"sparkbase: {path} is a symbolic link or not a directory: nothing written")
    return f"if [ -L {p} ] || {{ [ -e {p} ] && [ ! -d {p} ]; }}; then echo {message} >&2; exit 1; fi"


def atomic_upload(src: Any, path: str, mode: int, sha256: str | None) -> Any:
    """Upload `src` into a private directory made beside `path` (`mkdir` fails when anything
    is at its random name, and nobody else can add to it), check it, set its mode, then
    rename it over `path` with `mv -T` (a directory there never swallows it), only while
    `path` is nothing or a regular file (`guard`); nothing here follows a link. What earlier,
    interrupted uploads left beside `path` is removed first."""
    temp = temp_dir(path)
    new = f"{temp}/{TEMP_NAME}"
    yield StringCommand(guard(path))
    yield remove_leftovers(path)
    yield cmd("mkdir", "-m", "700", "--", temp)
    yield FileUploadCommand(src, new)
    if sha256 is not None:
        line = f"printf '%s  %s\\n' {shlex.quote(sha256)} {shlex.quote(new)}"
        yield StringCommand(f"{line} | sha256sum -c --quiet -")
    yield cmd("chmod", f"{mode:o}", "--", new)
    yield StringCommand(f"{guard(path)}; {cmd('mv', '-T', '-f', '--', new, path).get_raw_value()}")
    yield cmd("rmdir", "--", temp)


def remove_leftovers(path: str) -> StringCommand:
    """Remove what interrupted uploads of sparkbase left beside `path`, and only that
    (`is_leftover`: its shape; a link, a foreign file or a directory holding anything else
    at those names is kept): 0.4.1's file with `rm -f`, a private directory with its upload
    by `rm -f` of the upload and `rmdir`, which removes nothing else."""
    new = shlex.quote(TEMP_NAME)
    return StringCommand(f"for left in {leftovers_glob(path)}; do if {is_leftover()}; then "
                         f'if [ -d "$left" ]; then rm -f -- "$left"/{new} && rmdir -- "$left"; '
                         f'else rm -f -- "$left"; fi; fi; done')
