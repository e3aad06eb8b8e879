"""What every operation module shares: quoted commands, decisions, no-op reasons, change triggers."""

from __future__ import annotations

import shlex
from typing import Any, NamedTuple

from pyinfra.api.command import FileUploadCommand, StringCommand
from pyinfra.context import host

from sparkbase.policy.ownership import Kind

#: host name -> operation hash -> the reason the operation did nothing
NOOP_REASONS: dict[str, dict[str, str]] = {}


def noop(reason: str) -> None:
    """Record and log why the current operation changes nothing."""
    op_hash = host.current_op_hash
    if op_hash:
        NOOP_REASONS.setdefault(host.name, {})[op_hash] = reason
    host.noop(reason)


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
