"""The fabric: netdevs (`ip -j addr show`) and RDMA devices (`ls /sys/class/infiniband`)."""

from __future__ import annotations

import json

from sparkbase.facts.model import Interface
from sparkbase.facts.parsers.lines import node_lines


def parse_ip_addr_json(text: str) -> dict[str, Interface]:
    """`ip -j addr show` → netdev → MTU, operstate and IPv4 addresses."""
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("ip -j did not print a list")
    interfaces: dict[str, Interface] = {}
    for link in data:
        addresses = tuple(
            f"{addr['local']}/{addr['prefixlen']}"
            for addr in link.get("addr_info", [])
            if addr.get("family") == "inet"
        )
        interfaces[link["ifname"]] = Interface(
            name=link["ifname"],
            mtu=int(link["mtu"]),
            operstate=str(link.get("operstate", "UNKNOWN")),
            addresses=addresses,
        )
    return interfaces


def parse_ls(text: str) -> tuple[str, ...]:
    """`ls -1 DIR` → entries."""
    return tuple(sorted(line.strip() for line in node_lines(text) if line.strip()))
