"""End to end: one netplan file configures the fabric ports, the site's own when it says so
(issue 21, point 3).

One factory-fresh lab for the module (port base 3321), a site copy holding a test baseline
`e2e-netplan` (the site's, with `fabric.netplan_file: /etc/netplan/40-fabric.yaml`):

- spark1: an operator's 40-fabric.yaml configures the fabric ports (with a stale address):
  plan and apply under the site baseline refuse, naming both files and the two ways out, and
  write nothing; apply under e2e-netplan (with its reboot) takes the file over (the operator's
  other keys and comment kept, recorded), writes no 60-sparkbase-fabric.yaml; the second plan
  is empty and the audit clean. A second netplan file in /run giving a port a stale address
  fails the audit naming it, and plan refuses naming that file. Moving back to the site
  baseline is refused: the operator's file, put back, would configure the ports again.
- spark2: the operator's 40-fabric.yaml configures only the management NIC: taken over, then
  moving back to the site baseline puts it back byte for byte (mode too) and writes sparkbase's
  own file.
- spark3: as spark2, but someone edits the taken-over file: moving back keeps it, says so,
  and (the fabric still in it) refuses.
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

PORT_BASE = port_base("SPARKBASE_TEST_NETPLAN_PORT_BASE", 3321)
BASELINE = "e2e-netplan"
SITE_FILE = "/etc/netplan/40-fabric.yaml"
OWN_FILE = "/etc/netplan/60-sparkbase-fabric.yaml"
TAKEOVER_BASELINE = f"""\
extends: site-stock-6.17-4k
version: 1.0.0
description: e2e netplan profile (test_netplan_as_found.py)
fabric:
  netplan_file: {SITE_FILE}
sources:
  fabric.netplan_file: {{kind: site, note: "e2e: the operator's netplan file"}}
"""
#: what an operator wrote by hand: the management NIC, and the fabric ports (one with a stale
#: second address, one with an MTU of 1500)
OPERATOR_FABRIC = """\
# fabric, set up by hand before sparkbase (ops, 2026-05)
network:
  version: 2
  ethernets:
    enP7s7:
      dhcp4: true
      optional: true
    enp1s0f0np0:
      addresses:
        - 10.99.0.5/24
      dhcp4: no
      mtu: 1500
    enp1s0f1np1:
      addresses:
        - 10.99.1.5/24
      dhcp4: no
"""
#: an operator's file that configures the management NIC only
OPERATOR_MGMT = """\
# management network (ops)
network:
  version: 2
  ethernets:
    enP7s7:
      dhcp4: true
      optional: true
"""
STALE = "10.77.0.9/24"
STALE_FILE = "/run/netplan/50-stale.yaml"


class Fleet(fleets.Fleet):
    """The shared fleet, with what this module asks of a node's netplan files."""

    def exists(self, node: str, path: str) -> bool:
        """Whether `path` exists on `node`."""
        return self.lab.run(node, f"test -e {path}")[0] == 0

    def owned(self, node: str) -> Any:
        """The node's ownership record (empty when there is none)."""
        status, out, _ = self.lab.run(node, f"cat {OWNERSHIP_PATH}")
        return parse_record(out if status == 0 else None)

    def put(self, node: str, path: str, text: str, mode: str = "644") -> None:
        """Write `path` by hand on `node`, then `netplan apply`."""
        self.sh(node, f"mkdir -p $(dirname {path}) && cat > {path} && chmod {mode} {path} && netplan apply",
                input=text)

    def run_json(self, *args: str) -> tuple[int, dict[str, Any]]:
        """A plan or apply with `--json`: its exit code and the one node's record."""
        done = self.sparkbase(*args, "--json")
        assert done.stdout.strip(), done.stderr
        node: dict[str, Any] = json.loads(done.stdout)["nodes"][0]
        return done.returncode, node

    def audit(self, node: str, *extra: str) -> tuple[int, dict[str, dict[str, Any]]]:
        """`audit --limit NODE --format json`: its exit code and the node's checks by id."""
        done = self.sparkbase("audit", "--limit", node, "--format", "json", *extra)
        data = json.loads(done.stdout)
        checks = next(n["checks"] for n in data["nodes"] if n["node"] == node)
        return done.returncode, {c["id"]: c for c in checks}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    for shared in fleets.fleet_for_module(tmp_path_factory, "netplan", PORT_BASE):
        (shared.site / "baselines" / f"{BASELINE}.yaml").write_text(TAKEOVER_BASELINE)
        yield Fleet(shared.lab, shared.site)


def _sha(fleet: Fleet, node: str, path: str) -> str:
    return fleet.sh(node, f"sha256sum {path}").split()[0]


def _addresses(fleet: Fleet, node: str, netdev: str) -> list[str]:
    links = json.loads(fleet.sh(node, "ip -j addr show"))
    link = next(link for link in links if link["ifname"] == netdev)
    return [f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"] if a["family"] == "inet"]


def _refused(node: dict[str, Any]) -> str:
    assert node["status"] == "failed", node
    message: str = node["message"]
    return message


def test_another_file_configuring_the_fabric_is_refused_and_nothing_is_written(fleet: Fleet) -> None:
    fleet.put("spark1", SITE_FILE, OPERATOR_FABRIC)
    before = _sha(fleet, "spark1", SITE_FILE)
    code, node = fleet.run_json("plan", "--limit", "spark1")
    assert code == 1
    message = _refused(node)
    assert f"{SITE_FILE} configures enp1s0f0np0, enp1s0f1np1 too" in message, message
    assert OWN_FILE in message and "nothing was written" in message
    assert f"set `fabric.netplan_file: {SITE_FILE}`" in message
    assert f"remove enp1s0f0np0, enp1s0f1np1 from {SITE_FILE} by hand" in message
    code, node = fleet.run_json("apply", "--limit", "spark1", "--yes")
    assert code == 1 and "configures enp1s0f0np0, enp1s0f1np1 too" in _refused(node)
    assert not fleet.exists("spark1", OWN_FILE)
    assert not fleet.exists("spark1", OWNERSHIP_PATH), "the refused apply wrote the ownership record"
    assert not fleet.exists("spark1", "/etc/nccl.conf"), "the refused apply wrote a file"
    assert _sha(fleet, "spark1", SITE_FILE) == before


def test_the_site_file_is_taken_over_then_plan_is_empty_and_the_audit_clean(fleet: Fleet) -> None:
    done = fleet.sparkbase("apply", "--limit", "spark1", "--baseline", BASELINE, "--allow-reboot", "--yes",
                           "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    text = fleet.sh("spark1", f"cat {SITE_FILE}")
    assert text.startswith("# fabric, set up by hand before sparkbase (ops, 2026-05)\n")
    assert "    enP7s7:\n      dhcp4: true\n      optional: true\n" in text  # the operator's keys kept
    assert "10.99.0.5/24" not in text and "10.99.1.5/24" not in text
    assert not fleet.exists("spark1", OWN_FILE)
    record = fleet.owned("spark1").find(Kind.EDITED_FILE, SITE_FILE)
    assert record is not None and record.original == OPERATOR_FABRIC and record.mode == 0o644
    assert record.sha256 == _sha(fleet, "spark1", SITE_FILE)
    assert fleet.sh("spark1", f"stat -c %a {SITE_FILE}").strip() == "600"
    address = _addresses(fleet, "spark1", "enp1s0f0np0")
    assert len(address) == 1 and address != ["10.99.0.5/24"], address
    code, node = fleet.run_json("plan", "--limit", "spark1", "--baseline", BASELINE)
    assert code == 0, [op for op in node["operations"] if op["status"] != "unchanged"]
    code, checks = fleet.audit("spark1", "--baseline", BASELINE)
    failing = {check_id: c["observed"] for check_id, c in checks.items() if c["status"] == "fail"}
    assert code == 0, failing
    assert checks["fabric.netplan"]["status"] == "pass"


def test_a_stale_address_from_a_second_file_fails_the_audit_and_the_plan(fleet: Fleet) -> None:
    """netplan merges address lists across /lib, /etc and /run: a second file (here in /run)
    giving a fabric port another address leaves it with two; the audit names the stale one,
    and plan refuses naming the file."""
    stale = f"network:\n  version: 2\n  ethernets:\n    enp1s0f0np0:\n      addresses: [{STALE}]\n"
    fleet.put("spark1", STALE_FILE, stale)
    try:
        assert STALE in _addresses(fleet, "spark1", "enp1s0f0np0")
        code, checks = fleet.audit("spark1", "--baseline", BASELINE)
        assert code == 1
        link = checks["fabric.link.enp1s0f0np0"]
        assert link["status"] == "fail" and f"(not given: {STALE})" in link["observed"], link
        code, node = fleet.run_json("plan", "--limit", "spark1", "--baseline", BASELINE)
        message = _refused(node)
        assert f"{STALE_FILE} configures enp1s0f0np0 too" in message, message
        assert f"the fabric is managed in {SITE_FILE} (fabric.netplan_file)" in message
    finally:
        fleet.sh("spark1", f"rm -f {STALE_FILE} && netplan apply")
    assert fleet.audit("spark1", "--baseline", BASELINE)[0] == 0


def test_moving_back_is_refused_while_the_operators_file_configures_the_fabric(fleet: Fleet) -> None:
    before = _sha(fleet, "spark1", SITE_FILE)
    code, node = fleet.run_json("plan", "--limit", "spark1")
    message = _refused(node)
    assert code == 1
    assert f"{SITE_FILE} configures enp1s0f0np0, enp1s0f1np1 too" in message, message
    assert OWN_FILE in message
    assert _sha(fleet, "spark1", SITE_FILE) == before
    assert not fleet.exists("spark1", OWN_FILE)


def test_moving_back_puts_the_operators_file_back_as_it_was(fleet: Fleet) -> None:
    fleet.put("spark2", SITE_FILE, OPERATOR_MGMT, mode="640")
    ops = fleet.apply("spark2", "--baseline", BASELINE)
    takeover = next(op for name, op in ops.items() if name.startswith(f"{SITE_FILE} ("))
    assert takeover["status"] == "changed"
    assert "enp1s0f0np0" in fleet.sh("spark2", f"cat {SITE_FILE}")
    assert not fleet.exists("spark2", OWN_FILE)
    ops = fleet.apply("spark2")
    files = next(op for name, op in ops.items() if name.startswith("netplan: only"))
    assert files["status"] == "changed"
    assert fleet.sh("spark2", f"cat {SITE_FILE}") == OPERATOR_MGMT
    assert fleet.sh("spark2", f"stat -c %a {SITE_FILE}").strip() == "640"
    assert fleet.exists("spark2", OWN_FILE)
    assert fleet.owned("spark2").find(Kind.EDITED_FILE, SITE_FILE) is None
    assert len(_addresses(fleet, "spark2", "enp1s0f0np0")) == 1


def test_a_taken_over_file_someone_changed_is_kept_and_reported(fleet: Fleet) -> None:
    fleet.put("spark3", SITE_FILE, OPERATOR_MGMT)
    fleet.apply("spark3", "--baseline", BASELINE)
    fleet.sh("spark3", f"echo '# edited by hand after the takeover' >> {SITE_FILE}")
    edited = _sha(fleet, "spark3", SITE_FILE)
    code, node = fleet.run_json("apply", "--limit", "spark3", "--yes")
    message = _refused(node)
    assert code == 1
    assert f"kept: {SITE_FILE} changed since sparkbase wrote it" in message, message
    assert f"{SITE_FILE} configures enp1s0f0np0" in message
    assert _sha(fleet, "spark3", SITE_FILE) == edited
    assert fleet.owned("spark3").find(Kind.EDITED_FILE, SITE_FILE) is not None
