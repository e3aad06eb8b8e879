"""End to end: apply removes only what sparkbase recorded creating, unchanged.

One module-scoped fleet (own lab dir and ports). No reboots: every apply here stages what
needs one and reports the node `reboot pending`, but runs every other step, retire steps
included, so what is kept and what is removed is observed on the nodes themselves:

- spark1 (site baseline) carries a hand-made /swapfile (active, in /etc/fstab) and a
  hand-made MOK key directory: the site retires both paths for other baselines, yet apply
  keeps them, and plan and apply say so;
- spark2 goes to a test baseline written into the site copy (`e2e-owned`: the site's, plus a
  swap file, fan control and libnccl2; sparkbase creates, installs and enables them, all
  recorded) and back: every one of them is removed;
- spark3 does the same, but someone remakes its /swapfile meanwhile: kept as changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fleets
import pytest
from ports import port_base

from sparkbase.model.ownership import OWNERSHIP_PATH, Kind, parse_record

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_OWNERSHIP_PORT_BASE", 2861)
OWNED = "e2e-owned"
#: a site-compliant baseline whose swap file, fan control and libnccl2 the site's retires
OWNED_BASELINE = """\
extends: site-stock-6.17-4k
version: 1.0.0
description: e2e ownership profile (test_ownership_apply.py)
memory:
  swap: {path: /swapfile, size_gib: 1, header_page_size: 4096}
host:
  fan_control: {package: dgx-spark-fan-control, package_version: 0.1.3-1, dkms_name: dgx-spark-fan-control,
                dkms_version: 0.1.3, module: dgx_ec_fan_control, service: dgx-fan-control.service}
  packages:
    - {name: libnccl2, version: 2.28.9-1+cuda13.0}
"""
SWAP = "/swapfile"
MOK_DIR = "/var/lib/shim-signed/mok"
FAN = "dgx-fan-control.service"
HAND_MADE_SWAP = (f"fallocate -l 64M {SWAP} && chmod 600 {SWAP} && mkswap {SWAP} >/dev/null && swapon {SWAP} "
                  f"&& echo '{SWAP} none swap sw 0 0' >> /etc/fstab")


class Fleet(fleets.Fleet):
    """The shared fleet, with what this module asks of a node's ownership."""

    def exists(self, node: str, path: str) -> bool:
        """Whether `path` exists on `node`."""
        return self.lab.run(node, f"test -e {path}")[0] == 0

    def owned(self, node: str) -> Any:
        """The node's ownership record."""
        return parse_record(self.sh(node, f"cat {OWNERSHIP_PATH}"))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    for shared in fleets.fleet_for_module(tmp_path_factory, "ownership", PORT_BASE):
        (shared.site / "baselines" / f"{OWNED}.yaml").write_text(OWNED_BASELINE)
        yield Fleet(shared.lab, shared.site)


def _swap_uuid(fleet: Fleet, node: str) -> str:
    return fleet.sh(node, f"swaplabel {SWAP}").split("UUID:")[1].split()[0]


def test_what_sparkbase_did_not_create_survives_apply_and_is_reported(fleet: Fleet) -> None:
    fleet.sh("spark1", HAND_MADE_SWAP)
    fleet.sh("spark1", f"install -d -m 755 {MOK_DIR} && echo site-key > {MOK_DIR}/MOK.der")
    uuid = _swap_uuid(fleet, "spark1")
    shown = fleet.sparkbase("plan", "--limit", "spark1")
    assert shown.returncode == 1, shown.stdout + shown.stderr
    assert f". retire: swap file {SWAP} (another baseline's): kept: {SWAP} not created by sparkbase: " \
           "left in place" in shown.stdout
    assert f"kept: {MOK_DIR} not created by sparkbase: left in place" in shown.stdout
    ops = fleet.apply("spark1")
    swap = ops[f"retire: swap file {SWAP} (another baseline's)"]
    assert swap["status"] == "unchanged"
    assert swap["reason"] == f"kept: {SWAP} not created by sparkbase: left in place"
    mok = next(op for name, op in ops.items() if name.startswith(f"retire: MOK key directory {MOK_DIR}"))
    assert mok["status"] == "unchanged" and mok["reason"].startswith("kept: ")
    assert _swap_uuid(fleet, "spark1") == uuid
    assert SWAP in fleet.sh("spark1", "swapon --show=NAME --noheadings").split()
    assert f"{SWAP} none swap" in fleet.sh("spark1", "cat /etc/fstab")
    assert fleet.sh("spark1", f"cat {MOK_DIR}/MOK.der") == "site-key\n"
    record = fleet.owned("spark1")
    assert record.find(Kind.SWAP, SWAP) is None and record.find(Kind.DIRECTORY, MOK_DIR) is None
    assert record.find(Kind.FILE, "/etc/nccl.conf") is not None  # what it did create is recorded
    assert fleet.sh("spark1", f"stat -c %a {OWNERSHIP_PATH}").strip() == "600"


def test_what_sparkbase_created_is_recorded_then_retired(fleet: Fleet) -> None:
    fleet.apply("spark2", "--baseline", OWNED)
    record = fleet.owned("spark2")
    swap = record.find(Kind.SWAP, SWAP)
    assert swap is not None and swap.uuid == _swap_uuid(fleet, "spark2") and swap.baseline == OWNED
    assert record.find(Kind.UNIT, FAN) is not None
    assert record.find(Kind.PACKAGE, "libnccl2") is not None
    assert SWAP in fleet.sh("spark2", "swapon --show=NAME --noheadings").split()
    ops = fleet.apply("spark2")
    assert ops[f"retire: swap file {SWAP} (another baseline's)"]["status"] == "changed"
    assert not fleet.exists("spark2", SWAP)
    assert SWAP not in fleet.sh("spark2", "cat /etc/fstab")
    assert fleet.sh("spark2", "dpkg-query -W -f='${db:Status-Abbrev}' libnccl2 2>/dev/null || true").strip() \
        in ("", "un", "rc")
    assert fleet.lab.run("spark2", f"systemctl is-enabled {FAN}")[1].strip() != "enabled"
    after = fleet.owned("spark2")
    assert after.find(Kind.SWAP, SWAP) is None and after.find(Kind.PACKAGE, "libnccl2") is None
    assert after.find(Kind.UNIT, FAN) is None


def test_what_changed_since_sparkbase_created_it_is_kept(fleet: Fleet) -> None:
    fleet.apply("spark3", "--baseline", OWNED)
    fleet.sh("spark3", f"swapoff {SWAP} && mkswap {SWAP} >/dev/null")  # someone remakes it
    ops = fleet.apply("spark3")
    swap = ops[f"retire: swap file {SWAP} (another baseline's)"]
    assert swap["status"] == "unchanged"
    assert swap["reason"].startswith(f"kept: {SWAP} changed since sparkbase created it (swap UUID ")
    assert fleet.exists("spark3", SWAP)


def test_a_package_an_earlier_version_pinned_is_retired(fleet: Fleet) -> None:
    """A baseline's next version drops a pin and lists it under `retired_packages` (as the
    variant's 1.5.0 did libnccl2): the node's next apply unholds and purges the package
    sparkbase installed, and the record forgets it."""
    path = fleet.site / "baselines" / f"{OWNED}.yaml"
    fleet.apply("spark4", "--baseline", OWNED)
    assert fleet.owned("spark4").find(Kind.PACKAGE, "libnccl2") is not None
    dropped = OWNED_BASELINE.replace("version: 1.0.0", "version: 1.1.0").replace(
        "  packages:\n    - {name: libnccl2, version: 2.28.9-1+cuda13.0}\n",
        "retired_packages:\n  - {name: libnccl2, section: host}\n")
    assert "retired_packages" in dropped and "libnccl2, version" not in dropped
    path.write_text(dropped)
    try:
        ops = fleet.apply("spark4", "--baseline", OWNED)
    finally:
        path.write_text(OWNED_BASELINE)
    retire = next(op for name, op in ops.items() if name.startswith("retire: unhold and purge libnccl2"))
    assert retire["status"] == "changed", retire
    assert fleet.sh("spark4", "dpkg-query -W -f='${db:Status-Abbrev}' libnccl2 2>/dev/null || true").strip() \
        in ("", "un", "rc")
    assert fleet.owned("spark4").find(Kind.PACKAGE, "libnccl2") is None
