"""Fabric checks: the netplan, each link, RDMA device and GID."""

from __future__ import annotations

import ipaddress

from sparkbase.audit.checks.common import apply_fix, linked, unknown
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import Outcome, Subject, fail, node_check, ok, skip
from sparkbase.facts.model import NodeFacts
from sparkbase.facts.parsers.fabric import NETPLAN_SECTION, fabric_differences, found_settings
from sparkbase.render import fabric_ethernets, fabric_netplan_path


def fabric_settings(expected: Expected) -> dict[str, dict[str, object]]:
    """The fabric interfaces the site's own netplan file must carry (netdev -> settings)."""
    return fabric_ethernets(expected.baseline, expected.cables)


@node_check("fabric.netplan", "fabric", "the four-PF fabric netplan is the rendered one (in the site's file: "
            "its fabric interfaces)", section="fabric",
            written=True)
def fabric_netplan(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    path = fabric_netplan_path(expected.baseline)
    rendered = expected.file(path)
    if rendered is None:
        return skip("no fabric netplan rendered")
    if rendered.merged:
        return _merged_netplan(path, fabric_settings(expected), facts, at)
    sha256 = rendered.sha256
    link = linked(facts, path, f"{path} sha256 {sha256}")
    if link is not None:
        return link
    seen = facts.file_sha256.get(path)
    if seen != sha256:
        return fail(
            f"{path} sha256 {sha256}",
            f"sha256 {seen}" if seen else "missing",
            f"rewrite and netplan apply: {apply_fix(at)}",
        )
    return ok(sha256, seen)


def _merged_netplan(path: str, fabric: dict[str, dict[str, object]], facts: NodeFacts,
                    at: Subject) -> Outcome:
    """The site's netplan file at `path` (`fabric.netplan_file`): its fabric interfaces mean
    what the baseline sets (`dhcp4: no` is false), whatever else the site keeps in it."""
    expected = f"{path}: the fabric part of {len(fabric)} ports as rendered"
    link = linked(facts, path, expected)
    if link is not None:
        return link
    if facts.netplan_files is None:
        return unknown(facts, NETPLAN_SECTION, expected)
    source = facts.netplan_files.get(path)
    if source is None or source.text is None:
        return fail(expected, "missing" if source is None else source.problem, f"{apply_fix(at)}")
    try:
        differences = fabric_differences(found_settings(source.text, fabric), fabric)
    except ValueError as exc:
        return fail(expected, f"does not parse: {exc}", f"fix the file by hand, then {apply_fix(at)}")
    if differences:
        return fail(expected, "; ".join(differences),
                    f"merge the fabric back in and netplan apply: {apply_fix(at)}")
    return ok(expected, f"{len(fabric)} fabric ports as rendered")


def _netdevs(expected: Expected) -> list[str]:
    return [port.netdev for port in expected.baseline.fabric.ports]


def _hcas(expected: Expected) -> list[str]:
    return expected.baseline.fabric.hca_names()


@node_check("fabric.link", "fabric", "each fabric netdev is up, at the MTU, with its address", items=_netdevs,
            section="fabric")
def fabric_link(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    netdev = str(at.item)
    mtu = expected.baseline.fabric.mtu
    cable = expected.cables.get(netdev)
    address = cable.address if cable is not None else None
    want = f"UP, mtu {mtu}" + (f", {address}" if address is not None else "")
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
    if address is not None and address not in iface.addresses:
        problems.append("address")
    # netplan merges address lists across its files: a port can carry a second, stale address
    # another file (or a hand `ip addr add`) gives it, and two paths then share a subnet
    extra = [a for a in iface.addresses if address is not None and a != address]
    if extra:
        problems.append("extra address")
    if problems:
        fix = (
            "check the cable and the peer port; then re-run"
            if problems == ["link down"]
            else f"remove {', '.join(extra)} from {netdev}: it was not given to this port (find the "
            f"netplan file that sets it: grep -l {extra[0].split('/')[0]} /etc/netplan/*.yaml; "
            "netplan merges addresses across files), then re-run"
            if problems == ["extra address"]
            else f"netplan apply the fabric file: {apply_fix(at)}"
        )
        return fail(want, observed + (f" (not given: {', '.join(extra)})" if extra else ""), fix)
    return ok(want, observed)


@node_check("fabric.rdma", "fabric", "every RDMA device exists", items=_hcas,
            section="fabric")
def fabric_rdma(_expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    if at.item in facts.rdma_devices:
        return ok("present", "present")
    return fail(
        "present",
        f"missing (have: {', '.join(facts.rdma_devices) or 'none'})",
        "check the ConnectX-7 and mlx5_ib (rdma link show)",
    )


@node_check(
    "fabric.gid", "fabric", "the node's GID index holds the IPv4 RoCE v2 address in the path's own subnet",
    items=_hcas, section="fabric",
)
def fabric_gid(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    hca = str(at.item)
    index = expected.gid_index
    netdev = next(port.netdev for port in expected.baseline.fabric.ports if port.hca == hca)
    cable = expected.cables.get(netdev)
    subnet = cable.subnet if cable is not None else None
    want_ip = cable.address.split("/")[0] if cable is not None else None
    want = f"index {index}: RoCE v2 {want_ip or 'IPv4'}" + (f" in {subnet}" if subnet is not None else "")
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
    if subnet is not None and ipaddress.IPv4Address(address) not in ipaddress.IPv4Network(subnet):
        return fail(
            want,
            observed + f" (outside {subnet})",
            f"fix the address on {netdev}: {apply_fix(at)}",
        )
    if want_ip is not None and address != want_ip:
        return fail(want, observed, f"fix the address on {netdev}: {apply_fix(at)}")
    return ok(want, observed)
