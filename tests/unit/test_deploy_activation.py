"""Follow-up steps decided from the node's state (`deploy.operations.activation`).

`activation_cases/*.json`: one case per file, an operation's arguments, whether its file
changes in this run, and the state it reads; out come the commands, or why none. The
"interrupted" cases are a run that died after writing the file: the file no longer
changes, and the follow-up must still run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparkbase.deploy.facts import NO_IMAGE, UNPACKED, UNREADABLE, InitramfsCopy, parse_initramfs_copy
from sparkbase.deploy.operations import (
    Decision,
    decide_daemon_reload,
    decide_initramfs_update,
    decide_netplan_apply,
)
from sparkbase.deploy.pyinfra_deploy import ASKS
from sparkbase.deploy.steps import build_steps
from sparkbase.facts.model import Interface
from sparkbase.facts.parsers import parse_need_daemon_reload
from sparkbase.model.site import load_site
from sparkbase.render import MODPROBE_PATH, render_node

REPO = Path(__file__).resolve().parents[2]
CASES = sorted((Path(__file__).parent / "activation_cases").glob("*.json"))


def _daemon_reload(args: dict[str, Any], facts: dict[str, Any]) -> Decision:
    return decide_daemon_reload(args["unit"], facts["file_changes"], facts["need_reload"])


def _netplan_apply(args: dict[str, Any], facts: dict[str, Any]) -> Decision:
    live = {name: Interface(name, i["mtu"], i["operstate"], tuple(i["addresses"]))
            for name, i in facts["live"].items()}
    return decide_netplan_apply(args["links"], facts["file_changes"], live)


def _initramfs_update(args: dict[str, Any], facts: dict[str, Any]) -> Decision:
    return decide_initramfs_update(args["release"], args["sha256"], facts["file_changes"],
                                   InitramfsCopy(**facts["packed"]))


#: operation -> its pure decision, called with the case's args and facts
DECIDE: dict[str, Callable[[dict[str, Any], dict[str, Any]], Decision]] = {
    "daemon_reload": _daemon_reload,
    "netplan_apply": _netplan_apply,
    "initramfs_update": _initramfs_update,
}


@pytest.mark.parametrize("case_file", CASES, ids=[c.stem for c in CASES])
def test_follow_up_decision(case_file: Path) -> None:
    case: dict[str, Any] = json.loads(case_file.read_text())
    decision = DECIDE[case["op"]](case["args"], case["facts"])
    assert decision.commands == case["commands"]
    assert decision.reason == case["reason"]
    assert bool(decision.commands) != bool(decision.reason)


def test_every_follow_up_has_an_interrupted_case_that_runs_it() -> None:
    """For each follow-up, a case where the file no longer changes and it runs anyway."""
    cases = [json.loads(c.read_text()) for c in CASES if "interrupted" in c.stem]
    ran = {case["op"] for case in cases if case["commands"] and not case["facts"]["file_changes"]}
    assert ran == set(DECIDE)


def test_follow_up_steps_carry_what_the_node_state_is_compared_with() -> None:
    site = load_site(REPO)
    steps = {s.kind: s for s in build_steps(site, "spark1")}
    modprobe = next(f for f in render_node(site, "spark1") if f.path == MODPROBE_PATH)
    initramfs = steps["initramfs-update"]
    assert initramfs.args == {"release": site.baseline_of("spark1").kernel.release, "path": MODPROBE_PATH,
                              "sha256": modprobe.sha256}
    assert initramfs.reboot  # a rebuilt initramfs acts at the next boot
    links = steps["netplan-apply"].args["links"]
    addresses = site.inventory.nodes["spark1"].addresses()
    assert {netdev: link["addresses"] for netdev, link in links.items() if link["addresses"]} == {
        netdev: [address] for netdev, address in addresses.items()}
    assert {link["mtu"] for link in links.values()} == {site.baseline_of("spark1").fabric.mtu}
    assert steps["daemon-reload"].args == {"unit": site.baseline_of("spark1").cpuset.slice}
    for kind in ("initramfs-update", "netplan-apply", "daemon-reload"):
        assert ASKS[kind](**dict(steps[kind].args)), f"{kind} reads the node's state"


@pytest.mark.parametrize(("lines", "expected"), [
    ([NO_IMAGE], InitramfsCopy(False, problem="no initramfs image")),
    ([UNREADABLE], InitramfsCopy(False, problem="unmkinitramfs could not unpack the image")),
    ([UNPACKED], InitramfsCopy(True, None)),
    ([UNPACKED, f"{'c' * 64}  /tmp/tmp.x1/etc/modprobe.d/sparkbase.conf"], InitramfsCopy(True, "c" * 64)),
    ([], InitramfsCopy(False, problem="unmkinitramfs could not unpack the image")),
])
def test_initramfs_copy_parser(lines: list[str], expected: InitramfsCopy) -> None:
    assert parse_initramfs_copy(lines) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("NeedDaemonReload=yes\n", True),
    ("NeedDaemonReload=no\n", False),
    ("", None),
    ("NeedDaemonReload=\n", None),
    ("garbage\n", None),
])
def test_need_daemon_reload_parser(text: str, expected: bool | None) -> None:
    assert parse_need_daemon_reload(text, "sparkbase-serving.slice") is expected
