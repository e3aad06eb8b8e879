"""Fabric checks: the netplan, each link, RDMA device and GID."""

from __future__ import annotations

import ipaddress

from sparkbase.audit.checks.common import apply_fix, unknown
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, fail, node_check, ok, skip
from sparkbase.facts.model import NodeFacts
from sparkbase.render import NETPLAN_PATH


@node_check("fabric.netplan", "fabric", "the four-PF fabric netplan is the rendered one")
def fabric_netplan(expected: Expected, facts: NodeFacts, _item: str | None) -> Outcome:
    rendered = expected.file(NETPLAN_PATH)
    if rendered is None:
        return skip("no fabric netplan rendered")
    seen = facts.file_sha256.get(NETPLAN_PATH)
    if seen != rendered.sha256:
        return fail(
            f"{NETPLAN_PATH} sha256 {rendered.sha256}",
            f"sha256 {seen}" if seen else "missing",
            f"rewrite and netplan apply: {apply_fix(expected)}",
        )
    return ok(rendered.sha256, seen)


def _netdevs(expected: Expected) -> list[str]:
    return [port.netdev for port in expected.baseline.fabric.ports]


def _hcas(expected: Expected) -> list[str]:
    return expected.baseline.fabric.hca_names()


@node_check("fabric.link", "fabric", "each fabric netdev is up, at the MTU, with its address", items=_netdevs)
def fabric_link(expected: Expected, facts: NodeFacts, item: str | None) -> Outcome:
    netdev = str(item)
    mtu = expected.baseline.fabric.mtu
    cable = expected.cables.get(netdev)
    want = f"UP, mtu {mtu}" + (f", {cable.address}" if cable else "")
    if not facts.interfaces:
        return unknown(facts, "ip-addr", want)
    iface = facts.interfaces.get(netdev)
    if iface is None:
        return fail(want, "no such netdev", "check the ConnectX-7 (lspci, rdma link)")
    observed = f"{iface.operstate}, mtu {iface.mtu}, {', '.join(iface.addresses) or 'no address'}"
    problems = []
    if iface.operstate != "UP":
        problems.append("link down")
    if iface.mtu != mtu:
        problems.append("MTU")
    if cable is not None and cable.address not in iface.addresses:
        problems.append("address")
    if problems:
        fix = (
            "check the cable and the peer port; then re-run"
            if problems == ["link down"]
            else f"netplan apply the fabric file: {apply_fix(expected)}"
        )
        return fail(want, observed, fix)
    return ok(want, observed)


@node_check("fabric.rdma", "fabric", "every RDMA device exists", items=_hcas)
def fabric_rdma(_expected: Expected, facts: NodeFacts, item: str | None) -> Outcome:
    if item in facts.rdma_devices:
        return ok("present", "present")
    return fail(
        "present",
        f"missing (have: {', '.join(facts.rdma_devices) or 'none'})",
        "check the ConnectX-7 and mlx5_ib (rdma link show)",
    )


@node_check(
    "fabric.gid", "fabric", "the node's GID index holds the IPv4 RoCE v2 address in the path's own subnet",
    items=_hcas,
)
def fabric_gid(expected: Expected, facts: NodeFacts, item: str | None) -> Outcome:
    hca = str(item)
    index = expected.gid_index
    netdev = next(port.netdev for port in expected.baseline.fabric.ports if port.hca == hca)
    cable = expected.cables.get(netdev)
    want_ip = cable.address.split("/")[0] if cable else None
    want = f"index {index}: RoCE v2 {want_ip or 'IPv4'}" + (f" in {cable.subnet}" if cable else "")
    gid = facts.gids.get(hca)
    if gid is None or gid.gid is None:
        return fail(want, f"no GID at index {index}", "check the link (rdma link show), then re-run")
    address = gid.ipv4
    observed = f"{gid.type or 'no type'} {address or gid.gid}"
    fix = (
        f"the RoCE v2 IPv4 GID moved off index {index} (link flap?): bounce the link "
        f"(ip link set {netdev} down; ip link set {netdev} up) or re-apply the netplan, then re-run"
    )
    if gid.type != "RoCE v2" or address is None:
        return fail(want, observed, fix)
    if cable is not None and ipaddress.IPv4Address(address) not in ipaddress.IPv4Network(cable.subnet):
        return fail(
            want,
            observed + f" (outside {cable.subnet})",
            f"fix the address on {netdev}: {apply_fix(expected)}",
        )
    if want_ip is not None and address != want_ip:
        return fail(want, observed, f"fix the address on {netdev}: {apply_fix(expected)}")
    return ok(want, observed)
