"""The installer's swap line in /etc/fstab, a file sparkbase shares with the OS: marked
`noauto` when the baseline says so (the edit recorded exactly), and put back on a node
whose baseline does not, while the line still reads as sparkbase wrote it.

The decisions are pure (`sparkbase.policy.fstab`); these operations read the file, check
that what they read is the file byte for byte (its sha256), and write the new text
atomically, after a guard that the file did not change since it was read.
"""

from __future__ import annotations

import hashlib
import shlex
from io import BytesIO
from typing import Any

from pyinfra.api.command import StringCommand
from pyinfra.api.operation import operation

from sparkbase.deploy.node import active_swaps, node_facts, owned_record
from sparkbase.deploy.operations.base import Decision, atomic_upload, carry_out, cmd, noop, obstacle
from sparkbase.deploy.operations.record import forget, remember
from sparkbase.facts.model import FileInfo
from sparkbase.policy.fstab import FSTAB, FstabEdit, decide_noauto, decide_restore
from sparkbase.policy.ownership import KEPT, now_utc

#: /etc/fstab's mode when sparkbase cannot read it (Ubuntu installs it 0644)
FSTAB_MODE = 0o644


def exact_text(text: str | None, info: FileInfo | None) -> str | None:
    """Why the text read is not the file byte for byte (None when it is: its sha256 is the
    file's). A file without a final newline, or not UTF-8, reads back different; a symbolic
    link, or anything else that is not a regular file, is never rewritten."""
    there = obstacle(info)
    if there is not None:
        return f"{KEPT}{FSTAB} is {there}: sparkbase does not rewrite it; left as it is"
    if text is None or info is None:
        return None
    if hashlib.sha256(text.encode()).hexdigest() != info.sha256:
        return (f"{KEPT}{FSTAB} does not read back byte for byte (no final newline, or not UTF-8): "
                "sparkbase does not rewrite it; left as it is")
    return None


def write_fstab(new: str, read: FileInfo) -> Any:
    """Guard that /etc/fstab is still the file that was read, then replace it atomically
    (same mode) with `new`."""
    guard = f"printf '%s  %s\\n' {shlex.quote(read.sha256)} {shlex.quote(FSTAB)}"
    yield StringCommand(f"{guard} | sha256sum -c --quiet -")
    data = new.encode()
    yield from atomic_upload(BytesIO(data), FSTAB, read.mode or FSTAB_MODE, hashlib.sha256(data).hexdigest())


def _read() -> tuple[str | None, FileInfo | None]:
    facts = node_facts()
    info = facts.file_states[FSTAB]
    text = facts.file_texts[FSTAB] if info is not None else None
    return text, info


@operation()
def factory_swap(path: str, fstab: str, swapoff: bool, baseline: str = "") -> Any:
    """The installer's swap file as the baseline wants it: with `noauto`, its fstab line
    marked noauto (recorded with the line as found) and, with `swapoff`, switched off when
    active; `as-installed` changes nothing here (its swapon step activates it)."""
    if fstab != "noauto":
        noop(f"{path} stays as installed")
        return
    active = swapoff and path in active_swaps()
    text, info = _read()
    unreadable = exact_text(text, info)
    edit = FstabEdit(None, unreadable) if unreadable else \
        decide_noauto(path, text, owned_record(), baseline, now_utc())
    if edit.text is None and not active:
        noop(edit.reason)
        return
    if active:
        yield cmd("swapoff", path)
    if edit.text is not None and info is not None:
        yield from write_fstab(edit.text, info)
        if edit.record is not None:
            yield from remember(edit.record)


def decide_factory_swapon(path: str, found: dict[str, Any] | None, active: bool, running: int) -> Decision:
    """`swapon` the installer's swap file when the running page size is its header's; a
    missing file, or one with no swap signature, is kept as it is (sparkbase never makes it)."""
    if active:
        return Decision([], f"{path} is active")
    if found is None:
        return Decision([], f"{KEPT}{path} does not exist: sparkbase never makes the installer's swap file")
    header = found["header_page_size"]
    if header is None:
        return Decision([], f"{KEPT}{path} has no swap signature: sparkbase never formats a file it "
                            "did not make")
    if header != running:
        return Decision([], f"running page size {running} differs from {path}'s {header}-byte header: it "
                            "activates at boot (reboot pending)")
    return Decision([["swapon", path]])


@operation()
def factory_swapon(path: str) -> Any:
    """The installer's swap file active, as the node's swap (its fstab line brings it back at boot)."""
    active = path in active_swaps()
    found = None if active else node_facts().swap_files[path]
    running = (node_facts().page_size or 0) if found is not None else 0
    yield from carry_out(decide_factory_swapon(path, found, active, running))


@operation()
def factory_swap_restore(path: str) -> Any:
    """Put back the installer's swap line another baseline had sparkbase mark `noauto`,
    only while it reads exactly as sparkbase wrote it (otherwise kept and reported)."""
    text, info = _read()
    unreadable = exact_text(text, info)
    edit = FstabEdit(None, unreadable) if unreadable else \
        decide_restore(path, text, owned_record())
    if edit.text is None or info is None:
        noop(edit.reason)
        return
    yield from write_fstab(edit.text, info)
    yield from forget(edit.forget)
