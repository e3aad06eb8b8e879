"""Memory operations (section `memory`): the swap file (never overwriting one that is not
sparkbase's), swapon, THP, sysctls, and the installer's swap line in /etc/fstab.

/etc/fstab is a file sparkbase shares with the OS: the installer's swap line is marked
`noauto` when the baseline says so (the edit recorded exactly), and put back on a node whose
baseline does not, while the line still reads as sparkbase wrote it. The decisions are pure
(`sparkbase.policy.fstab`); these operations read the file, check that what they read is the
file byte for byte (its sha256), and write the new text atomically, after a guard that the
file did not change since it was read.
"""

from __future__ import annotations

import hashlib
import shlex
import uuid
from io import BytesIO
from typing import Any

from pyinfra.api.command import StringCommand
from pyinfra.api.exceptions import OperationError
from pyinfra.api.operation import operation

from sparkbase.deploy.node import active_swaps, node_facts, owned_record
from sparkbase.deploy.operations.base import (
    Decision,
    atomic_upload,
    carry_out,
    cmd,
    noop,
    obstacle,
    refused_kind,
)
from sparkbase.deploy.operations.record import forget, remember
from sparkbase.facts.model import FileInfo
from sparkbase.model.ownership import Kind, OwnershipRecord, created, now_utc
from sparkbase.policy.fstab import FSTAB, FstabEdit, decide_noauto, decide_restore
from sparkbase.policy.ownership import KEPT, decide_identified


class NotSparkbases(ValueError):
    """Something sparkbase would have to overwrite is there and is not sparkbase's."""


def decide_swap_file(path: str, size_gib: int, header_page_size: int, found: dict[str, Any] | None,
                     uuid: str | None, active: bool, owned: OwnershipRecord, new_uuid: str) -> Decision:
    """Make the swap file (mkswap writes `new_uuid`, which the record keeps); a file at the
    path that is not the right swap file is remade only when sparkbase created it, unchanged:
    anything else (a symbolic link, a directory, any file sparkbase did not make) raises
    `NotSparkbases`, and nothing is touched."""
    size = size_gib * 1024**3
    kind = found.get("kind", "regular file") if found is not None else "regular file"
    if kind != "regular file":
        raise NotSparkbases(f"{path} is {refused_kind(kind)}: sparkbase makes a swap file only where "
                            "nothing is, or over a regular file it made; nothing was written. Move it "
                            "away, then apply again")
    if found is not None and found["size"] == size and found["header_page_size"] == header_page_size:
        if found["mode"] == 0o600:
            return Decision([], f"{path} is {size_gib} GiB with a {header_page_size}-byte header")
        return Decision([["chmod", "600", path]])
    if found is not None:
        verdict = decide_identified(Kind.SWAP, path, True, uuid, owned)
        if not verdict.removable:
            raise NotSparkbases(f"{path} exists ({found['size']} bytes) and was {verdict.verdict.value}: "
                                "sparkbase will not overwrite it; move it away, then apply again")
    commands = []
    if found is not None and active:
        commands.append(["swapoff", path])
    if found is not None and found["size"] != size:
        commands.append(["rm", "-f", "--", path])
    return Decision([*commands, ["fallocate", "-l", f"{size_gib}G", path], ["chmod", "600", path],
                     ["mkswap", "-U", new_uuid, "-p", str(header_page_size), path]])


@operation()
def swap_file(path: str, size_gib: int, header_page_size: int, baseline: str = "") -> Any:
    """The swap file exists at its size, mode 0600, with a header for `header_page_size`;
    recorded (with the UUID in its header) as sparkbase's when sparkbase makes it."""
    facts = node_facts()
    info = facts.swap_files[path]
    uuid_now = facts.swap_uuids[path] if info is not None else None
    active = info is not None and path in active_swaps()
    owned = owned_record() if info is not None else OwnershipRecord()
    new_uuid = str(uuid.uuid4())
    try:
        decision = decide_swap_file(path, size_gib, header_page_size, info, uuid_now, active, owned, new_uuid)
    except NotSparkbases as exc:
        raise OperationError(str(exc)) from None
    yield from carry_out(decision)
    if any(argv[0] == "mkswap" for argv in decision.commands):
        yield from remember(created(Kind.SWAP, path, baseline, now_utc(), uuid=new_uuid))


@operation()
def swapon(path: str, header_page_size: int) -> Any:
    """`swapon` the file, only when the running page size matches its header."""
    if path in active_swaps():
        noop(f"{path} is active")
        return
    running = node_facts().page_size or 0
    if running != header_page_size:
        noop(f"running page size {running} differs from the {header_page_size}-byte header: "
              "the swap activates at boot (reboot pending)")
        return
    yield cmd("swapon", path)


@operation()
def thp(value: str) -> Any:
    """Transparent hugepages set live (the kernel command line sets it at boot)."""
    current = node_facts().thp or ""
    if current == value:
        noop(f"transparent hugepages are {value}")
        return
    yield StringCommand(f"echo {shlex.quote(value)} > /sys/kernel/mm/transparent_hugepage/enabled")


@operation()
def sysctl_apply(file: str, values: dict[str, str]) -> Any:
    """`sysctl -p FILE` when a live value differs from the baseline."""
    if not values:
        noop("the baseline sets no sysctls")
        return
    live = node_facts().sysctls
    differ = [key for key, value in values.items()
              if " ".join((live.get(key) or "").split()) != " ".join(value.split())]
    if not differ:
        noop(f"all {len(values)} sysctls hold their values")
        return
    yield cmd("sysctl", "-p", file)


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
