"""Reboots respect lanes: the pure decision (refuse, or drain the lane on all its nodes) and
the systemctl lines it reads and writes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sparkbase.deploy.drain import (
    LaneUnits,
    decide_reboot,
    is_active_command,
    lane_runtimes,
    parse_is_active,
    running_lanes,
    stop_command,
    units_on,
)
from sparkbase.model.site import load_site

REPO = Path(__file__).parents[2]
FOUR = ("spark1", "spark2", "spark3", "spark4")
TP4 = LaneUnits("dsv41-flash", FOUR, ("sglang-dsv41.service",))
SOLO = LaneUnits("bench", ("spark2",), ("bench.service", "bench-proxy.service"))
RUNTIMES = {rt.lane: rt for rt in (TP4, SOLO)}

#: (case, node, lanes running there, --drain, allowed, words the message must hold)
CASES = [
    ("no lane runs: reboot", "spark1", [], False, True, []),
    (
        "a TP4 lane runs: refused",
        "spark3",
        ["dsv41-flash"],
        False,
        False,
        [
            "reboot refused: spark3 serves dsv41-flash",
            "all 4 of its nodes: spark1, spark2, spark3, spark4",
            "--drain",
        ],
    ),
    (
        "a TP4 lane runs, --drain: stopped everywhere",
        "spark3",
        ["dsv41-flash"],
        True,
        True,
        ["draining before the reboot", "lane dsv41-flash (sglang-dsv41.service) goes down on all 4"],
    ),
    (
        "two lanes on one node, --drain",
        "spark2",
        ["dsv41-flash", "bench"],
        True,
        True,
        ["dsv41-flash", "lane bench (bench.service, bench-proxy.service) goes down on its node: spark2"],
    ),
    (
        "two lanes, no --drain: refused naming both",
        "spark2",
        ["dsv41-flash", "bench"],
        False,
        False,
        ["serves dsv41-flash, bench"],
    ),
]


@pytest.mark.parametrize(
    ("node", "running", "drain", "allowed", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_decide_reboot(node: str, running: list[str], drain: bool, allowed: bool, words: list[str]) -> None:
    gate = decide_reboot(node, running, RUNTIMES, drain)
    assert gate.allowed is allowed and gate.running == tuple(running)
    assert [d.lane for d in gate.drains] == running
    for word in words:
        assert word in gate.message, gate.message
    if running:
        tp4 = next((d for d in gate.drains if d.lane == "dsv41-flash"), None)
        assert tp4 is None or tp4.nodes == FOUR  # the whole lane, not only the rebooting node


def test_units_and_running_lanes_per_node() -> None:
    assert units_on("spark2", RUNTIMES.values()) == [
        "sglang-dsv41.service",
        "bench.service",
        "bench-proxy.service",
    ]
    assert units_on("spark1", RUNTIMES.values()) == ["sglang-dsv41.service"]
    assert running_lanes("spark2", {"bench-proxy.service"}, RUNTIMES.values()) == ["bench"]
    assert running_lanes("spark1", {"bench.service"}, RUNTIMES.values()) == []  # not a bench node


def test_systemctl_lines() -> None:
    units = ["sglang-dsv41.service", "odd name;rm -rf /.service"]
    assert is_active_command(units) == "systemctl is-active sglang-dsv41.service 'odd name;rm -rf /.service'"
    assert stop_command(units[:1]) == "systemctl stop sglang-dsv41.service"
    # systemctl is-active prints one state per unit, in order (exit 3 when any is not active)
    assert parse_is_active(["a", "b", "c", "d"], ["active", "inactive\n", "failed", "activating"]) == {
        "a",
        "d",
    }
    assert parse_is_active(["a", "b"], ["active"]) == {"a"}  # a missing answer is not active


def test_shipped_lanes_are_found_by_their_unit() -> None:
    """Every lane whose runtime names a unit is found, over all of its nodes."""
    site = load_site(REPO)
    for found in lane_runtimes(site):
        lane = site.lanes[found.lane]
        assert found.nodes == tuple(lane.nodes) and found.units


def test_a_lane_runtime_with_units_is_found() -> None:
    site = load_site(REPO)

    class Runtime:
        units = ("sglang-dsv41.service",)
        unit = "sglang-router.service"

    lane = site.lanes["dsv41-flash"]
    patched = replace(site, lanes={"dsv41-flash": lane.model_copy(update={"runtime": Runtime()})})
    found = lane_runtimes(patched)
    assert found == [LaneUnits("dsv41-flash", FOUR, ("sglang-dsv41.service", "sglang-router.service"))]
