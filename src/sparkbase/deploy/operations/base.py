"""What every operation module shares: quoted commands, decisions, no-op reasons, change triggers."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NamedTuple

from pyinfra.api.command import FileUploadCommand, StringCommand
from pyinfra.context import host

from sparkbase.policy.ownership import Kind

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


def atomic_upload(src: Any, path: str, mode: int, sha256: str | None, temp: str) -> Any:
    """Upload to `temp` next to `path`, check it, set its mode, then rename over `path`."""
    yield FileUploadCommand(src, temp)
    if sha256 is not None:
        line = f"printf '%s  %s\\n' {shlex.quote(sha256)} {shlex.quote(temp)}"
        yield StringCommand(f"{line} | sha256sum -c --quiet -")
    yield cmd("chmod", f"{mode:o}", temp)
    yield cmd("mv", "-f", temp, path)
