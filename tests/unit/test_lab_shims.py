"""The node commands' layout and the pure parts of their answers (no node needed)."""

from __future__ import annotations

import json

import pytest

from sparkbase_lab import boot
from sparkbase_lab.shims import cmd_net, common, netdevs, registry


def test_hardware_constants_and_macs_are_the_boot_helpers() -> None:
    """The shims must not import the boot helpers for `ip -j addr`, so netdevs repeats their values."""
    assert netdevs.FABRIC == boot.FABRIC
    assert netdevs.MGMT_NETDEV == boot.MGMT_NETDEV
    assert netdevs.mac_address("spark3", "enP7s7") == boot.mac_address("spark3", "enP7s7")


def test_dumps_prints_what_json_dumps_prints() -> None:
    value = [
        {"ifindex": 1, "ifname": "lo", "flags": ["UP"], "mtu": 65536, "up": True, "x": None,
         "addr_info": [{"local": "127.0.0.1", "label": 'q"uo\\te\n\u00e9'}]},
        {},
        [],
    ]
    assert common.dumps(value) == json.dumps(value)


def test_ip_json_has_iproute2_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    net = {
        "enp1s0f0np0": {"mtu": 9000, "up": True, "addresses": ["192.168.101.1/24"], "mac": "4c:bb:47:0:0:1"},
        "enP7s7": {"mtu": 1500, "up": True, "addresses": [], "mac": "4c:bb:47:0:0:2"},
    }
    monkeypatch.setattr(cmd_net, "read_json", lambda path, default: net if path == common.NET else {})
    monkeypatch.setattr(cmd_net, "faults", dict)
    links = {link["ifname"]: link for link in json.loads(common.dumps(cmd_net.links()))}
    assert list(links) == ["lo", "enP7s7", "enp1s0f0np0"]
    fabric = links["enp1s0f0np0"]
    assert fabric["mtu"] == 9000 and fabric["operstate"] == "UP"
    addresses = [(a["family"], a["local"], a["prefixlen"]) for a in fabric["addr_info"]]
    assert addresses == [("inet", "192.168.101.1", 24)]
    assert {"ifindex", "flags", "link_type", "address", "broadcast"} <= set(fabric)


@pytest.mark.parametrize("command", sorted(registry.MODULES))
def test_every_registered_command_resolves_to_its_function(command: str) -> None:
    assert callable(registry.resolve(command))


@pytest.mark.parametrize("module", sorted(set(registry.MODULES.values())))
def test_every_module_command_is_registered_to_that_module(module: str) -> None:
    import importlib

    table = importlib.import_module(f"sparkbase_lab.shims.{module}").COMMANDS
    assert {name: registry.MODULES.get(name) for name in table} == dict.fromkeys(table, module)


#: the read-only commands an audit runs on every node: they must start cheaply
LIGHT_COMMANDS = ("uname", "getconf", "nvidia-smi", "mokutil", "systemctl", "ip")


@pytest.mark.parametrize("command", LIGHT_COMMANDS)
def test_the_audits_commands_import_only_light_modules(command: str) -> None:
    """Resolving them in a fresh interpreter loads neither json, re, pathlib nor the boot helpers."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom sparkbase_lab.shims import registry\n"
        f"registry.resolve({command!r})\n"
        "print(sorted(m for m in ('json', 're', 'pathlib', 'sparkbase_lab.boot') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_unknown_command_exits_127(capsys: pytest.CaptureFixture[str]) -> None:
    assert registry.main("no-such-tool", []) == 127
    assert "no-such-tool" in capsys.readouterr().err


def test_netplan_files_merge_as_netplan_merges_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """netplan-generate(8): a later file appends to sequences (a port two files configure
    carries both addresses), replaces scalars, merges mappings; an address given twice by the
    same string is kept once. The lab once replaced the list, hiding a stale second address."""
    files = {
        "/etc/netplan/50-cloud-init.yaml": "network:\n  ethernets:\n    enp1s0f0np0:\n"
                                           "      addresses: [10.0.0.1/24]\n      mtu: 1500\n",
        "/etc/netplan/60-sparkbase-fabric.yaml": "network:\n  ethernets:\n    enp1s0f0np0:\n"
                                                 "      addresses: [192.168.100.1/24, 10.0.0.1/24]\n"
                                                 "      mtu: 9000\n",
    }
    monkeypatch.setattr(cmd_net, "glob", lambda pattern: [p for p in files if p.startswith(pattern[:-6])])
    monkeypatch.setattr(cmd_net, "read_text", lambda path: files[path])
    port = cmd_net.netplan_config()["enp1s0f0np0"]
    assert port == {"addresses": ["10.0.0.1/24", "192.168.100.1/24"], "mtu": 9000}


def test_netplan_reads_lib_etc_and_run_shadowing_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """netplan-generate(8): /run shadows /etc shadows /lib by file name; the files left are
    read in name order whatever their directory (/lib's 10- before /etc's 20-)."""
    port = "network:\n  ethernets:\n    enp1s0f0np0:\n      "
    files = {
        "/lib/netplan/10-os.yaml": port + "addresses: [10.0.9.1/24]\n",
        "/lib/netplan/20-fabric.yaml": port + "addresses: [10.0.8.1/24]\n",
        "/etc/netplan/20-fabric.yaml": port + "addresses: [10.0.1.1/24]\n",
        "/run/netplan/30-run.yaml": port + "mtu: 9000\n",
    }
    monkeypatch.setattr(cmd_net, "glob", lambda pattern: [p for p in files if p.startswith(pattern[:-6])])
    monkeypatch.setattr(cmd_net, "read_text", lambda path: files[path])
    assert cmd_net.netplan_files() == ["/lib/netplan/10-os.yaml", "/etc/netplan/20-fabric.yaml",
                                       "/run/netplan/30-run.yaml"]
    merged = cmd_net.netplan_config()["enp1s0f0np0"]
    assert merged == {"addresses": ["10.0.9.1/24", "10.0.1.1/24"], "mtu": 9000}
