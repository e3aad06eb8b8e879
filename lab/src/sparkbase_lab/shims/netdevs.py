"""The emulated node's netdevs as they are at boot: the ConnectX-7 fabric ports and the
management NIC, each up, MTU 1500, no address, with a stable MAC.

Below `cmd_net` (`ip`, `netplan`) and `sysfs` (the InfiniBand and netdev trees), which both
start from this state; imports only `os`/`sys` (through `common`), as `ip -j addr` must.
"""

from __future__ import annotations

from sparkbase_lab.shims.common import node_info

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

#: the ConnectX-7 RDMA devices and their netdevs, and the management NIC (the same values
#: as `sparkbase_lab.boot.FABRIC` / `MGMT_NETDEV`, which the shims must not import)
FABRIC = {
    "rocep1s0f0": "enp1s0f0np0",
    "rocep1s0f1": "enp1s0f1np1",
    "roceP2p1s0f0": "enP2p1s0f0np0",
    "roceP2p1s0f1": "enP2p1s0f1np1",
}
MGMT_NETDEV = "enP7s7"


def mac_address(node: str, netdev: str) -> str:
    """A stable, locally administered MAC for a node's netdev (as `boot.mac_address`)."""
    from hashlib import sha256

    digest = sha256(f"{node}/{netdev}".encode()).digest()
    return "4c:bb:47:" + ":".join(f"{b:02x}" for b in digest[:3])


def default_net() -> dict[str, Any]:
    """Every emulated netdev as it is before any netplan: up, MTU 1500, no address."""
    node = node_info().get("name", "spark")
    return {
        netdev: {"mtu": 1500, "up": True, "addresses": [], "mac": mac_address(node, netdev)}
        for netdev in [*FABRIC.values(), MGMT_NETDEV]
    }
