"""Follow-up steps decided from the node's state (`deploy.operations.activation`).

`activation_cases/*.json`: one case per file, an operation's arguments, whether its file
changes in this run, and the state it reads; out come the commands, or why none. The
"interrupted" cases are a run that died after writing the file: the file no longer
changes, and the follow-up must still run.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparkbase.deploy import reboot
from sparkbase.deploy.areas.activation import DaemonReload
from sparkbase.deploy.areas.fabric import NetplanApply
from sparkbase.deploy.areas.files import File
from sparkbase.deploy.areas.host import InitramfsUpdate
from sparkbase.deploy.areas.kernel import GrubUpdate
from sparkbase.deploy.kinds import Step
from sparkbase.deploy.node import boot_state
from sparkbase.deploy.operations.activation import (
    decide_daemon_reload,
    decide_initramfs_update,
    decide_netplan_apply,
)
from sparkbase.deploy.operations.base import Decision
from sparkbase.deploy.operations.kernel import decide_grub_update
from sparkbase.deploy.reads import fact_plan
from sparkbase.deploy.reboot import boot_mismatches, reboot_reasons, stage_command, staged
from sparkbase.deploy.steps import build_steps
from sparkbase.facts.assemble import assemble
from sparkbase.facts.model import InitramfsCopy, Interface
from sparkbase.facts.parsers.files import parse_initramfs_copy, parse_staged
from sparkbase.facts.parsers.kernel import parse_grub
from sparkbase.facts.parsers.units import parse_need_daemon_reload
from sparkbase.facts.script import FactPlan, Section, Sections
from sparkbase.facts.state import NO_IMAGE, UNPACKED, UNREADABLE
from sparkbase.model.cmdline import rendered_kernel_args
from sparkbase.model.site import load_site
from sparkbase.render import MODPROBE_PATH, node_files

REPO = Path(__file__).resolve().parents[2]
REAL = REPO / "tests" / "fixtures" / "real"
#: a real grub.cfg (Ubuntu 24.04, 6.8.0-88-generic booted with `ro` only)
GRUB = parse_grub((REAL / "boot_grub_grub.cfg__ubuntu24.04_separate_boot__otus-hw07.txt").read_text(), "")
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
    modprobe = next(f for f in node_files(site, "spark1") if f.path == MODPROBE_PATH)
    initramfs = steps["initramfs-update"]
    assert initramfs.args == InitramfsUpdate(release=site.baseline_of("spark1").kernel.release,
                                                   path=MODPROBE_PATH, sha256=modprobe.sha256)
    assert initramfs.reboot  # a rebuilt initramfs acts at the next boot
    apply = steps["netplan-apply"].args
    assert isinstance(apply, NetplanApply)
    links = apply.links
    addresses = site.inventory.nodes["spark1"].addresses()
    assert {netdev: link["addresses"] for netdev, link in links.items() if link["addresses"]} == {
        netdev: [address] for netdev, address in addresses.items()}
    assert {link["mtu"] for link in links.values()} == {site.baseline_of("spark1").fabric.mtu}
    assert steps["daemon-reload"].args == DaemonReload(unit=site.baseline_of("spark1").cpuset.slice)
    # each reads the node's state: the initramfs' copy, the live addresses, systemd's reload flag
    plan = fact_plan(list(steps.values()))
    assert plan.initramfs == ((initramfs.args.release, MODPROBE_PATH),)
    assert plan.need_reload == (site.baseline_of("spark1").cpuset.slice,)


@pytest.mark.parametrize(("lines", "expected"), [
    ([NO_IMAGE], InitramfsCopy(False, problem="no initramfs image")),
    ([UNREADABLE], InitramfsCopy(False, problem="unmkinitramfs could not unpack the image")),
    ([UNPACKED], InitramfsCopy(True, None)),
    ([UNPACKED, f"{'c' * 64}  /tmp/tmp.x1/etc/modprobe.d/sparkbase.conf"], InitramfsCopy(True, "c" * 64)),
    ([], InitramfsCopy(False, problem="unmkinitramfs could not unpack the image")),
])
def test_initramfs_copy_parser(lines: list[str], expected: InitramfsCopy) -> None:
    assert parse_initramfs_copy("".join(f"{line}\n" for line in lines)) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("NeedDaemonReload=yes\n", True),
    ("NeedDaemonReload=no\n", False),
    ("", None),
    ("NeedDaemonReload=\n", None),
    ("garbage\n", None),
])
def test_need_daemon_reload_parser(text: str, expected: bool | None) -> None:
    assert parse_need_daemon_reload(text, "sparkbase-serving.slice") is expected


@pytest.mark.parametrize(("changes", "newer", "wanted", "expected"), [
    (True, False, ["ro"], "the GRUB drop-in changes"),
    # a run wrote a drop-in that drops an argument and died before update-grub: grub.cfg
    # lacks nothing the baseline wants, yet it is older than the drop-in
    (False, True, ["ro"], "the GRUB drop-in was written after grub.cfg was generated"),
    (False, False, ["ro"], None),
    (False, False, ["ro", "quiet"], "6.8.0-88-generic entry lacks quiet"),
])
def test_grub_update_decision(changes: bool, newer: bool, wanted: list[str], expected: str | None) -> None:
    assert decide_grub_update(GRUB, "6.8.0-88-generic", None, wanted, [], None, changes, newer) == expected


def _booted(**extra: Any) -> dict[str, Any]:
    site = load_site(REPO)
    baseline = site.baseline_of("spark1")
    boot = {"kernel": baseline.kernel.release, "page_size": baseline.kernel.page_size,
            "cmdline": rendered_kernel_args(baseline), "thp": "", "modules": [], "drm_modeset": "",
            "drm_fbdev": ""}
    return {**boot, **extra}


def test_a_reboot_staged_by_a_run_that_died_before_rebooting_is_still_a_reason() -> None:
    """The run staged update-grub's change and died before the reboot: the node runs what
    the baseline wants on every count the boot state shows, but the staged change is not
    loaded; the next run must still reboot. Once the node rebooted (/run cleared), none."""
    baseline = load_site(REPO).baseline_of("spark1")
    mok: dict[str, Any] = {"pending": []}
    waiting = _booted(staged=["update-grub (x)"])
    assert boot_mismatches(baseline, waiting) == []
    assert reboot_reasons(baseline, waiting, mok, []) == [
        "staged by an earlier apply, not booted yet: update-grub (x)"]
    assert reboot_reasons(baseline, _booted(staged=[]), mok, []) == []


def test_what_a_run_stages_is_noted_and_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run" / "reboot-staged"
    monkeypatch.setattr(reboot, "STAGED_PATH", str(path))
    grub = GrubUpdate(release="r", default_entry=None, cmdline=[], forbid=[], fallback=None, dropin="d")
    steps = [Step(File(path="/etc/x", content="", mode=0o644), "a file", section="host"),
             Step(InitramfsUpdate(release="r", path="/etc/modprobe.d/x.conf", sha256=None),
                  "update-initramfs (it's)", reboot=True, section="host"),
             Step(grub, "update-grub $(touch /tmp/x)", reboot=True, section="kernel")]
    assert staged(steps) == ["update-initramfs (it's)", "update-grub $(touch /tmp/x)"]
    for _ in range(2):  # appended; read back once each
        subprocess.run(["sh", "-c", stage_command(staged(steps))], check=True)
    assert list(parse_staged(path.read_text())) == staged(steps)
    plan = FactPlan(staged_path=str(path))
    found = Sections()
    found.by_name["staged"] = Section(path.read_text(), 0, "")
    assert boot_state(assemble("spark1", plan, found))["staged"] == staged(steps)
    missing = Sections()
    missing.by_name["staged"] = Section("", 2, f"grep: {path}: No such file or directory")
    assert boot_state(assemble("spark1", plan, missing))["staged"] == []
