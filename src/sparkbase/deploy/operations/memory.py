"""Memory operations: the swap file (never overwriting one that is not sparkbase's), swapon, THP, sysctls."""

from __future__ import annotations

import shlex
import uuid
from typing import Any

from pyinfra.api.command import StringCommand
from pyinfra.api.exceptions import OperationError
from pyinfra.api.operation import operation

from sparkbase.deploy.node import active_swaps, node_facts, owned_record
from sparkbase.deploy.operations.base import Decision, carry_out, cmd, noop, refused_kind
from sparkbase.deploy.operations.record import remember
from sparkbase.policy.ownership import (
    Kind,
    OwnershipRecord,
    created,
    decide_identified,
    now_utc,
)


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
