"""Hardening, end to end: faults in the middle of an apply on a real emulated fleet.

One lab (port base 2801) for the module, in file order:
1. from the factory state, a new kernel that does not boot on spark2: the rollout stops
   there, spark3/spark4 stay untouched, the report names the kernel spark2 fell back to;
2. with the fault cleared, the re-run converges every node; a second apply changes nothing;
3. sshd killed on spark3 while a file upload is half done: spark3 stops and says what was
   and was not done, spark1 is converged anyway, the old file is whole, the re-run
   converges and leaves no `.sparkbase-new` behind;
4. two applies racing for one node (same site: local lock; two sites: node lock): exactly
   one proceeds, the other names the holder.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from fleets import FACTORY_KERNEL, NODES, SITE_KERNEL, Fleet, copy_site, fleet_for_module
from ports import port_base

from sparkbase.model.site import load_site
from sparkbase.render import node_files
from sparkbase_lab import faults

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_HARDENING_APPLY_PORT_BASE", 2801)
NCCL = "/etc/nccl.conf"
SYSCTL = "/etc/sysctl.d/90-sparkbase.conf"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    yield from fleet_for_module(tmp_path_factory, "hardening-apply", PORT_BASE)


def _nodes(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in report["nodes"]}


def _sha(fleet: Fleet, node: str, path: str) -> str:
    status, out, _ = fleet.lab.run(node, f"sha256sum {path}")
    return out.split()[0] if status == 0 else "missing"


def _rendered_sha(fleet: Fleet, node: str, path: str) -> str:
    file = next(f for f in node_files(load_site(fleet.site), node) if f.path == path)
    return hashlib.sha256(file.content.encode()).hexdigest()


def _factory_snapshot(fleet: Fleet, node: str) -> str:
    """Everything an apply would change on a node, as one text to compare before/after."""
    return fleet.sh(node, "uname -r; ls -l --time-style=+%s /etc/default/grub.d /etc/sysctl.d "
                          "/etc/modprobe.d /boot 2>&1; sha256sum /boot/grub/grub.cfg /etc/fstab "
                          "/etc/nccl.conf 2>&1; dpkg-query -W -f '${Package}=${Version} ${Status}\\n' "
                          "| sort; apt-mark showhold; systemctl get-default; "
                          "ls /run/sparkbase 2>&1; cat /proc/cmdline")


@pytest.fixture(scope="module")
def panicked(fleet: Fleet) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """The factory rollout with a kernel that panics on spark2 (and the untouched snapshots)."""
    before = {node: _factory_snapshot(fleet, node) for node in ("spark3", "spark4")}
    faults.inject(fleet.lab, "spark2", "kernel-panic", SITE_KERNEL)
    try:
        done = fleet.sparkbase("apply", "--allow-reboot", "--yes", "--json", "--reboot-timeout", "60")
    finally:
        faults.clear(fleet.lab, "spark2", "kernel-panic")
    return done, before


def test_a_kernel_that_does_not_boot_stops_the_rollout_there(
    fleet: Fleet, panicked: tuple[subprocess.CompletedProcess[str], dict[str, str]]
) -> None:
    done, before = panicked
    assert done.returncode == 1, done.stdout + done.stderr
    nodes = _nodes(json.loads(done.stdout))
    assert nodes["spark1"]["status"] == "changed" and nodes["spark1"]["running_kernel"] == SITE_KERNEL
    stuck = nodes["spark2"]
    assert stuck["status"] == "failed" and stuck["rebooted"]
    assert stuck["running_kernel"] == FACTORY_KERNEL
    assert f"running {FACTORY_KERNEL}" in stuck["message"]
    assert f"spark2: rollout stopped (verification failed after reboot, running {FACTORY_KERNEL}" \
        in done.stderr
    for node in ("spark3", "spark4"):
        assert nodes[node]["status"] == "not started"
        assert "the rollout stopped at spark2" in nodes[node]["message"]
        # untouched: nothing staged, installed, held, written, locked or rebooted
        assert _factory_snapshot(fleet, node) == before[node]
    assert fleet.sh("spark2", "uname -r").strip() == FACTORY_KERNEL


@pytest.fixture(scope="module")
def converged(fleet: Fleet, panicked: object) -> None:
    """With the fault cleared, the rollout resumes and converges every node."""
    done = fleet.sparkbase("apply", "--allow-reboot", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    nodes = _nodes(json.loads(done.stdout))
    assert nodes["spark1"]["status"] == "unchanged"
    for node in ("spark2", "spark3", "spark4"):
        assert nodes[node]["status"] == "changed" and nodes[node]["running_kernel"] == SITE_KERNEL


def test_after_the_panic_a_rerun_converges_and_a_second_apply_changes_nothing(
    fleet: Fleet, converged: None
) -> None:
    again = fleet.sparkbase("apply", "--yes", "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    report = json.loads(again.stdout)
    assert [n["status"] for n in report["nodes"]] == ["unchanged"] * 4
    for node in NODES:
        assert fleet.sh(node, "uname -r").strip() == SITE_KERNEL


def test_sshd_killed_mid_apply_stops_that_node_only_and_a_rerun_converges(
    fleet: Fleet, converged: None
) -> None:
    for node in ("spark1", "spark3"):
        fleet.sh(node, f"echo '# hand edit' >> {NCCL} && echo '# hand edit' >> {SYSCTL}")
    old = fleet.sh("spark3", f"cat {NCCL}")
    fleet.slow_upload_check("spark3", 60)
    proc = fleet.popen("apply", "--yes", "--json")
    try:
        fleet.wait_upload_check("spark3", proc)
        faults.inject(fleet.lab, "spark3", "unreachable")  # every process of spark3 ends, sshd too
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        faults.clear(fleet.lab, "spark3", "unreachable")
        fleet.wait_ssh("spark3")
    assert proc.returncode == 1, out + err
    nodes = _nodes(json.loads(out))
    assert nodes["spark1"]["status"] == "changed"
    assert [n for n in NODES if nodes[n]["status"] == "failed"] == ["spark3"]
    assert nodes["spark2"]["status"] == nodes["spark4"]["status"] == "unchanged"
    ops = {op["name"].split()[0]: op["status"] for op in nodes["spark3"]["operations"]}
    assert ops[NCCL] == "failed", ops
    assert ops[SYSCTL] == "not run", ops
    assert "unchanged" in ops.values()
    assert nodes["spark3"]["message"]
    # the old file is whole; the upload sits beside it, never over it
    fleet.normal_upload_check("spark3")
    assert fleet.sh("spark3", f"cat {NCCL}") == old
    assert fleet.lab.run("spark3", f"ls -d {NCCL}.sparkbase-new.*")[0] == 0
    assert _sha(fleet, "spark1", NCCL) == _rendered_sha(fleet, "spark1", NCCL)

    rerun = fleet.sparkbase("apply", "--yes", "--json")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert _nodes(json.loads(rerun.stdout))["spark3"]["status"] == "changed"
    for path in (NCCL, SYSCTL):
        assert _sha(fleet, "spark3", path) == _rendered_sha(fleet, "spark3", path)
    assert fleet.sh("spark3", "ls /etc /etc/sysctl.d").count(".sparkbase-new") == 0
    second = fleet.sparkbase("apply", "--yes", "--json")
    assert second.returncode == 0, second.stdout + second.stderr
    assert [n["status"] for n in json.loads(second.stdout)["nodes"]] == ["unchanged"] * 4


def test_a_leftover_upload_beside_an_identical_file_is_cleaned_up(fleet: Fleet, converged: None) -> None:
    fleet.sh("spark4", f"echo 'half an upload' > {SYSCTL}.sparkbase-new")
    done = fleet.sparkbase("apply", "--limit", "spark4", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert fleet.lab.run("spark4", f"test -e {SYSCTL}.sparkbase-new")[0] != 0
    assert _sha(fleet, "spark4", SYSCTL) == _rendered_sha(fleet, "spark4", SYSCTL)
    assert fleet.sparkbase("plan", "--limit", "spark4").returncode == 0


def _race(fleet: Fleet, sites: tuple[Any, Any]) -> tuple[subprocess.Popen[str], subprocess.Popen[str],
                                                          list[tuple[str, str]]]:
    fleet.sh("spark1", f"echo '# hand edit' >> {NCCL}")
    fleet.slow_upload_check("spark1", 3)
    first = fleet.popen("apply", "--limit", "spark1", "--yes", "--json", site=sites[0])
    second = fleet.popen("apply", "--limit", "spark1", "--yes", "--json", site=sites[1])
    try:
        outputs = [first.communicate(timeout=300), second.communicate(timeout=300)]
    finally:
        fleet.normal_upload_check("spark1")
    return first, second, outputs


@pytest.mark.parametrize("where", ["local", "node"])
def test_two_applies_racing_for_one_node_one_proceeds_one_names_the_holder(
    fleet: Fleet, converged: None, where: str, tmp_path: Any
) -> None:
    other = fleet.site if where == "local" else copy_site(tmp_path / "site")
    first, second, outputs = _race(fleet, (fleet.site, other))
    codes = sorted([first.returncode, second.returncode])
    assert codes == [0, 1], outputs
    winner, loser = (first, second) if first.returncode == 0 else (second, first)
    w_out, _ = outputs[0 if winner is first else 1]
    l_out, l_err = outputs[0 if loser is first else 1]
    assert _nodes(json.loads(w_out))["spark1"]["status"] == "changed"
    refused = _nodes(json.loads(l_out))["spark1"]
    assert refused["status"] == "locked"
    assert f"spark1: another apply holds the {where} lock (root@" in refused["message"]
    assert f" pid {winner.pid} since " in refused["message"], refused["message"]
    assert f"pid {winner.pid}" in l_err + l_out
    assert _sha(fleet, "spark1", NCCL) == _rendered_sha(fleet, "spark1", NCCL)
    assert fleet.lab.run("spark1", "test -e /run/sparkbase/apply.lock")[0] != 0
    assert fleet.sparkbase("plan", "--limit", "spark1").returncode == 0
