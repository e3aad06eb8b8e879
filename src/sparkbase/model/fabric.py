"""The fabric section (ConnectX-7 views, MTU, RoCE GID), and its rules over the inventory:
cables between ring neighbours, one subnet per RDMA path.

The rule is the variant's (ds41f `docs/switchless-topology.md`, 0fbd7b76): "Each
cable/stripe has its own subnet, present at exactly its two endpoints. Two PCIe-root
interfaces on one cable use two separate subnets." A cable carries two paths (the two PCIe
views of a port), so each path is checked on its own: its netdev and HCA are a view of the
cabled port, its address lies in its subnet, the peer's end names it back with the same
subnet, and no other interface of any host shares or overlaps that subnet.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pydantic import Field

from sparkbase.model.findings import DocRef, Finding
from sparkbase.model.paths import SiteNetplanFile
from sparkbase.model.shapes import SHAPE_NODES
from sparkbase.model.types import Name, Netdev, StrictModel, ZeroOrOne
from sparkbase.model.yamlio import dotted

if TYPE_CHECKING:
    from sparkbase.model.inventory import FabricPath, Inventory, Link, Node
    from sparkbase.model.lanes import Lane
    from sparkbase.model.shapes import Shape
    from sparkbase.model.yamlio import PathKey

INVENTORY: DocRef = ("inventory", "")


class FabricPort(StrictModel):
    """One PCIe view of a ConnectX-7 port: a netdev and its RDMA device."""

    netdev: Netdev = Field(description="network device name, e.g. enp1s0f0np0")
    hca: Name = Field(description="RDMA device name, e.g. rocep1s0f0")
    port: ZeroOrOne = Field(description="physical 200 GbE port (cable) this view belongs to")


class FabricSpec(StrictModel):
    """The ring fabric: ConnectX-7 views, MTU and the RoCE GID NCCL must use."""

    mtu: int = Field(ge=1280, le=9216, description="MTU of every fabric netdev")
    ports: list[FabricPort] = Field(
        min_length=1, description="every PCIe view of the ConnectX-7 ports (four on a Spark)"
    )
    gid_index: int = Field(ge=0, le=255, description="GID index that must hold the IPv4 RoCE v2 address")
    netplan_file: SiteNetplanFile | None = Field(
        default=None,
        description="the site's own netplan file that configures the fabric ports: sparkbase manages the "
        "fabric's interfaces in it (the first apply records its content, which moving the node to a "
        "baseline without it puts back) and writes no file of its own; unset: sparkbase writes "
        "/etc/netplan/60-sparkbase-fabric.yaml and refuses while another netplan file configures a "
        "fabric port",
    )

    def netdevs(self) -> list[str]:
        """Netdev names of every port view."""
        return [port.netdev for port in self.ports]

    def hca_names(self) -> list[str]:
        """RDMA device names of every port view."""
        return [port.hca for port in self.ports]


class Qualified(Protocol):
    """What the fabric rules read of a baseline (`Baseline`, which imports this module)."""

    @property
    def fabric(self) -> FabricSpec: ...
    @property
    def shapes(self) -> list[Shape]: ...
    def shape(self, name: str) -> Shape | None: ...


@dataclass(frozen=True)
class PathEnd:
    """One end of an RDMA path, where the inventory declares it."""

    node: str
    peer: str
    path: FabricPath
    key: PathKey  # nodes.N.links[i].paths[j]

    @property
    def network(self) -> ipaddress.IPv4Network:
        """The path's subnet."""
        return ipaddress.IPv4Network(self.path.subnet)

    def is_partner(self, other: PathEnd) -> bool:
        """`other` is the far end of this same path."""
        return (
            other.node == self.peer
            and other.peer == self.node
            and other.path.netdev == self.path.peer_netdev
            and other.path.peer_netdev == self.path.netdev
        )


def shape_of(count: int) -> str:
    """The name of a ring of `count` nodes (ring4 and triangle3 are the shapes served)."""
    return {4: "ring4", 3: "triangle3"}.get(count, f"ring of {count}")


def ring_neighbours(inventory: Inventory) -> dict[str, set[str]]:
    """Node -> the nodes next to it in rank order (rank i reaches i-1 and i+1, modulo the
    node count: ring4 is i<->i+-1 mod 4, triangle3 joins every pair)."""
    order = sorted(inventory.nodes, key=lambda name: inventory.nodes[name].rank)
    count = len(order)
    if count < 2:
        return {name: set() for name in order}
    return {
        name: {order[(index - 1) % count], order[(index + 1) % count]}
        for index, name in enumerate(order)
    }


def node_gid_index(node: Node, baseline: Qualified) -> int:
    """The GID index of the node's IPv4 RoCE v2 address: its own, else the baseline's."""
    return baseline.fabric.gid_index if node.gid_index is None else node.gid_index


def node_shape(inventory: Inventory, node: str, baseline: Qualified) -> str | None:
    """The serving shape `node` takes under `baseline`, which picks its NCCL settings
    (`nccl.shapes`): the inventory's `shape:` for the node; else the baseline's only shape;
    else the ring the inventory's nodes form, when the baseline is qualified for it. None:
    none applies (the node gets the shared `nccl.settings` only)."""
    entry = inventory.nodes[node]
    if entry.shape is not None:
        return entry.shape
    qualified = [shape.name for shape in baseline.shapes]
    if len(qualified) == 1:
        return qualified[0]
    ring = shape_of(len(inventory.nodes))
    return ring if ring in qualified else None


def fabric_findings(inventory: Inventory, baselines: Mapping[str, Qualified]) -> Iterator[Finding]:
    """Every fabric rule: cabling per node, then subnets and addresses across the fleet.

    A node whose baseline is missing or broken (reported elsewhere) is checked without its
    port views.
    """
    neighbours = ring_neighbours(inventory)
    for name in inventory.nodes:
        yield from _node_findings(name, inventory, baselines, neighbours)
    ends = [
        PathEnd(name, link.peer, path, ("nodes", name, "links", i, "paths", j))
        for name, node in inventory.nodes.items()
        for i, link in enumerate(node.links)
        for j, path in enumerate(link.paths)
    ]
    yield from _subnet_findings(ends)
    yield from _address_findings(ends)


def _views(baseline: Qualified | None, port: int) -> dict[str, str]:
    """Netdev -> HCA of every PCIe view of `port` (empty without a baseline)."""
    if baseline is None:
        return {}
    return {view.netdev: view.hca for view in baseline.fabric.ports if view.port == port}


def _node_findings(
    name: str, inventory: Inventory, baselines: Mapping[str, Qualified], neighbours: dict[str, set[str]]
) -> Iterator[Finding]:
    node = inventory.nodes[name]
    baseline = baselines.get(node.baseline)
    if baseline is not None and node.shape is not None and baseline.shape(node.shape) is None:
        yield Finding(
            INVENTORY,
            ("nodes", name, "shape"),
            f"baseline {node.baseline} is not qualified for shape {node.shape} "
            f"(qualified: {', '.join(shape.name for shape in baseline.shapes)})",
        )
    used_ports: set[int] = set()
    used_netdevs: dict[str, PathKey] = {}
    for index, link in enumerate(node.links):
        key: PathKey = ("nodes", name, "links", index)
        if link.port in used_ports:
            yield Finding(INVENTORY, (*key, "port"), f"port {link.port} is cabled twice")
        used_ports.add(link.port)
        peer = inventory.nodes.get(link.peer)
        if peer is None or link.peer == name:
            yield Finding(INVENTORY, (*key, "peer"), f"'{link.peer}' is not another node of the inventory")
            continue
        if link.peer not in neighbours.get(name, set()):
            yield Finding(
                INVENTORY,
                (*key, "peer"),
                f"{name} (rank {node.rank}) and {link.peer} (rank {peer.rank}) are not neighbours "
                f"in the {shape_of(len(inventory.nodes))}: a cable joins rank i to rank i+-1 "
                f"(here {name} reaches {', '.join(sorted(neighbours.get(name, set()))) or 'nobody'})",
            )
        back = _back_link(name, link, peer)
        if back is None:
            yield Finding(
                INVENTORY,
                (*key, "peer"),
                f"cabling is not reciprocal: {link.peer} has no link on port {link.peer_port} "
                f"back to {name} port {link.port}",
            )
        views = _views(baseline, link.port)
        peer_views = _views(baselines.get(peer.baseline), link.peer_port)
        for j, path in enumerate(link.paths):
            path_key: PathKey = (*key, "paths", j)
            if path.netdev in used_netdevs:
                yield Finding(
                    INVENTORY, (*path_key, "netdev"),
                    f"{path.netdev} is used twice on {name} "
                    f"(also at {dotted(used_netdevs[path.netdev])})",
                )
            used_netdevs.setdefault(path.netdev, path_key)
            yield from _path_findings(path, path_key, link, views, peer_views)
            if back is not None:
                yield from _partner_findings(name, link, path, path_key, back)
        missing = set(views) - {path.netdev for path in link.paths}
        if missing:
            yield Finding(
                INVENTORY,
                (*key, "paths"),
                f"no path for {', '.join(sorted(missing))} (every PCIe view of port {link.port} "
                "carries a path)",
            )


def _back_link(name: str, link: Link, peer: Node) -> Link | None:
    return next(
        (
            other
            for other in peer.links
            if other.peer == name and other.port == link.peer_port and other.peer_port == link.port
        ),
        None,
    )


def _path_findings(
    path: FabricPath, key: PathKey, link: Link, views: dict[str, str], peer_views: dict[str, str]
) -> Iterator[Finding]:
    """One end on its own: a view of the cabled port, the HCA of that view, the address in
    the subnet, the peer's netdev a view of the peer's port."""
    if views and path.netdev not in views:
        yield Finding(
            INVENTORY, (*key, "netdev"),
            f"{path.netdev} is not a view of port {link.port} (views: {', '.join(sorted(views))})",
        )
    elif views and views[path.netdev] != path.hca:
        yield Finding(
            INVENTORY, (*key, "hca"),
            f"{path.netdev}'s RDMA device is {views[path.netdev]}, not {path.hca} "
            "(the baseline's fabric.ports)",
        )
    if ipaddress.IPv4Interface(path.address).ip not in ipaddress.IPv4Network(path.subnet):
        yield Finding(
            INVENTORY, (*key, "address"), f"{path.address} is not in the path's subnet {path.subnet}"
        )
    if peer_views and path.peer_netdev not in peer_views:
        yield Finding(
            INVENTORY, (*key, "peer_netdev"),
            f"{path.peer_netdev} is not a view of {link.peer}'s port {link.peer_port} "
            f"(views: {', '.join(sorted(peer_views))})",
        )


def _partner_findings(name: str, link: Link, path: FabricPath, key: PathKey, back: Link) -> Iterator[Finding]:
    """The far end names this path back, in the same subnet."""
    partner = next((other for other in back.paths if other.netdev == path.peer_netdev), None)
    if partner is None or partner.peer_netdev != path.netdev:
        yield Finding(
            INVENTORY, (*key, "peer_netdev"),
            f"{link.peer} has no path on {path.peer_netdev} back to {name} {path.netdev} "
            f"(a path is declared at both its ends)",
        )
    elif partner.subnet != path.subnet:
        yield Finding(
            INVENTORY, (*key, "subnet"),
            f"the two ends of this path must share one subnet: {name} {path.netdev} says {path.subnet}, "
            f"{link.peer} {partner.netdev} says {partner.subnet}",
        )


def _subnet_findings(ends: list[PathEnd]) -> Iterator[Finding]:
    """No host has two interfaces in one subnet; no subnet reaches past its path's two ends.

    Overlapping subnets are found by a sweep over the address ranges in order (a fleet's
    disjoint /24s cost a sort, not every pair).
    """
    spans = sorted(
        (int(end.network.network_address), int(end.network.broadcast_address), index)
        for index, end in enumerate(ends)
    )
    open_spans: list[tuple[int, int]] = []  # (last address, index) of spans still open
    clashes: set[tuple[int, int]] = set()
    for first, last, index in spans:
        open_spans = [span for span in open_spans if span[0] >= first]
        clashes.update((min(index, other), max(index, other)) for _, other in open_spans)
        open_spans.append((last, index))
    for earlier, later in sorted(clashes, key=lambda pair: (pair[1], pair[0])):
        end, other = ends[later], ends[earlier]
        if end.is_partner(other):
            continue
        if other.node == end.node:
            message = (
                f"{end.node} has two interfaces in one subnet: {end.path.netdev} in {end.path.subnet} "
                f"and {other.path.netdev} in {other.path.subnet} (each path needs its own subnet)"
            )
        else:
            message = (
                f"subnet {end.path.subnet} ({end.node} {end.path.netdev} to {end.peer}) overlaps "
                f"{other.path.subnet} ({other.node} {other.path.netdev} to {other.peer}): a path's "
                "subnet is present at exactly its two ends"
            )
        yield Finding(INVENTORY, (*end.key, "subnet"), message)


def _address_findings(ends: list[PathEnd]) -> Iterator[Finding]:
    seen: dict[str, str] = {}
    for end in ends:
        ip = str(ipaddress.IPv4Interface(end.path.address).ip)
        if ip in seen:
            yield Finding(INVENTORY, (*end.key, "address"), f"address {ip} is also used by {seen[ip]}")
        seen.setdefault(ip, f"{end.node} {end.path.netdev}")


def lane_cabling_findings(name: str, lane: Lane, inventory: Inventory) -> Iterator[Finding]:
    """An enabled lane runs only on cables that exist: ring4 needs each node cabled to the
    next in the lane's order (and the last to the first), triangle3 every pair.

    A lane whose node list is already wrong (unknown node, a node twice, the wrong count)
    is reported for that, not here.
    """
    nodes = lane.nodes
    known = all(node in inventory.nodes for node in nodes)
    if not lane.enabled or not known or len(set(nodes)) != len(nodes):
        return
    if len(nodes) != SHAPE_NODES[lane.shape]:
        return
    count = len(nodes)
    if lane.shape == "triangle3":
        pairs = [(i, j) for i in range(count) for j in range(i + 1, count)]
    else:
        pairs = [(i, (i + 1) % count) for i in range(count)]
    for i, j in pairs:
        first, second = nodes[i], nodes[j]
        if any(link.peer == second for link in inventory.nodes[first].links):
            continue
        cabled = sorted({link.peer for link in inventory.nodes[first].links})
        yield Finding(
            ("lane", name),
            ("nodes", j),
            f"shape {lane.shape} needs a cable between {first} and {second}; the inventory cables "
            f"{first} to {', '.join(cabled) or 'nothing'} (order the nodes along the cables, or recable)",
        )
