"""The fabric: netdevs (`ip -j addr show`), RDMA devices (`ls /sys/class/infiniband`) and
the GID tables of their ports (sysfs, `parse_gid_table`)."""

from __future__ import annotations

import json
import re

from sparkbase.facts.model import Gid, GidEntry, Interface
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


_GID_FILE = re.compile(r"^/sys/class/infiniband/(?P<hca>[^/]+)/ports/(?P<port>\d+)/gids/(?P<index>\d+)$")
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def parse_gid_table(text: str) -> tuple[GidEntry, ...]:
    """The GID-table section (`GID_TABLE_COMMAND`): one `FILE<TAB>GID<TAB>TYPE<TAB>NDEV` line
    per filled entry, FILE being `/sys/class/infiniband/HCA/ports/P/gids/N`, each field what
    sysfs holds (`gid_attrs/types/N` is `RoCE v2` or `IB/RoCE v1`; type and netdev are empty
    when the kernel would not tell them). Sorted by device, port and index; an all-zero GID
    (an empty slot) is left out."""
    entries: list[GidEntry] = []
    for line in node_lines(text):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 4:
            raise ValueError(f"not a GID table line: {line[:120]!r}")
        path, gid, kind, ndev = (field.strip() for field in fields)
        where = _GID_FILE.match(path)
        if where is None:
            raise ValueError(f"not a GID file: {path[:120]!r}")
        if not gid or gid == _ZERO_GID:
            continue
        entries.append(GidEntry(hca=where["hca"], port=int(where["port"]), index=int(where["index"]),
                                gid=Gid(gid=gid, type=kind or None), ndev=ndev or None))
    return tuple(sorted(entries, key=lambda e: (e.hca, e.port, e.index)))
