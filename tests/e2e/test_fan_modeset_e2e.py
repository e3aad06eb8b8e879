"""Issue 12 end to end: fan control as a signed DKMS module with its modules-load.d entry and
daemon, and nvidia-drm modeset by purging DGX OS's override package, on one lab node moved
to the variant and back (own lab, port base SPARKBASE_TEST_FAN_MODESET_PORT_BASE: a clone of
the run's variant image, conftest.py `variant_image`: spark1 as the factory left it, spark2
moved from the factory state to the variant by a real apply).

- factory (spark1): `nvidia-drm-options-modeset0` 25.07-1 installed, its
  /etc/modprobe.d/zz-nvidia-drm-override.conf packed in the initramfs: modeset N;
- variant (spark2; apply --baseline, reboot): the package is purged and its version recorded, every
  initramfs rebuilt (modeset Y), the fan module built for the variant's kernel, signed with
  the lab's MOK, loaded at boot from modules-load.d, its daemon enabled and running; the
  audit's fan and modeset checks pass;
- back to the site baseline (reboot): the module, its entry and the daemon are retired (all
  recorded), the override package comes back at exactly the version removed: modeset N.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import fleets
import pytest
from ports import port_base

from sparkbase.audit.expected import expected_for
from sparkbase.audit.run import judge_node
from sparkbase.facts.collect import gather_fleet
from sparkbase.facts.model import NodeFacts
from sparkbase.model.ownership import OWNERSHIP_PATH, Kind, parse_record
from sparkbase.model.site import load_site
from sparkbase.transport import ssh_targets

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_FAN_MODESET_PORT_BASE", 2971)
NODE = fleets.VARIANT_NODE
#: the image's node as the factory left it
FACTORY_NODE = "spark1"
VARIANT = fleets.VARIANT
VARIANT_KERNEL = fleets.VARIANT_KERNEL
OVERRIDE = "nvidia-drm-options-modeset0"
OVERRIDE_FILE = "/etc/modprobe.d/zz-nvidia-drm-override.conf"
MODULE = "dgx_ec_fan_control"
ENTRY = f"/etc/modules-load.d/{MODULE}.conf"
SERVICE = "dgx-fan-control.service"
MODESET = "/sys/module/nvidia_drm/parameters/modeset"


class Fleet(fleets.Fleet):
    """The shared fleet; `on` runs on NODE."""

    def on(self, command: str) -> str:
        """Run a shell command on NODE; fail the test if it fails."""
        return self.sh(NODE, command)

    def installed(self, package: str, node: str = NODE) -> str:
        """The installed version of `package` on `node` ('' when not installed)."""
        query = f"dpkg-query -W -f='${{db:Status-Abbrev}} ${{Version}}' {package} 2>/dev/null || true"
        out = self.sh(node, query)
        return out.split()[1] if out.startswith("ii ") else ""

    def apply(self, *extra: str) -> dict[str, Any]:
        """`apply --limit NODE --allow-reboot --yes --json`: the node's result."""
        self.console(NODE)  # a person at the console enrols a pending MOK at the reboot
        done = self.sparkbase("apply", "--limit", NODE, "--allow-reboot", "--yes", "--json", *extra)
        assert done.returncode == 0, done.stdout + done.stderr
        result: dict[str, Any] = json.loads(done.stdout)["nodes"][0]
        return result

    def judged(self, baseline: str) -> dict[str, str]:
        """Check id -> status of NODE's audit against `baseline`."""
        site = load_site(self.site)
        expected = expected_for(site, NODE, baseline)
        found = gather_fleet(ssh_targets(site, self.lab.dir), {NODE: expected.plan()})[NODE]
        assert isinstance(found, NodeFacts), found
        return {r.id: r.status for r in judge_node(expected, found)}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, variant_image: fleets.ConvergedImage) -> Iterator[Fleet]:
    directory = tmp_path_factory.mktemp("fan-modeset")
    for shared in fleets.image_fleet(variant_image, directory, PORT_BASE, nodes=2):
        yield Fleet(shared.lab, shared.site)


@pytest.fixture(scope="module")
def variant(fleet: Fleet, variant_image: fleets.ConvergedImage) -> dict[str, Any]:
    """The factory state (FACTORY_NODE), then NODE converged to the variant (reboot included,
    the MOK enrolled at its console): the variant image's apply, as its JSON result for NODE."""
    assert fleet.installed(OVERRIDE, FACTORY_NODE) == "25.07-1"
    assert fleet.sh(FACTORY_NODE, f"cat {MODESET}").strip() == "N"
    result: dict[str, Any] = variant_image.report["nodes"][0]
    assert result["node"] == NODE and result["status"] == "changed", result
    assert fleet.on("uname -r").strip() == VARIANT_KERNEL
    return result


def test_the_variant_purges_the_override_records_it_and_turns_modeset_on(fleet: Fleet,
                                                                         variant: dict[str, Any]) -> None:
    ops = {op["name"]: op for op in variant["operations"]}
    purge = next(op for name, op in ops.items() if name.startswith(f"purge {OVERRIDE}"))
    assert purge["status"] == "changed"
    assert fleet.installed(OVERRIDE) == "" and fleet.lab.run(NODE, f"test -e {OVERRIDE_FILE}")[0] != 0
    record = parse_record(fleet.on(f"cat {OWNERSHIP_PATH}"))
    purged = record.find(Kind.PURGED, OVERRIDE)
    assert purged is not None and purged.version == "25.07-1" and purged.baseline == VARIANT
    assert fleet.on(f"cat {MODESET}").strip() == "Y"
    image = fleet.on(f"cat /boot/initrd.img-{VARIANT_KERNEL}")
    # packed in name order, the last option wins: sparkbase.conf's, the override gone
    packed = [line for line in image.splitlines() if line.startswith("modprobe=")]
    assert packed[-1] == "modprobe=options nvidia_drm modeset=1 fbdev=1"
    assert "update-initramfs -u -k" in fleet.on("cat /var/lib/sparkbase-lab/boot.log")


def test_the_fan_module_is_built_signed_loaded_and_its_daemon_runs(fleet: Fleet,
                                                                   variant: dict[str, Any]) -> None:
    assert f"dgx-spark-fan-control/0.1.3, {VARIANT_KERNEL}, aarch64: installed" in fleet.on("dkms status")
    assert fleet.on(f"cat {ENTRY}").splitlines()[-1] == MODULE
    assert MODULE in fleet.on("lsmod").split()
    assert fleet.on(f"modinfo -F signer {MODULE}").strip()
    state = fleet.on(f"systemctl is-enabled {SERVICE}; systemctl is-active {SERVICE}")
    assert state.split() == ["enabled", "active"]
    record = parse_record(fleet.on(f"cat {OWNERSHIP_PATH}"))
    assert record.find(Kind.DKMS, "dgx-spark-fan-control/0.1.3") is not None
    assert record.find(Kind.FILE, ENTRY) is not None and record.find(Kind.UNIT, SERVICE) is not None
    judged = fleet.judged(VARIANT)
    mine = {k: v for k, v in judged.items() if k.startswith(("host.fan_control", "host.nvidia_drm"))}
    assert mine == {"host.fan_control.dkms": "pass", "host.fan_control.signature": "pass",
                    "host.fan_control.loaded": "pass", "host.fan_control.service": "pass",
                    "host.nvidia_drm": "pass", "host.nvidia_drm.purge": "pass"}


def test_back_to_the_site_retires_fan_control_and_puts_the_override_back(fleet: Fleet,
                                                                          variant: dict[str, Any]) -> None:
    result = fleet.apply()
    ops = {op["name"]: op for op in result["operations"]}
    restore = next(op for name, op in ops.items() if name.startswith(f"put back {OVERRIDE}"))
    assert restore["status"] == "changed"
    assert fleet.installed(OVERRIDE) == "25.07-1"
    assert fleet.on(f"cat {OVERRIDE_FILE}").strip() == "options nvidia-drm modeset=0"
    assert fleet.on(f"cat {MODESET}").strip() == "N"
    assert fleet.lab.run(NODE, f"test -e {ENTRY}")[0] != 0
    assert "dgx-spark-fan-control" not in fleet.on("dkms status")
    assert MODULE not in fleet.on("lsmod").split()
    assert fleet.on(f"systemctl is-enabled {SERVICE} 2>/dev/null || true").strip() != "enabled"
    record = parse_record(fleet.on(f"cat {OWNERSHIP_PATH}"))
    assert record.find(Kind.PURGED, OVERRIDE) is None and record.find(Kind.FILE, ENTRY) is None
    judged = fleet.judged("site-stock-6.17-4k")
    assert judged["host.nvidia_drm"] == "pass" and judged["host.nvidia_drm.purge"] == "skip"
