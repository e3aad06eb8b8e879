"""The light node commands (`node_query.py`) answer as the full ones would (no node needed)."""

from __future__ import annotations

import json

import pytest

from sparkbase.lab import boot
from sparkbase.lab.shims import node_query


def test_hardware_constants_and_macs_are_the_boot_helpers() -> None:
    """node_query must not import the boot helpers, so it carries their values: the same."""
    assert node_query.FABRIC == boot.FABRIC
    assert node_query.MGMT_NETDEV == boot.MGMT_NETDEV
    assert node_query.mac_address("spark3", "enP7s7") == boot.mac_address("spark3", "enP7s7")


def test_dumps_prints_what_json_dumps_prints() -> None:
    value = [
        {"ifindex": 1, "ifname": "lo", "flags": ["UP"], "mtu": 65536, "up": True, "x": None,
         "addr_info": [{"local": "127.0.0.1", "label": 'q"uo\\te\n\u00e9'}]},
        {},
        [],
    ]
    assert node_query.dumps(value) == json.dumps(value)


def test_ip_json_is_what_the_facts_parser_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkbase.facts.parsers import parse_ip_addr_json

    net = {
        "enp1s0f0np0": {"mtu": 9000, "up": True, "addresses": ["192.168.101.1/24"], "mac": "4c:bb:47:0:0:1"},
        "enP7s7": {"mtu": 1500, "up": True, "addresses": [], "mac": "4c:bb:47:0:0:2"},
    }
    monkeypatch.setattr(node_query, "read_json", lambda path, default: net if path == node_query.NET else {})
    interfaces = parse_ip_addr_json(node_query.dumps(node_query.links()))
    assert interfaces["enp1s0f0np0"].addresses == ("192.168.101.1/24",)
    assert interfaces["enp1s0f0np0"].mtu == 9000 and interfaces["enP7s7"].operstate == "UP"
    assert list(interfaces) == ["lo", "enP7s7", "enp1s0f0np0"]
