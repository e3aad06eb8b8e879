"""Follow-up operations: what makes a written file take effect (systemd reloads the serving
slice, netplan sets the live addresses, the initramfs packs the nvidia-drm options).

Each is decided from the node's state, not only from whether its file changes in this run:
a run that died after writing the file (and before the follow-up) leaves the file right
and its effect missing, and the next run must still finish the job. So every decision
takes the state that shows the effect (systemd's `NeedDaemonReload`, `ip -j addr show`, the
file as the initramfs packs it) and whether the file will change now (then the state read
before the write cannot show the new effect yet). The decisions are pure (`decide_*`,
tested as data in `tests/unit/activation_cases/`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyinfra.api.operation import operation

from sparkbase.deploy.node import node_facts
from sparkbase.deploy.operations.base import Decision, carry_out, changed
from sparkbase.facts.model import InitramfsCopy, Interface

DAEMON_RELOAD = ["systemctl", "daemon-reload"]
NETPLAN_APPLY = ["netplan", "apply"]
INITRAMFS_UPDATE = ["update-initramfs", "-u", "-k", "all"]


def decide_daemon_reload(unit: str, file_changes: bool, need_reload: bool | None) -> Decision:
    """`systemctl daemon-reload` when the unit's file changes now, or systemd says its loaded
    copy is older than the file on disk (`NeedDaemonReload=yes`)."""
    if file_changes:
        return Decision([DAEMON_RELOAD])
    if need_reload:
        return Decision([DAEMON_RELOAD])
    if need_reload is None:
        return Decision([], f"systemd did not say whether {unit} needs a reload (NeedDaemonReload)")
    return Decision([], f"systemd has loaded {unit} as it is on disk")


def link_differences(links: Mapping[str, Mapping[str, Any]], live: Mapping[str, Interface]) -> list[str]:
    """How the live fabric netdevs differ from what the netplan sets (MTU, each address), as
    the audit's `fabric.link` judges them; a netdev the node does not have is not netplan's
    to fix and is left to the audit."""
    differences: list[str] = []
    for netdev, want in sorted(links.items()):
        iface = live.get(netdev)
        if iface is None:
            continue
        if iface.mtu != int(want["mtu"]):
            differences.append(f"{netdev} mtu {iface.mtu}, netplan sets {want['mtu']}")
        missing = [address for address in want["addresses"] if address not in iface.addresses]
        if missing:
            has = ", ".join(iface.addresses) or "none"
            differences.append(f"{netdev} lacks {', '.join(missing)} (has {has})")
    return differences


def decide_netplan_apply(links: Mapping[str, Mapping[str, Any]], file_changes: bool,
                         live: Mapping[str, Interface]) -> Decision:
    """`netplan apply` when the fabric netplan changes now, or a live fabric netdev is not as
    the netplan sets it (its MTU, or an address it lacks)."""
    if file_changes:
        return Decision([NETPLAN_APPLY])
    if not live:
        return Decision([], "the live addresses could not be read (ip -j addr show)")
    if link_differences(links, live):
        return Decision([NETPLAN_APPLY])
    return Decision([], "the live fabric netdevs are as the netplan sets them")


def decide_initramfs_update(release: str, sha256: str | None, file_changes: bool,
                            packed: InitramfsCopy) -> Decision:
    """`update-initramfs -u -k all` when the options file changes now, or `release`'s
    initramfs packs another copy of it than the one rendered (`sha256`). No image for the
    kernel yet: its package builds one from /etc/modprobe.d as it is."""
    if sha256 is None:
        return Decision([], "no nvidia-drm options are rendered")
    if file_changes:
        return Decision([INITRAMFS_UPDATE])
    if not packed.read:
        return Decision([], f"the {release} initramfs was not read: {packed.problem}")
    if packed.sha256 != sha256:
        return Decision([INITRAMFS_UPDATE])
    return Decision([], f"the {release} initramfs holds the nvidia-drm options as rendered")


@operation()
def daemon_reload(unit: str, trigger: Any = None) -> Any:
    """`systemctl daemon-reload` until systemd has loaded `unit` as it is on disk."""
    yield from carry_out(decide_daemon_reload(unit, changed(trigger), node_facts().need_reload[unit]))


@operation()
def netplan_apply(links: dict[str, dict[str, Any]], trigger: Any = None) -> Any:
    """`netplan apply` until the live fabric netdevs are as the netplan sets them."""
    live = node_facts().interfaces
    yield from carry_out(decide_netplan_apply(links, changed(trigger), live))


@operation()
def initramfs_update(release: str, path: str, sha256: str | None, trigger: Any = None) -> Any:
    """`update-initramfs` until the baseline kernel's initramfs packs the options file as rendered."""
    if sha256 is None:
        yield from carry_out(decide_initramfs_update(release, sha256, changed(trigger), InitramfsCopy(False)))
        return
    packed = node_facts().initramfs[(release, path)]
    yield from carry_out(decide_initramfs_update(release, sha256, changed(trigger), packed))
