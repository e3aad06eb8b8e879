"""End to end: swap chosen at boot by the booted kernel's page size (issue 24, point 2).

One factory-fresh lab node goes to the variant (`ds41f-7x-64k`, `memory.swap_by_page_size`:
the recipe's spark3-kernel-memory, host/kernel-memory/ at spark-ds41f db98392f): spark2 of a
clone of the run's variant image (conftest.py `variant_image`, moved there by a real apply):

- on its 64 KiB kernel it swaps on /swap-64k.img, activated by sparkbase-swap.service (no
  /etc/fstab line for it; the installer's /swap.img line is noauto);
- booted once into the 4 KiB fallback kernel (GRUB's one-shot entry) it swaps on /swap.img,
  chosen by the same unit, and the audit judges that swap right for that kernel;
- the next boot is the 64 KiB kernel again, on /swap-64k.img;
- the disabled services are the recipe's, each disabled where the factory image has it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import fleets
import pytest
from ports import port_base

from sparkbase.model.site import load_site
from sparkbase_lab import boot

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_SWAP_BY_PAGE_PORT_BASE", 3401)
VARIANT = fleets.VARIANT
KERNEL = fleets.VARIANT_KERNEL
FALLBACK = "7.0.0-1019-nvidia"
UNIT = "sparkbase-swap.service"
NODE = fleets.VARIANT_NODE


class Fleet(fleets.Fleet):
    """The module's fleet, with what this module asks of its node on the variant."""

    def audit(self) -> dict[str, dict[str, Any]]:
        """`audit --baseline VARIANT --limit NODE --format json`: the node's checks by id."""
        done = self.sparkbase("audit", "--baseline", VARIANT, "--limit", NODE, "--format", "json")
        report = json.loads(done.stdout)
        return {check["id"]: check for check in report["nodes"][0]["checks"]}

    def active_swaps(self) -> list[str]:
        """Paths of the node's active swap areas."""
        return self.sh(NODE, "swapon --show=NAME --noheadings").split()

    def reboot(self) -> None:
        """`reboot` over SSH, then wait for the node's next boot."""
        before = self.lab.booted_at(NODE)
        result = subprocess.run(self.lab.ssh_argv(NODE, ["reboot"]), capture_output=True, timeout=30)
        assert result.returncode in (0, 255), result.stderr
        self.lab.wait_booted(NODE, after=before, timeout=60)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, variant_image: fleets.ConvergedImage) -> Iterator[Fleet]:
    directory = tmp_path_factory.mktemp("swap-by-page")
    for shared in fleets.image_fleet(variant_image, directory, PORT_BASE, nodes=2):
        yield Fleet(shared.lab, shared.site)


@pytest.fixture(scope="module")
def on_variant(fleet: Fleet, variant_image: fleets.ConvergedImage) -> Fleet:
    """NODE moved to the variant (a person at its console enrolled the MOK at the reboot): the
    variant image's apply."""
    assert [n["status"] for n in variant_image.report["nodes"]] == ["changed"]
    return fleet


def test_the_64k_kernel_swaps_on_its_own_file_chosen_at_boot(on_variant: Fleet) -> None:
    fleet = on_variant
    assert fleet.sh(NODE, "uname -r").strip() == KERNEL
    assert fleet.active_swaps() == ["/swap-64k.img"]
    fstab = fleet.sh(NODE, "cat /etc/fstab")
    assert "/swap-64k.img" not in fstab  # the unit activates it, on its page size only
    assert "/swap.img\tnone\tswap\tnoauto\t0\t0" in fstab
    shown = fleet.sh(NODE, f"systemctl show -p UnitFileState -p ActiveState {UNIT}").split()
    assert sorted(shown) == ["ActiveState=active", "UnitFileState=enabled"]
    assert "swapon" in fleet.sh(NODE, "cat /usr/local/sbin/sparkbase-swap")
    checks = fleet.audit()
    for check in ("memory.swap", "memory.swap.fstab", "memory.swap.boot_unit", "memory.swap.factory"):
        assert checks[check]["status"] == "pass", checks[check]


def test_the_fallback_kernel_boots_with_swap(on_variant: Fleet) -> None:
    fleet = on_variant
    fleet.sh(NODE, f"grub-reboot '{boot.entry_path(FALLBACK)}'")
    fleet.reboot()
    assert fleet.sh(NODE, "uname -r").strip() == FALLBACK
    assert fleet.sh(NODE, "getconf PAGESIZE").strip() == "4096"
    assert fleet.active_swaps() == ["/swap.img"]  # the installer's 4 KiB file, chosen by the unit
    checks = fleet.audit()
    swap = checks["memory.swap"]
    assert swap["status"] == "pass", swap
    assert "/swap.img active" in str(swap["observed"])
    assert checks["memory.swap.boot_unit"]["status"] == "pass"
    assert checks["kernel.page_size"]["status"] == "fail"  # it is the fallback, not the baseline's kernel
    # the one-shot entry is spent: the next boot is the 64 KiB kernel on its own swap file
    fleet.reboot()
    assert fleet.sh(NODE, "uname -r").strip() == KERNEL
    assert fleet.active_swaps() == ["/swap-64k.img"]


def test_the_recipes_services_are_disabled_where_they_exist(on_variant: Fleet) -> None:
    fleet = on_variant
    units = load_site(fleet.site).baselines[VARIANT].host.disable_services
    assert "cups.path" in units and "snapd.seeded.service" in units
    for unit in units:
        state = fleet.sh(NODE, f"systemctl is-enabled {unit} || true").strip()
        assert state in ("disabled", "static"), f"{unit}: {state}"
    checks = fleet.audit()
    for unit in units:
        check = checks[f"service.{unit}"]
        assert check["status"] == "pass" and check["observed"] != "absent (no such unit on the node)", check


def test_the_line_an_earlier_sparkbase_wrote_is_dropped(on_variant: Fleet) -> None:
    """ds41f-7x-64k before 1.5.0 activated /swap-64k.img from /etc/fstab: that exact line
    goes (the 4 KiB kernel would fail on it at boot); any other line is the site's."""
    fleet = on_variant
    before = fleet.sh(NODE, "cat /etc/fstab")
    fleet.sh(NODE, "echo '/swap-64k.img none swap sw 0 0' >> /etc/fstab")
    assert fleet.audit()["memory.swap.fstab"]["status"] == "fail"
    done = fleet.sparkbase("apply", "--limit", NODE, "--baseline", VARIANT, "--yes",
                           "--override-policy", "e2e: swap by page size", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    ops = json.loads(done.stdout)["nodes"][0]["operations"]
    assert [op["name"] for op in ops if op["status"] == "changed"] == [
        "/etc/fstab: no '/swap-64k.img none swap sw 0 0' line (the boot unit swaps on /swap-64k.img)"]
    assert fleet.sh(NODE, "cat /etc/fstab") == before
    assert fleet.audit()["memory.swap.fstab"]["status"] == "pass"


def test_moving_back_retires_the_unit_and_its_script(on_variant: Fleet) -> None:
    fleet = on_variant
    back = fleet.sparkbase("apply", "--limit", NODE, "--allow-reboot", "--yes", "--json")
    assert back.returncode == 0, back.stdout + back.stderr
    ops = {op["name"]: op["status"] for op in json.loads(back.stdout)["nodes"][0]["operations"]}
    assert ops[f"retire: {UNIT} disabled (run only by {VARIANT})"] == "changed", ops
    for path in (f"/etc/systemd/system/{UNIT}", "/usr/local/sbin/sparkbase-swap"):
        assert ops[f"retire: {path} (rendered only by {VARIANT})"] == "changed", ops
    assert fleet.sh(NODE, f"systemctl is-enabled {UNIT} || true").strip() != "enabled"
    for path in (f"/etc/systemd/system/{UNIT}", "/usr/local/sbin/sparkbase-swap"):
        assert fleet.lab.run(NODE, f"test -e {path}")[0] != 0, path
    assert fleet.sh(NODE, "getconf PAGESIZE").strip() == "4096"
    assert fleet.active_swaps() == ["/swap.img"]  # its fstab line as the installer wrote it
    assert "/swap.img\tnone\tswap\tsw\t0\t0" in fleet.sh(NODE, "cat /etc/fstab")
