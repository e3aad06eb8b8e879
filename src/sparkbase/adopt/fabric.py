"""The fabric as it is cabled and addressed, found from the nodes themselves (pure).

Each node's GID tables (`NodeFacts.gid_table`) say which netdev each RDMA device serves and
at which index its IPv4 RoCE v2 address sits; `ip -j addr` gives that address its prefix.
One such address is one end of an RDMA path. Two ends on two nodes sharing a subnet are
one path; the paths between one port of a node and one port of its peer are one cable.
The physical port of a netdev is the one its predictable name carries (`...np0` is port
0, as systemd names a port from the device's `phys_port_name`); the PCIe domain in the name
(`enP2p1s0f0np0` is domain 2) orders the two views of one port, domain 0 first.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparkbase.facts.model import NodeFacts

_PHYS_PORT = re.compile(r"np(?P<port>\d+)$")
_DOMAIN = re.compile(r"^en(?:P(?P<domain>\d+))?p\d+s\d+")


def physical_port(netdev: str) -> int | None:
    """The physical port a netdev name carries (`enp1s0f1np1` -> 1), None when it names none."""
    match = _PHYS_PORT.search(netdev)
    return int(match["port"]) if match else None


def pci_domain(netdev: str) -> int:
    """The PCI domain a netdev name carries (`enP2p1s0f0np0` -> 2; none written: 0)."""
    match = _DOMAIN.match(netdev)
    return int(match["domain"]) if match and match["domain"] else 0


@dataclass(frozen=True)
class View:
    """One PCIe view of a port: a netdev, its RDMA device and the physical port."""

    netdev: str
    hca: str
    port: int

    @property
    def order(self) -> tuple[int, int, str]:
        """Port, then PCI domain (domain 0 first), then name: how baselines list views."""
        return (self.port, pci_domain(self.netdev), self.netdev)


@dataclass(frozen=True)
class End:
    """One end of an RDMA path on a node: the view, its address and the GID index of it."""

    node: str
    view: View
    address: str  # a.b.c.d/prefix
    gid_index: int

    @property
    def network(self) -> ipaddress.IPv4Network:
        """The subnet the address lies in."""
        return ipaddress.IPv4Interface(self.address).network


@dataclass(frozen=True)
class Path:
    """One RDMA path as one of its ends sees it (an inventory `FabricPath`)."""

    netdev: str
    hca: str
    peer_netdev: str
    subnet: str
    address: str


@dataclass(frozen=True)
class Cable:
    """One cable from a local port to a peer's port, and the paths it carries."""

    port: int
    peer: str
    peer_port: int
    paths: tuple[Path, ...]


@dataclass(frozen=True)
class NodeFabric:
    """What one node's fabric is: its views, cables, MTU and GID index."""

    views: tuple[View, ...]
    cables: tuple[Cable, ...]
    mtu: int | None
    gid_index: int | None


@dataclass(frozen=True)
class Fabric:
    """The fleet's fabric: per node, and what could not be put together (as sentences)."""

    nodes: dict[str, NodeFabric]
    notes: tuple[str, ...] = ()

    def cabled(self, node: str, other: str) -> bool:
        """Whether a cable joins `node` and `other`."""
        found = self.nodes.get(node)
        return found is not None and any(cable.peer == other for cable in found.cables)


def views_of(facts: NodeFacts, notes: list[str]) -> tuple[View, ...]:
    """Every (netdev, RDMA device) pair the node's GID tables name, with its physical port."""
    pairs = sorted({(entry.ndev, entry.hca) for entry in facts.gid_table if entry.ndev})
    views: list[View] = []
    for netdev, hca in pairs:
        port = physical_port(netdev)
        if port is None:
            notes.append(f"{facts.node}: {netdev} ({hca}) names no physical port (no 'npN' ending): left out")
            continue
        views.append(View(netdev, hca, port))
    return tuple(sorted(views, key=lambda view: view.order))


def ends_of(facts: NodeFacts, views: Sequence[View], notes: list[str]) -> list[End]:
    """The node's path ends: each RoCE v2 GID entry holding an IPv4 address its netdev has."""
    by_netdev = {view.netdev: view for view in views}
    ends: list[End] = []
    for entry in facts.gid_table:
        ip = entry.roce_v2_ipv4
        view = by_netdev.get(entry.ndev or "")
        if ip is None or view is None or view.hca != entry.hca:
            continue
        interface = facts.interfaces.get(view.netdev)
        address = next((a for a in interface.addresses if a.split("/")[0] == ip), None) if interface else None
        if address is None:
            notes.append(f"{facts.node}: {view.hca} GID {entry.index} holds {ip}, which {view.netdev} "
                         "does not have (ip addr): left out")
            continue
        ends.append(End(facts.node, view, address, entry.index))
    return ends


def _common(values: Sequence[int], what: str, node: str, notes: list[str]) -> int | None:
    """The one value every item has; else the smallest, said in a note (None with no items)."""
    distinct = sorted(set(values))
    if len(distinct) > 1:
        notes.append(f"{node}: {what} differs between its fabric ports ({', '.join(map(str, distinct))}); "
                     f"{distinct[0]} written")
    return distinct[0] if distinct else None


def discover(facts: Mapping[str, NodeFacts]) -> Fabric:
    """The fabric of the nodes `facts` describe (pure): views, paths paired by subnet, cables."""
    notes: list[str] = []
    views = {node: views_of(facts[node], notes) for node in sorted(facts)}
    ends = [end for node in sorted(facts) for end in ends_of(facts[node], views[node], notes)]
    by_subnet: dict[ipaddress.IPv4Network, list[End]] = {}
    for end in ends:
        by_subnet.setdefault(end.network, []).append(end)
    partner: dict[End, End] = {}
    for subnet, found in sorted(by_subnet.items()):
        if len(found) == 2 and found[0].node != found[1].node:
            partner[found[0]], partner[found[1]] = found[1], found[0]
            continue
        where = ", ".join(f"{end.node} {end.view.netdev} {end.address}" for end in found)
        why = "no peer in it" if len(found) == 1 else "not exactly two nodes' ends"
        notes.append(f"subnet {subnet}: {why} ({where}): not a path of the fabric")
    nodes: dict[str, NodeFabric] = {}
    for node in sorted(facts):
        mine = [end for end in ends if end.node == node and end in partner]
        cables: dict[tuple[int, str, int], list[tuple[End, End]]] = {}
        for end in mine:
            far = partner[end]
            cables.setdefault((end.view.port, far.node, far.view.port), []).append((end, far))
        built = tuple(
            Cable(port, peer, peer_port, tuple(
                Path(end.view.netdev, end.view.hca, far.view.netdev, str(end.network), end.address)
                for end, far in sorted(pairs, key=lambda pair: pair[0].view.order)))
            for (port, peer, peer_port), pairs in sorted(cables.items()))
        netdevs = [view.netdev for view in views[node]]
        interfaces = facts[node].interfaces
        mtu = _common([interfaces[n].mtu for n in netdevs if n in interfaces], "the MTU", node, notes)
        gid = _common([end.gid_index for end in mine], "the RoCE v2 GID index", node, notes)
        nodes[node] = NodeFabric(views[node], built, mtu, gid)
    return Fabric(nodes, tuple(notes))


@dataclass(frozen=True)
class RankOrder:
    """The nodes in rank order, and how that order was chosen (a sentence for the operator)."""

    nodes: tuple[str, ...]
    how: str


def _is_ring(order: Sequence[str], fabric: Fabric) -> bool:
    if len(order) < 3:
        return all(fabric.cabled(a, b) for a, b in itertools.pairwise(order))
    return all(fabric.cabled(order[i], order[(i + 1) % len(order)]) for i in range(len(order)))


def rank_order(nodes: Sequence[str], fabric: Fabric) -> RankOrder:
    """Sorted alias order when the cables join each node to the next (and the last to the
    first); else the ring walked from the first alias through each node's port 0 (port 0
    goes to the next rank, as the site cables it), when that walk meets every node once and
    closes; else sorted order, said so."""
    ordered = tuple(sorted(nodes))
    if len(ordered) < 2 or _is_ring(ordered, fabric):
        return RankOrder(ordered, "sorted alias order, which follows the cables")
    walk = [ordered[0]]
    while len(walk) < len(ordered):
        here = fabric.nodes.get(walk[-1])
        cable = next((c for c in here.cables if c.port == 0), None) if here else None
        if cable is None or cable.peer in walk or cable.peer not in ordered:
            break
        walk.append(cable.peer)
    if len(walk) == len(ordered) and _is_ring(walk, fabric):
        return RankOrder(tuple(walk), f"the cables, from {ordered[0]} through each node's port 0")
    return RankOrder(ordered, "sorted alias order; the cables make no ring of these nodes")
