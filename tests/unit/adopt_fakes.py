"""Fake facts of four Sparks cabled as the site's ring, for the adopt unit tests.

Each cable joins node i's port 0 to node i+1's port 1 (the last to the first), and carries
two paths, one per PCIe view of the port, each with its own /24 `10.<a><b>.<path>.<node>`
(the shipped inventory's numbering). Each fabric netdev's IPv4 address is in its RDMA
device's GID table as RoCE v1 and RoCE v2 entries (index 2 and 3, as on DGX OS), behind
two link-local entries.
"""

from __future__ import annotations

from dataclasses import replace

from sparkbase.facts.model import Gid, GidEntry, Interface, NodeFacts

NODES = ("spark1", "spark2", "spark3", "spark4")
#: (netdev, hca, physical port, path number) of the four PCIe views
VIEWS = (
    ("enp1s0f0np0", "rocep1s0f0", 0, 1),
    ("enP2p1s0f0np0", "roceP2p1s0f0", 0, 2),
    ("enp1s0f1np1", "rocep1s0f1", 1, 1),
    ("enP2p1s0f1np1", "roceP2p1s0f1", 1, 2),
)
RELEASE = "6.17.0-1032-nvidia"


def ipv4_gid(ip: str) -> str:
    """The IPv4-mapped GID of `ip` as sysfs prints it."""
    a, b, c, d = (int(part) for part in ip.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def ring_address(node: str, port: int, path: int, nodes: tuple[str, ...] = NODES) -> str:
    """The address of `node`'s `port` view on `path` in the ring of `nodes`."""
    index = nodes.index(node)
    peer = nodes[(index + 1) % len(nodes)] if port == 0 else nodes[(index - 1) % len(nodes)]
    numbers = sorted((index + 1, nodes.index(peer) + 1))
    return f"10.{numbers[0]}{numbers[1]}.{path}.{index + 1}/24"


def ring_facts(node: str, nodes: tuple[str, ...] = NODES, gid_index: int = 3,
               mgmt: str | None = None) -> NodeFacts:
    """Facts of `node` in the ring of `nodes`: netdevs, addresses and GID tables."""
    interfaces: dict[str, Interface] = {}
    table: list[GidEntry] = []
    for netdev, hca, port, path in VIEWS:
        address = ring_address(node, port, path, nodes)
        interfaces[netdev] = Interface(netdev, 9000, "UP", (address,))
        ip = address.split("/")[0]
        link_local = f"fe80:0000:0000:0000:4ebb:47ff:fe{nodes.index(node):02x}:{port}{path:03x}"
        table += [
            GidEntry(hca, 1, 0, Gid(link_local, "IB/RoCE v1"), netdev),
            GidEntry(hca, 1, 1, Gid(link_local, "RoCE v2"), netdev),
            GidEntry(hca, 1, gid_index - 1, Gid(ipv4_gid(ip), "IB/RoCE v1"), netdev),
            GidEntry(hca, 1, gid_index, Gid(ipv4_gid(ip), "RoCE v2"), netdev),
        ]
    interfaces["enP7s7"] = Interface("enP7s7", 1500, "UP", (f"{mgmt}/24",) if mgmt else ())
    return NodeFacts(node=node, kernel_release=RELEASE, machine="aarch64", page_size=4096,
                     interfaces=interfaces, gid_table=tuple(table), thp="madvise",
                     packages={f"linux-image-{RELEASE}": "6.17.0-1032.32",
                               f"linux-tools-{RELEASE}": "6.17.0-1032.32"},
                     governors=dict.fromkeys(range(20), "performance"),
                     nccl_conf="NCCL_IB_MERGE_NICS=0\nNCCL_IB_HCA=rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1\n"
                               "NCCL_SOCKET_IFNAME=enP7s7\nNCCL_IB_GID_INDEX=3\n")


def fleet(nodes: tuple[str, ...] = NODES, **changes: object) -> dict[str, NodeFacts]:
    """Facts of every node of the ring; `changes` (field -> value) applied to the last node."""
    facts = {node: ring_facts(node, nodes) for node in nodes}
    if changes:
        facts[nodes[-1]] = replace(facts[nodes[-1]], **changes)  # type: ignore[arg-type]
    return facts
