"""End to end: the installer's /swap.img marked `noauto` (recorded, put back on move-back)
and a fallback kernel kept installed with its GRUB entry, on lab nodes.

The variant itself needs a reboot into its 64 KiB kernel; the two features do not, so a
test baseline written into the site copy (`e2e-factory`: the site's, plus the variant's
`kernel.fallback` and `memory.factory_swap` with `swapoff`) carries them. No reboots.

- spark1 goes to `e2e-factory`: /swap.img is switched off and its fstab line marked noauto,
  the fallback kernel is installed, held and in GRUB (the default unchanged); the audit
  judges both; back on the site baseline, /etc/fstab is byte for byte what it was;
- spark2 goes there too, then someone edits the noauto line: back on the site baseline
  the line is kept, and apply says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import fleets
import pytest
from ports import port_base

from sparkbase.model.ownership import OWNERSHIP_PATH, Kind, parse_record

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_FACTORY_SWAP_PORT_BASE", 2991)
FACTORY = "e2e-factory"
FALLBACK = "7.0.0-1019-nvidia"
FACTORY_BASELINE = f"""\
extends: site-stock-6.17-4k
version: 1.0.0
description: e2e factory swap and fallback kernel (test_factory_swap_fallback_e2e.py)
kernel:
  fallback: {{release: {FALLBACK}, package_version: 7.0.0-1019.19~24.04.2}}
memory:
  factory_swap: {{path: /swap.img, fstab: noauto, swapoff: true}}
sources:
  kernel.fallback: {{kind: placeholder, note: e2e}}
  memory.factory_swap: {{kind: placeholder, note: e2e}}
"""
RESTORE = ("retire: the /swap.img line of /etc/fstab as sparkbase found it (another baseline had it "
           "marked noauto)")
MARK = "/swap.img kept, its /etc/fstab line marked noauto, switched off when active (recorded)"


class Fleet(fleets.Fleet):
    """The shared fleet, with what this module asks of a node."""

    def audit(self, node: str, baseline: str) -> dict[str, dict[str, Any]]:
        """`audit --baseline B --limit NODE --json`: the node's checks by id."""
        done = self.sparkbase("audit", "--baseline", baseline, "--limit", node, "--format", "json")
        report = json.loads(done.stdout)
        return {check["id"]: check for check in report["nodes"][0]["checks"]}

    def active_swaps(self, node: str) -> list[str]:
        """Paths of the node's active swap areas."""
        return self.sh(node, "swapon --show=NAME --noheadings").split()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    for shared in fleets.fleet_for_module(tmp_path_factory, "factory-swap", PORT_BASE):
        (shared.site / "baselines" / f"{FACTORY}.yaml").write_text(FACTORY_BASELINE)
        yield Fleet(shared.lab, shared.site)


def test_noauto_and_fallback_applied_audited_and_undone(fleet: Fleet) -> None:
    before = fleet.sh("spark1", "cat /etc/fstab")
    assert "/swap.img\tnone\tswap\tsw\t0\t0\n" in before  # the installer's line (lab/image.py)
    assert "/swap.img" in fleet.active_swaps("spark1")
    ops = fleet.apply("spark1", "--baseline", FACTORY)
    assert ops[MARK]["status"] == "changed"
    after = fleet.sh("spark1", "cat /etc/fstab")
    assert after == before.replace("/swap.img\tnone\tswap\tsw\t0\t0", "/swap.img\tnone\tswap\tnoauto\t0\t0")
    assert "/swap.img" not in fleet.active_swaps("spark1")
    edit = parse_record(fleet.sh("spark1", f"cat {OWNERSHIP_PATH}")).find(Kind.FSTAB_LINE, "/swap.img")
    assert edit is not None and edit.original == "/swap.img\tnone\tswap\tsw\t0\t0"
    assert edit.written == "/swap.img\tnone\tswap\tnoauto\t0\t0" and edit.baseline == FACTORY
    # the fallback: installed, held, in GRUB's menu; the default still the site's kernel
    version = fleet.sh("spark1", f"dpkg-query -W -f='${{Version}}' linux-image-{FALLBACK}")
    assert version == "7.0.0-1019.19~24.04.2"
    assert f"linux-image-{FALLBACK}" in fleet.sh("spark1", "apt-mark showhold").split()
    assert f"Ubuntu, with Linux {FALLBACK}'" in fleet.sh("spark1", "cat /boot/grub/grub.cfg")
    checks = fleet.audit("spark1", FACTORY)
    assert checks["kernel.fallback"]["status"] == "pass", checks["kernel.fallback"]
    assert checks["memory.swap.factory"]["status"] == "pass", checks["memory.swap.factory"]
    again = fleet.apply("spark1", "--baseline", FACTORY)
    assert again[MARK]["status"] == "unchanged"
    # back on the site baseline: the line as the installer wrote it, byte for byte
    back = fleet.apply("spark1")
    assert back[RESTORE]["status"] == "changed"
    assert fleet.sh("spark1", "cat /etc/fstab") == before
    record = parse_record(fleet.sh("spark1", f"cat {OWNERSHIP_PATH}"))
    assert record.find(Kind.FSTAB_LINE, "/swap.img") is None


def test_a_line_edited_since_is_kept(fleet: Fleet) -> None:
    fleet.apply("spark2", "--baseline", FACTORY)
    fleet.sh("spark2", "sed -i 's#\\tnoauto\\t#\\tnoauto,pri=5\\t#' /etc/fstab")  # the /swap.img line
    edited = fleet.sh("spark2", "cat /etc/fstab")
    assert "noauto,pri=5" in edited
    ops = fleet.apply("spark2")
    assert ops[RESTORE]["status"] == "unchanged"
    reason = ops[RESTORE]["reason"]
    assert reason.startswith("kept: the /etc/fstab line for /swap.img changed since sparkbase marked it")
    assert fleet.sh("spark2", "cat /etc/fstab") == edited
