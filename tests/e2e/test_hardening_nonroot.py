"""Hardening, end to end: nodes reached as a non-root user with sudo.

One factory-fresh lab (port base 2851). Every node gets a login user `ops` with the lab
key and passwordless sudo (`Lab.add_sudo_user`), and root's authorized_keys is moved
aside, so nothing can quietly log in as root. The site copy says `ssh.user: ops`,
`ssh.sudo: true`; audit, preflight and apply (pyinfra `_sudo`, the reboot rollout
included) must work through it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
from fleets import NODES, SITE_KERNEL, Fleet, fleet_for_module
from ports import port_base

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_HARDENING_NONROOT_PORT_BASE", 2851)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    for fleet in fleet_for_module(tmp_path_factory, "hardening-nonroot", PORT_BASE):
        fleet.lab.add_sudo_user("ops")
        for node in NODES:
            fleet.sh(node, "mv /root/.ssh/authorized_keys /root/.ssh/authorized_keys.off")
        inventory = fleet.site / "inventory" / "site.yaml"
        text = inventory.read_text()
        assert "  user: root" in text
        inventory.write_text(text.replace("  user: root", "  user: ops\n  sudo: true", 1))
        yield fleet


def as_ops(fleet: Fleet, node: str, command: str) -> subprocess.CompletedProcess[str]:
    """`command` on `node`, logged in as ops (OpenSSH, the lab's files)."""
    argv = ["ssh", "-F", str(fleet.lab.ssh_config_path), "-l", "ops", node, command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_root_cannot_log_in_but_ops_can_with_sudo(fleet: Fleet) -> None:
    # a new root login is refused (`Lab.run` may reuse a connection made before the fixture)
    fresh = subprocess.run(fleet.lab.ssh_argv("spark1", ["true"]), capture_output=True, timeout=60,
                           check=False)
    assert fresh.returncode != 0
    who = as_ops(fleet, "spark1", "id -un; sudo -n id -un")
    assert who.stdout.split() == ["ops", "root"], who.stderr


def test_audit_and_preflight_work_as_ops_with_sudo(fleet: Fleet) -> None:
    done = fleet.sparkbase("audit", "--format", "json")
    assert done.returncode == 1, done.stdout + done.stderr  # factory fleet: drift, every node reached
    data = json.loads(done.stdout)
    for node in data["nodes"]:
        assert node["reachable"], node
        ids = {c["id"]: c for c in node["checks"]}
        assert ids["kernel.release"]["status"] == "fail"
        assert "6.17.0-1008-nvidia" in ids["kernel.release"]["observed"]
        assert ids["gpu.clock"]["status"] == "pass"
    gate = fleet.sparkbase("preflight", "dsv41-flash")
    assert gate.returncode == 1 and "REFUSED" in gate.stdout + gate.stderr
    assert "unreachable" not in gate.stdout


def test_apply_with_reboot_converges_a_node_as_ops_with_sudo(fleet: Fleet) -> None:
    done = fleet.sparkbase("apply", "--limit", "spark1", "--allow-reboot", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    node = json.loads(done.stdout)["nodes"][0]
    assert node["status"] == "changed" and node["rebooted"] and node["running_kernel"] == SITE_KERNEL
    assert as_ops(fleet, "spark1", "uname -r").stdout.strip() == SITE_KERNEL
    owner = as_ops(fleet, "spark1", "stat -c %U:%G /etc/nccl.conf /etc/sparkbase/stamp.json")
    assert owner.stdout.split() == ["root:root", "root:root"]
    again = fleet.sparkbase("apply", "--limit", "spark1", "--yes", "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)["nodes"][0]["status"] == "unchanged"
    audit = fleet.sparkbase("audit", "--limit", "spark1")
    assert audit.returncode == 0, audit.stdout + audit.stderr
