"""`ip`, `rdma`, `netplan`, `lspci`: the ConnectX-7 fabric netdevs and the management NIC.

`ip -j addr show` (what the audit asks) imports only `os`/`sys`; the other forms import
what they need.
"""

from __future__ import annotations

import sys

from sparkbase_lab.shims.common import (
    DIST_PACKAGES,
    NET,
    Fail,
    dumps,
    faults,
    glob,
    read_json,
    read_text,
    write_json,
)
from sparkbase_lab.shims.netdevs import FABRIC, MGMT_NETDEV, default_net

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

FOREVER = 4294967295


def links() -> list[dict[str, Any]]:
    """Every netdev (and `lo`) as iproute2's `ip -j addr show` describes it."""
    net: dict[str, Any] = read_json(NET, {}) or default_net()
    down = set(faults().get("link-down", []))
    out: list[dict[str, Any]] = [{
        "ifindex": 1, "ifname": "lo", "flags": ["LOOPBACK", "UP", "LOWER_UP"], "mtu": 65536,
        "qdisc": "noqueue", "operstate": "UNKNOWN", "group": "default", "txqlen": 1000,
        "link_type": "loopback", "address": "00:00:00:00:00:00", "broadcast": "00:00:00:00:00:00",
        "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8, "scope": "host",
                       "label": "lo", "valid_life_time": FOREVER, "preferred_life_time": FOREVER}],
    }]
    hca_of = {v: k for k, v in FABRIC.items()}
    for index, (name, dev) in enumerate(sorted(net.items(), key=lambda kv: kv[0] != MGMT_NETDEV), 2):
        admin_up = dev.get("up", True)
        carrier = admin_up and name not in down and hca_of.get(name) not in down
        flags = ["BROADCAST", "MULTICAST"]
        if admin_up:
            flags.append("UP")
        if carrier:
            flags.append("LOWER_UP")
        addr_info = []
        for cidr in dev.get("addresses", []) if admin_up else []:
            ip, _, prefix = cidr.partition("/")
            family = "inet6" if ":" in ip else "inet"
            addr_info.append({"family": family, "local": ip, "prefixlen": int(prefix or 32),
                              "scope": "global", "label": name, "valid_life_time": FOREVER,
                              "preferred_life_time": FOREVER})
        out.append({
            "ifindex": index, "ifname": name, "flags": flags, "mtu": dev.get("mtu", 1500),
            "qdisc": "mq", "operstate": "UP" if carrier else "DOWN", "group": "default",
            "txqlen": 1000, "link_type": "ether", "address": dev.get("mac", ""),
            "broadcast": "ff:ff:ff:ff:ff:ff", "addr_info": addr_info,
        })
    return out


def _yaml() -> Any:
    """python3-yaml (node-side; the wrappers run without `site`, so add dist-packages)."""
    if DIST_PACKAGES not in sys.path:
        sys.path.append(DIST_PACKAGES)
    import yaml  # type: ignore[import-untyped,unused-ignore]

    return yaml


def _load_yaml(text: str) -> Any:
    return _yaml().safe_load(text)


def _merged(old: Any, new: Any) -> Any:
    """One setting of a later netplan file over an earlier one, by netplan's rules
    (netplan-generate(8) "HANDLING MULTIPLE FILES", canonical/netplan e9dd90a9): mappings
    merged key by key, sequences appended, scalars replaced."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = dict(old)
        for key, value in new.items():
            out[key] = _merged(out[key], value) if key in out else value
        return out
    if isinstance(old, list) and isinstance(new, list):
        return [*old, *new]
    return new


#: netplan's directories, lowest priority first: a file in a later one shadows (replaces
#: whole) a file of the same name in an earlier one (netplan-generate(8), src/util.c)
NETPLAN_DIRS = ("/lib/netplan", "/etc/netplan", "/run/netplan")


def netplan_files() -> list[str]:
    """The files netplan reads, in its order: per name the one of the highest directory,
    sorted by name in byte order whatever the directory."""
    chosen: dict[str, str] = {}
    for directory in NETPLAN_DIRS:
        for path in glob(f"{directory}/*.yaml"):
            chosen[path.rsplit("/", 1)[-1]] = path
    return [chosen[name] for name in sorted(chosen, key=lambda name: name.encode())]


def netplan_config() -> dict[str, Any]:
    """`network.ethernets` of every netplan file (/lib, /etc, /run; shadowed by name), merged
    in name order as netplan merges them: a port two files configure carries both files'
    addresses (netplan drops an address given twice by the exact same string, src/parse.c)."""
    merged: dict[str, Any] = {}
    for path in netplan_files():
        try:
            data = _load_yaml(read_text(path)) or {}
        except Exception as exc:
            raise Fail(f"{path}: Invalid YAML: {exc}", 1) from exc
        network = data.get("network", {}) if isinstance(data, dict) else {}
        for kind in ("ethernets",):
            for name, conf in (network.get(kind) or {}).items():
                merged[name] = _merged(merged.get(name, {}), conf or {})
    for conf in merged.values():
        if isinstance(conf, dict) and isinstance(conf.get("addresses"), list):
            conf["addresses"] = list(dict.fromkeys(str(a) for a in conf["addresses"]))
    return merged


def netplan_apply() -> None:
    """Set every fabric netdev's addresses and MTU from netplan (as `netplan apply`), and the
    management NIC's when a netplan file configures it (the as-found lab's installer file)."""
    conf = netplan_config()
    net: dict[str, Any] = read_json(NET, {}) or default_net()
    for netdev, dev in net.items():
        if netdev == MGMT_NETDEV and netdev not in conf:
            continue
        c = conf.get(netdev, {})
        dev["addresses"] = [str(a) for a in c.get("addresses", [])]
        dev["mtu"] = int(c.get("mtu", 1500))
    write_json(NET, net)


def cmd_netplan(argv: list[str]) -> int:
    """`netplan apply|generate|get`."""
    verb = argv[0] if argv else "generate"
    if verb == "apply":
        netplan_apply()
        from sparkbase_lab.shims.sysfs import write_fabric_sysfs

        write_fabric_sysfs()
        return 0
    if verb == "generate":
        netplan_config()
        return 0
    if verb == "get":
        print(_yaml().safe_dump({"network": {"version": 2, "ethernets": netplan_config()}},
                             default_flow_style=False).rstrip())
        return 0
    raise Fail(f"netplan: {verb} is not emulated by the sparkbase lab", 1)


def cmd_ip(argv: list[str]) -> int:
    """`ip [-j] [-br] [-4|-6] addr|link [show] [dev D]`, `ip link set DEV up|down|mtu N`."""
    if argv in (["-j", "addr", "show"], ["-j", "addr"], ["-json", "addr", "show"]):
        print(dumps(links()))  # the audit's form, without importing json
        return 0
    import json

    as_json = brief = False
    family: str | None = None
    args: list[str] = []
    for arg in argv:
        if arg in ("-j", "-json", "--json"):
            as_json = True
        elif arg in ("-br", "-brief", "--brief"):
            brief = True
        elif arg == "-4":
            family = "inet"
        elif arg == "-6":
            family = "inet6"
        elif arg in ("-p", "-pretty", "-d", "-details", "-s", "-c", "-color"):
            pass
        else:
            args.append(arg)
    if not args:
        args = ["help"]
    obj = args[0]
    rest = args[1:]
    if rest and rest[0] in ("show", "list", "ls"):
        rest = rest[1:]
    dev = None
    if rest and rest[0] == "dev" and len(rest) > 1:
        dev = rest[1]
    elif rest and rest[0] not in ("set",):
        dev = rest[0]
    if obj in ("l", "li", "lin", "link") and args[1:2] == ["set"]:
        return _ip_link_set(args[2:])
    if obj not in ("a", "ad", "addr", "address", "l", "li", "lin", "link"):
        raise Fail(f"ip: '{obj}' is not emulated by the sparkbase lab", 1)
    links_now = links()
    if dev is not None:
        links_now = [link for link in links_now if link["ifname"] == dev]
        if not links_now:
            raise Fail(f'Device "{dev}" does not exist.', 1)
    with_addr = obj.startswith("a")
    for link in links_now:
        if family:
            link["addr_info"] = [a for a in link["addr_info"] if a["family"] == family]
        if not with_addr:
            link.pop("addr_info")
    if with_addr and family:
        links_now = [link for link in links_now if link["addr_info"]]
    if as_json:
        print(json.dumps(links_now))
        return 0
    for link in links_now:
        if brief:
            addrs = " ".join(f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []))
            tail = addrs if with_addr else f"{link['address']} <{','.join(link['flags'])}>"
            print(f"{link['ifname']:<16} {link['operstate']:<14} {tail}".rstrip())
            continue
        print(f"{link['ifindex']}: {link['ifname']}: <{','.join(link['flags'])}> mtu {link['mtu']} "
              f"qdisc {link['qdisc']} state {link['operstate']} group default qlen {link['txqlen']}")
        print(f"    link/{link['link_type']} {link['address']} brd {link['broadcast']}")
        for a in link.get("addr_info", []):
            print(f"    {a['family']} {a['local']}/{a['prefixlen']} scope {a['scope']} {a['label']}")
            print("       valid_lft forever preferred_lft forever")
    return 0


def _ip_link_set(args: list[str]) -> int:
    if args and args[0] == "dev":
        args = args[1:]
    if not args:
        raise Fail("ip: link set needs a device", 1)
    net: dict[str, Any] = read_json(NET, {}) or default_net()
    name = args[0]
    if name not in net:
        raise Fail(f'Cannot find device "{name}"', 1)
    i = 1
    while i < len(args):
        if args[i] == "up":
            net[name]["up"] = True
        elif args[i] == "down":
            net[name]["up"] = False
        elif args[i] == "mtu":
            net[name]["mtu"] = int(args[i + 1])
            i += 1
        i += 1
    write_json(NET, net)
    from sparkbase_lab.shims.sysfs import write_fabric_sysfs

    write_fabric_sysfs()
    return 0


def cmd_rdma(argv: list[str]) -> int:
    """`rdma [-j] link [show [HCA]]`."""
    args = [a for a in argv if not a.startswith("-")]
    as_json = any(a in ("-j", "--json") for a in argv)
    if not args or args[0] != "link" or (len(args) > 1 and args[1] not in ("show", "list")):
        raise Fail("rdma: only `rdma link [show]` is emulated by the sparkbase lab", 1)
    only = args[2] if len(args) > 2 else None
    down = set(faults().get("link-down", []))
    net: dict[str, Any] = read_json(NET, {}) or default_net()
    rows = []
    for index, (hca, netdev) in enumerate(FABRIC.items()):
        if only and only not in (hca, f"{hca}/1"):
            continue
        up = hca not in down and netdev not in down and net.get(netdev, {}).get("up", True)
        rows.append({"ifindex": index, "ifname": hca, "port": 1,
                     "state": "ACTIVE" if up else "DOWN",
                     "physical_state": "LINK_UP" if up else "DISABLED", "netdev": netdev,
                     "netdev_index": index + 3})
    if as_json:
        import json

        print(json.dumps(rows))
        return 0
    for r in rows:
        print(f"link {r['ifname']}/1 state {r['state']} physical_state {r['physical_state']} "
              f"netdev {r['netdev']}")
    return 0


def cmd_lspci(argv: list[str]) -> int:
    """`lspci`: the ConnectX-7 functions, the management NIC and the GB10."""
    print("0000:01:00.0 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n"
          "0000:01:00.1 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n"
          "0002:01:00.0 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n"
          "0002:01:00.1 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n"
          "0007:01:00.0 Ethernet controller: Realtek Semiconductor Co., Ltd. RTL8127 10GbE\n"
          "000f:01:00.0 VGA compatible controller: NVIDIA Corporation GB10 [Blackwell] (rev a1)")
    return 0


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "netplan": cmd_netplan, "ip": cmd_ip, "rdma": cmd_rdma, "lspci": cmd_lspci,
}
