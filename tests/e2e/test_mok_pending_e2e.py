"""MOK enrolment pending, end to end on the lab: the enrolment needs a person at the console.

spark2 moves to the variant with `apply --allow-reboot` and nobody at its console: apply
imports the MOK, builds and signs the DKMS modules, reboots into the 64 KiB kernel and
reports "MOK enrolment pending" with the MokManager steps (not a failure); the audit says the
same. A second reboot with nobody at the console changes nothing (still pending, the audit
says what to do); `sparkbase lab console spark2 enroll-mok` plays the person at the console,
and after the next reboot the key is enrolled, the modules load and the audit is clean.
Own lab (port base SPARKBASE_TEST_MOK_PORT_BASE).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import fleets
import pytest
from ports import port_base

from sparkbase.model.site import load_site

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_MOK_PORT_BASE", 3441)
NODE = "spark2"
SAVER = "dgx-spark-memory-saver/0.2.0"
TREE = "/usr/src/dgx-spark-memory-saver-0.2.0"
VARIANT = "ds41f-7x-64k"
MOVE = ("apply", "--limit", NODE, "--baseline", VARIANT, "--override-policy", "e2e: MOK enrolment pending",
        "--yes")
MODULE_CHECKS = {"memory_saver.loaded", "memory_saver.signature", "host.fan_control.loaded",
                 "host.fan_control.signature", "secure_boot.mok"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[fleets.Fleet]:
    yield from fleets.fleet_for_module(tmp_path_factory, "mok", PORT_BASE)


def _audit(fleet: fleets.Fleet) -> tuple[int, dict[str, dict[str, Any]]]:
    """NODE's audit against the variant: exit code, failed error checks by id (the inventory
    still assigns the site baseline: `stamp.assignment` warns)."""
    done = fleet.sparkbase("audit", "--limit", NODE, "--baseline", VARIANT, "--format", "json")
    report = json.loads(done.stdout)
    checks = report["nodes"][0]["checks"]
    return done.returncode, {c["id"]: c for c in checks if c["status"] == "fail" and c["severity"] == "error"}


def _says_what_to_do(failed: dict[str, dict[str, Any]]) -> None:
    assert set(failed) == MODULE_CHECKS, failed
    for check in failed.values():
        assert "MOK enrolment pending" in f"{check['observed']} {check['fix']}", check
        assert "Enroll MOK → Continue → Yes" in check["fix"], check


def test_pending_until_a_person_at_the_console_enrols_it(fleet: fleets.Fleet) -> None:
    done = fleet.sparkbase(*MOVE, "--allow-reboot", "--json")
    node = json.loads(done.stdout)["nodes"][0]
    assert (done.returncode, node["status"]) == (1, "MOK enrolment pending"), done.stdout + done.stderr
    assert node["rebooted"] and node["running_kernel"] == fleets.VARIANT_KERNEL
    pending = node["mok_enrolment"]
    assert pending["state"] == "pending"
    assert pending["console_steps"][2:4] == ["Continue", "Yes (Enroll the key(s)?)"]
    assert f"SHA1 Fingerprint: {pending['fingerprint']}" in fleet.sh(NODE, "mokutil --list-new")
    assert not [op for op in node["operations"] if op["status"] == "failed"], done.stdout
    # built from its pinned source checkout and signed, installed for the 64 KiB kernel: only
    # the enrolment is missing
    source = next(op for op in node["operations"] if op["kind"] == "dkms-source")
    assert source["status"] == "changed", source
    saver = load_site(fleet.site).baselines[VARIANT].memory.memory_saver
    assert saver is not None
    assert fleet.sh(NODE, f"cat {TREE}/.sparkbase-source").strip() == saver.source.sha256
    assert fleet.sh(NODE, f"readlink /var/lib/dkms/{SAVER}/source").strip() == TREE
    assert "installed" in fleet.sh(NODE, "dkms status dgx-spark-memory-saver/0.2.0")
    assert fleet.sh(NODE, "dpkg-query -W -f='${Version}' nvidia-kernel-source-580-open") == \
        "580.178.04-0ubuntu0.24.04.1"
    assert fleet.sh(NODE, "modinfo -F sig_key nvidia_uvm").strip()
    code, failed = _audit(fleet)
    assert code == 1
    _says_what_to_do(failed)

    # a reboot with nobody at the console: MokManager times out, nothing changes
    fleet.lab.reboot(NODE)
    assert f"SHA1 Fingerprint: {pending['fingerprint']}" in fleet.sh(NODE, "mokutil --list-new")
    again = fleet.sparkbase(*MOVE, "--json")
    node = json.loads(again.stdout)["nodes"][0]
    assert (again.returncode, node["status"], node["reboot_reasons"]) == (1, "MOK enrolment pending", []), \
        again.stdout + again.stderr
    assert "Enroll MOK → Continue → Yes" in fleet.sparkbase(*MOVE).stdout  # the table says it too
    code, failed = _audit(fleet)
    assert code == 1
    _says_what_to_do(failed)

    # the person at the console: Enroll MOK → Continue → Yes → the password → Reboot
    fleet.console(NODE)
    fleet.lab.reboot(NODE)
    assert f"SHA1 Fingerprint: {pending['fingerprint']}" in fleet.sh(NODE, "mokutil --list-enrolled")
    assert "nvidia_uvm" in fleet.sh(NODE, "lsmod")
    code, failed = _audit(fleet)
    assert (code, failed) == (0, {})
