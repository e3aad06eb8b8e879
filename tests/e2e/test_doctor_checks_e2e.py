"""Issue 24 point 4 end to end: the recipe's doctor checks of boot and console on lab nodes
(own lab, port base SPARKBASE_TEST_DOCTOR_PORT_BASE: a clone of the run's variant image,
conftest.py `variant_image`: spark1 as the factory left it, spark2 moved from the factory
state to the variant by a real apply).

- factory (spark1), judged against the variant: the console is in graphics mode (DGX OS boots
  with `splash`, and Plymouth leaves the console so) and systemd's runtime watchdog is off;
- variant (spark2; apply --baseline, reboot): no splash, the watchdog drop-in written and read by PID 1
  at boot: the four checks (UEFI boot order, DRM card, console mode, watchdog) pass, read
  as a real Spark shows them (efibootmgr, /sys/class/drm, KDGETMODE on the active console,
  systemctl show);
- a network entry first (`pxe-first`), a display server holding DRM master (`drm-master`) and
  a console left in graphics mode (`console-graphics`) each fail their check, with the
  recipe's severity and fix.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fleets
import pytest
from ports import port_base

from sparkbase.audit.expected import expected_for
from sparkbase.audit.registry import CheckResult
from sparkbase.audit.run import judge_node
from sparkbase.facts.collect import gather_fleet
from sparkbase.facts.model import NodeFacts
from sparkbase.facts.parsers.host import CONSOLE_COMMAND, WATCHDOG_COMMAND
from sparkbase.model.site import load_site
from sparkbase.transport import ssh_targets
from sparkbase_lab import faults

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_DOCTOR_PORT_BASE", 3451)
NODE = fleets.VARIANT_NODE
#: the image's node as the factory left it
FACTORY_NODE = "spark1"
VARIANT = fleets.VARIANT
CHECKS = ("host.uefi_first", "host.drm_card", "host.drm_master", "host.drm_master.readable",
          "host.console_text", "host.console_text.readable", "host.watchdog")


class Fleet(fleets.Fleet):
    """The module's fleet; `on` runs on NODE."""

    def on(self, command: str) -> str:
        """Run a shell command on NODE; fail the test if it fails."""
        return self.sh(NODE, command)

    def judged(self, node: str = NODE) -> dict[str, CheckResult]:
        """`node`'s audit against the variant: check id -> result, for the four checks."""
        site = load_site(self.site)
        expected = expected_for(site, node, VARIANT)
        found = gather_fleet(ssh_targets(site, self.lab.dir), {node: expected.plan()})[node]
        assert isinstance(found, NodeFacts), found
        return {r.id: r for r in judge_node(expected, found) if r.id in CHECKS}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, variant_image: fleets.ConvergedImage) -> Iterator[Fleet]:
    for shared in fleets.image_fleet(variant_image, tmp_path_factory.mktemp("doctor"), PORT_BASE, nodes=2):
        yield Fleet(shared.lab, shared.site)


@pytest.fixture(scope="module")
def factory(fleet: Fleet) -> dict[str, CheckResult]:
    """FACTORY_NODE as the lab makes it, judged against the variant (nothing applied to it)."""
    return fleet.judged(FACTORY_NODE)


@pytest.fixture(scope="module")
def variant(variant_image: fleets.ConvergedImage, factory: dict[str, CheckResult]) -> dict[str, Any]:
    """NODE converged to the variant (reboot included; a person at its console enrolled the
    MOK): the variant image's apply, as its JSON result for NODE."""
    result: dict[str, Any] = variant_image.report["nodes"][0]
    assert result["node"] == NODE and result["status"] == "changed", result
    return result


def _status(judged: dict[str, CheckResult]) -> dict[str, str]:
    return {check: result.status for check, result in judged.items()}


def test_the_factory_node_boots_to_a_graphics_console_with_no_watchdog(
        factory: dict[str, CheckResult]) -> None:
    assert _status(factory) == {**dict.fromkeys(CHECKS, "pass"),
                                "host.console_text": "fail", "host.watchdog": "fail"}
    assert "tty1 in graphics mode" in (factory["host.console_text"].observed or "")
    assert "RuntimeWatchdogUSec=0 " in (factory["host.watchdog"].observed or "")


def test_a_node_converged_to_the_variant_passes_the_four_checks(fleet: Fleet,
                                                                variant: dict[str, Any]) -> None:
    assert "splash" not in fleet.on("cat /proc/cmdline").split()
    assert fleet.on(WATCHDOG_COMMAND) == "RuntimeWatchdogUSec=30s\nRebootWatchdogUSec=10min\n"
    assert fleet.on(CONSOLE_COMMAND) == "tty1 0\n"
    assert fleet.on("basename $(readlink /sys/class/drm/card0/device/driver)").strip() == "nvidia"
    assert _status(fleet.judged()) == dict.fromkeys(CHECKS, "pass")


def test_a_network_entry_first_is_a_warning_naming_the_bootorder_fix(fleet: Fleet,
                                                                     variant: dict[str, Any]) -> None:
    faults.inject(fleet.lab, NODE, "pxe-first")
    try:
        assert fleet.on("efibootmgr").splitlines()[2] == "BootOrder: 0002,0001,0000"
        judged = fleet.judged()
        assert _status(judged)["host.uefi_first"] == "fail"
        assert judged["host.uefi_first"].severity == "warn"
        assert judged["host.uefi_first"].fix == "sudo efibootmgr --bootorder 0001,0002,0000"
    finally:
        faults.clear(fleet.lab, NODE, "pxe-first")
    assert _status(fleet.judged())["host.uefi_first"] == "pass"


def test_a_console_left_in_graphics_mode_fails_naming_the_recipes_fix(fleet: Fleet,
                                                                       variant: dict[str, Any]) -> None:
    faults.inject(fleet.lab, NODE, "console-graphics")
    try:
        judged = fleet.judged()
        assert _status(judged) == {**dict.fromkeys(CHECKS, "pass"), "host.console_text": "fail"}
        result = judged["host.console_text"]
        assert result.severity == "error" and result.observed == "tty1 in graphics mode (KDGETMODE 1)"
        assert "KDSETMODE KD_TEXT on /dev/tty1" in (result.fix or "")
        assert "scripts/host-recovery apply" in (result.fix or "")
    finally:
        faults.clear(fleet.lab, NODE, "console-graphics")
    assert _status(fleet.judged())["host.console_text"] == "pass"


def test_a_display_server_holding_drm_master_is_an_error_naming_it(fleet: Fleet,
                                                                   variant: dict[str, Any]) -> None:
    faults.inject(fleet.lab, NODE, "drm-master")
    try:
        assert " y " in fleet.on("cat /sys/kernel/debug/dri/0/clients").splitlines()[1]
        judged = fleet.judged()
        assert _status(judged) == {**dict.fromkeys(CHECKS, "pass"), "host.drm_master": "fail"}
        result = judged["host.drm_master"]
        assert result.severity == "error"
        assert (result.observed or "").startswith("Xorg/2210 (card0) holds DRM master")
        assert (result.fix or "").startswith("stop or restart that process")
    finally:
        faults.clear(fleet.lab, NODE, "drm-master")
    assert _status(fleet.judged())["host.drm_master"] == "pass"
