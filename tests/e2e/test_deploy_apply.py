"""End to end: converge a factory-fresh emulated fleet with `sparkbase apply`, and more.

The run's converged image (fleets.py: a real `apply --allow-reboot --yes --json` of a
factory-fresh fleet, once per run) gives this module its first apply's report and its own
independent clone of the converged disks (own lab dir and ports); the tests run against that
clone, in file order: plan/drift, plain pyinfra, locks, the variant round trip.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleets import ConvergedImage, Fleet, clone_fleet
from ports import port_base

from sparkbase.deploy.locks import Owner, local_locks
from sparkbase.facts.parsers.packages import parse_dpkg_query
from sparkbase.facts.parsers.secure_boot import normalise_serial, parse_mok_certificates
from sparkbase.model.site import load_site
from sparkbase.policy.foreign import foreign_for
from sparkbase.render import node_files

pytestmark = pytest.mark.end_to_end

REPO = Path(__file__).resolve().parents[2]
PORT_BASE = port_base("SPARKBASE_TEST_DEPLOY_PORT_BASE", 2651)
NODES = ["spark1", "spark2", "spark3", "spark4"]
SITE_KERNEL = "6.17.0-1032-nvidia"
VARIANT_KERNEL = "7.0.0-1019-nvidia-64k"
SITE_BASELINE = "site-stock-6.17-4k"
VARIANT = "ds41f-7x-64k"
FAN = "dgx-fan-control.service"
MOK_DIR = "/var/lib/shim-signed/mok"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, converged_image: ConvergedImage) -> Iterator[Fleet]:
    """A clone of the converged image, with a copy of the site (and local state) it was converged with."""
    base = tmp_path_factory.mktemp("deploy")
    site = base / "site"
    shutil.copytree(converged_image.site, site)
    for lab in clone_fleet(converged_image, base / "lab", PORT_BASE):
        yield Fleet(lab, site)


@pytest.fixture(scope="module")
def converged(converged_image: ConvergedImage) -> dict[str, Any]:
    """The first apply of the factory-fresh fleet (with reboots), as its JSON report."""
    return converged_image.report


def _sha256_on(fleet: Fleet, node: str, path: str) -> str:
    return fleet.sh(node, f"sha256sum {path}").split()[0]


def _installed(fleet: Fleet, node: str, names: list[str]) -> dict[str, str]:
    """Which of `names` dpkg has installed on `node` (name -> version)."""
    fmt = "${Package}\t${Version}\t${db:Status-Abbrev}\n"
    _, out, _ = fleet.lab.run(node, f"dpkg-query -W -f='{fmt}' {' '.join(names)}")
    return parse_dpkg_query(out)


def _unit(fleet: Fleet, node: str, unit: str) -> tuple[str, str]:
    """(`systemctl is-enabled`, `systemctl is-active`) of a unit; exit statuses ignored."""
    enabled = fleet.lab.run(node, f"systemctl is-enabled {unit}")[1].strip()
    active = fleet.lab.run(node, f"systemctl is-active {unit}")[1].strip()
    return enabled, active


def _audit(fleet: Fleet, node: str) -> tuple[int, dict[str, dict[str, Any]]]:
    """`sparkbase audit --limit NODE --format json`: exit status and the node's checks by id."""
    done = fleet.sparkbase("audit", "--limit", node, "--format", "json")
    report = json.loads(done.stdout)
    return done.returncode, {c["id"]: c for c in report["nodes"][0]["checks"]}


def test_factory_fleet_converges_then_second_apply_changes_nothing(fleet: Fleet,
                                                                   converged: dict[str, Any]) -> None:
    assert [n["status"] for n in converged["nodes"]] == ["changed"] * 4
    assert all(n["rebooted"] for n in converged["nodes"])
    site = load_site(fleet.site)
    for node in NODES:
        assert fleet.sh(node, "uname -r").strip() == SITE_KERNEL
        assert fleet.sh(node, "getconf PAGESIZE").strip() == "4096"
        for file in node_files(site, node):
            assert _sha256_on(fleet, node, file.path) == hashlib.sha256(file.content.encode()).hexdigest()
            mode = fleet.sh(node, f"stat -c %a {file.path}").strip()
            assert int(mode, 8) == file.mode, file.path
    again = fleet.sparkbase("apply", "--yes", "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert [n["status"] for n in report["nodes"]] == ["unchanged"] * 4
    assert not [op for n in report["nodes"] for op in n["operations"] if op["status"] != "unchanged"]


def test_plan_is_clean_then_shows_a_hand_edit_as_a_diff(fleet: Fleet, converged: dict[str, Any]) -> None:
    clean = fleet.sparkbase("plan")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    # and a Latin-1 byte: the diff still shows every line (it used to come out empty)
    fleet.sh("spark3", "echo NCCL_IB_MERGE_NICS=1 >> /etc/nccl.conf && "
                       "printf '# caf\\351\\n' >> /etc/nccl.conf")
    drift = fleet.sparkbase("plan", "--json")
    assert drift.returncode == 1
    assert "Traceback" not in drift.stderr, drift.stderr
    nodes = {n["node"]: n for n in json.loads(drift.stdout)["nodes"]}
    assert [n for n, r in nodes.items() if r["status"] != "unchanged"] == ["spark3"]
    nccl = next(op for op in nodes["spark3"]["operations"] if op["name"].startswith("/etc/nccl.conf "))
    assert nccl["status"] == "would change"
    assert "-NCCL_IB_MERGE_NICS=1" in nccl["diff"] and "-# caf\ufffd" in nccl["diff"], nccl["diff"]
    assert not nodes["spark3"]["reboot_required"]
    text = fleet.sparkbase("plan", "--limit", "spark3")
    assert "-NCCL_IB_MERGE_NICS=1" in text.stdout
    fixed = fleet.sparkbase("apply", "--limit", "spark3", "--yes")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "NCCL_IB_MERGE_NICS=1" not in fleet.sh("spark3", "cat /etc/nccl.conf")


def test_plain_pyinfra_runs_the_same_deploy(fleet: Fleet, converged: dict[str, Any]) -> None:
    fleet.sh("spark4", "echo '# hand edit' >> /etc/nccl.conf && sysctl -w vm.max_map_count=65530")
    env = {**os.environ, "SPARKBASE_SITE": str(fleet.site), "SPARKBASE_LAB_DIR": str(fleet.lab.dir)}
    pyinfra = Path(sys.executable).with_name("pyinfra")
    run = subprocess.run([str(pyinfra), "-y", str(REPO / "deploys" / "inventory.py"),
                          str(REPO / "deploys" / "baseline.py")],
                         capture_output=True, text=True, env=env, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "# hand edit" not in fleet.sh("spark4", "cat /etc/nccl.conf")
    assert fleet.sh("spark4", "sysctl -n vm.max_map_count").strip() == "1048576"
    assert fleet.sparkbase("plan").returncode == 0


def test_a_second_apply_on_a_locked_node_refuses(fleet: Fleet, converged: dict[str, Any]) -> None:
    other = Owner(user="someone", host="elsewhere", pid=4242)
    fleet.sh("spark1", f"mkdir -p /run/sparkbase/apply.lock && echo '{other.json()}' > "
                       "/run/sparkbase/apply.lock/owner")
    try:
        refused = fleet.sparkbase("apply", "--limit", "spark1", "--yes")
        assert refused.returncode == 1
        said = refused.stderr + refused.stdout
        assert "another apply holds the node lock (someone@elsewhere pid 4242" in said
    finally:
        fleet.sh("spark1", "rm -rf /run/sparkbase/apply.lock")
    with local_locks(fleet.site / ".sparkbase" / "locks", ["spark1"], Owner()):
        local = fleet.sparkbase("apply", "--limit", "spark1", "--yes")
        assert local.returncode == 1
        assert "another apply holds the local lock" in local.stdout + local.stderr
    assert fleet.sparkbase("apply", "--limit", "spark1", "--yes").returncode == 0
    assert fleet.lab.run("spark1", "test -e /run/sparkbase/apply.lock")[0] != 0  # released


def test_variant_round_trip_on_one_node(fleet: Fleet, converged: dict[str, Any]) -> None:
    move = ("apply", "--limit", "spark2", "--baseline", "ds41f-7x-64k", "--allow-reboot", "--yes")
    refused = fleet.sparkbase(*move)
    assert refused.returncode == 1
    assert "breaks the site contract" in refused.stderr
    assert fleet.sh("spark2", "uname -r").strip() == SITE_KERNEL
    fleet.console("spark2")  # a person at the console enrols the MOK at the apply's reboot
    moved = fleet.sparkbase(*move, "--override-policy", "e2e: variant trial on spark2", "--json")
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert "PRIVATE KEY" not in moved.stdout + moved.stderr
    log_text = (fleet.site / ".sparkbase" / "overrides.log").read_text()
    log = [json.loads(line) for line in log_text.splitlines()]
    assert log[-1]["kind"] == "apply-override" and log[-1]["nodes"] == ["spark2"]
    assert log[-1]["baseline"] == "ds41f-7x-64k"
    assert log[-1]["reason"] == "e2e: variant trial on spark2" and log[-1]["refusals"]
    assert fleet.sh("spark2", "uname -r").strip() == VARIANT_KERNEL
    assert fleet.sh("spark2", "getconf PAGESIZE").strip() == "65536"
    assert fleet.sh("spark2", "mokutil --sb-state").strip() == "SecureBoot enabled"
    # kmod's sig_key is the signing certificate's serial: find that enrolled MOK by it
    sig = fleet.sh("spark2", f"modinfo -k {VARIANT_KERNEL} -F sig_key nvidia_uvm").strip()
    enrolled = parse_mok_certificates(fleet.sh("spark2", "mokutil --list-enrolled"))
    signer = next(cert for cert in enrolled if cert.serial == normalise_serial(sig))
    pinned = load_site(fleet.site).baselines["ds41f-7x-64k"].secure_boot.mok_fingerprint
    assert signer.fingerprint == (pinned or signer.fingerprint)
    pinned = signer.fingerprint
    # the memory saver is the patched nvidia-uvm: the recipe's srcversion, packing on
    saver = load_site(fleet.site).baselines["ds41f-7x-64k"].memory.memory_saver
    assert saver is not None
    assert fleet.sh("spark2", "cat /sys/module/nvidia_uvm/srcversion").strip() == saver.srcversion
    packing = "/sys/module/nvidia_uvm/parameters/uvm_pack_sysmem_leaf_tables"
    assert fleet.sh("spark2", f"cat {packing}").strip() == "Y"
    assert fleet.sh("spark2", "stat -c %a /var/lib/shim-signed/mok/MOK.priv").strip() == "600"
    swaps = fleet.sh("spark2", "swapon --show=NAME,SIZE --bytes --noheadings").split()
    assert swaps == ["/swap-64k.img", str(16 * 1024**3 - 65536)]  # the kernel counts all but the header page
    magic = fleet.sh("spark2", "dd if=/swap-64k.img bs=1 skip=65526 count=10 2>/dev/null")
    assert magic == "SWAPSPACE2"
    for other in ("spark1", "spark3", "spark4"):
        assert fleet.sh(other, "uname -r").strip() == SITE_KERNEL
    site = load_site(fleet.site)
    # on the variant, the site's pins are retired (its kernel once the variant's runs)
    assert _installed(fleet, "spark2", foreign_for(site, VARIANT).package_names()) == {}
    variant_pins = {pin.name for pin in site.baselines[VARIANT].packages()}
    # what the site baseline would retire that the variant installed (not stock-pages' kernel)
    leftovers = [name for name in foreign_for(site, SITE_BASELINE).package_names() if name in variant_pins]
    assert set(_installed(fleet, "spark2", leftovers)) == set(leftovers)
    assert _unit(fleet, "spark2", FAN) == ("enabled", "active")
    same = fleet.sparkbase("apply", "--limit", "spark2", "--baseline", "ds41f-7x-64k", "--yes",
                           "--override-policy", "e2e: idempotence check", "--json")
    assert same.returncode == 0
    assert json.loads(same.stdout)["nodes"][0]["status"] == "unchanged"
    _moving_back_leaves_no_trace_of_the_variant(fleet, pinned, leftovers)


def _moving_back_leaves_no_trace_of_the_variant(fleet: Fleet, mok: str, leftovers: list[str]) -> None:
    """spark2 (on the variant) moves back: as if it had always been on the site baseline."""
    shown = fleet.sparkbase("plan", "--limit", "spark2")
    assert shown.returncode == 1
    # one per section that has one (the variant's NCCL is built into its image: no package)
    for package in ("nvidia-kernel-source-580-open", "dgx-spark-fan-control"):
        assert f"~ retire: unhold and purge {package} (pinned only by other baselines or earlier versions)" \
            in shown.stdout
    assert f"~ retire: {FAN} disabled and stopped" in shown.stdout
    assert f"~ retire: MOK key directory {MOK_DIR}" in shown.stdout
    deferred = f". retire: unhold and purge the {VARIANT_KERNEL} kernel packages"
    assert deferred in shown.stdout and f"deferred: running {VARIANT_KERNEL}" in shown.stdout
    back = fleet.sparkbase("apply", "--limit", "spark2", "--allow-reboot", "--yes", "--json")
    assert back.returncode == 0, back.stdout + back.stderr
    ops = json.loads(back.stdout)["nodes"][0]["operations"]
    kernel_step = f"retire: unhold and purge the {VARIANT_KERNEL}"
    purged = [op["status"] for op in ops if op["name"].startswith(kernel_step)]
    assert purged == ["unchanged", "changed"]  # deferred while 7.x ran, done after the reboot
    # the shipped variant pins no MOK fingerprint (site to confirm): no enrolled key of its is
    # known, so there is none to report as kept; the enrolled key itself stays (below)
    assert [op for op in ops if op["kind"] == "mok-kept"] == []
    assert fleet.sh("spark2", "uname -r").strip() == SITE_KERNEL
    assert fleet.sh("spark2", "getconf PAGESIZE").strip() == "4096"
    assert "/swap-64k.img" not in fleet.sh("spark2", "swapon --show=NAME --noheadings").split()
    assert fleet.lab.run("spark2", "test -e /swap-64k.img")[0] != 0  # sparkbase made it: removed
    assert _installed(fleet, "spark2", leftovers) == {}
    assert fleet.sh("spark2", "apt-mark showhold").split() == sorted(
        p.name for p in load_site(fleet.site).baselines[SITE_BASELINE].packages())
    enabled, active = _unit(fleet, "spark2", FAN)
    assert enabled != "enabled" and active != "active"
    assert "dgx-spark-memory-saver" not in fleet.sh("spark2", "dkms status")
    # the source tree sparkbase placed from the pinned tarball goes with its DKMS build
    assert fleet.lab.run("spark2", "test -e /usr/src/dgx-spark-memory-saver-0.2.0")[0] != 0
    assert fleet.lab.run("spark2", "ls /lib/modules/*/updates/dkms/nvidia-uvm.ko")[0] != 0
    # the stock nvidia-uvm is back: no packing parameter
    packing = "/sys/module/nvidia_uvm/parameters/uvm_pack_sysmem_leaf_tables"
    assert fleet.lab.run("spark2", f"test -e {packing}")[0] != 0
    assert fleet.lab.run("spark2", f"test -e {MOK_DIR}")[0] != 0
    assert mok in fleet.sh("spark2", "mokutil --list-enrolled").lower()  # firmware state is kept
    assert f"Linux {VARIANT_KERNEL}" not in fleet.sh("spark2", "cat /boot/grub/grub.cfg")
    status, checks = _audit(fleet, "spark2")
    assert status == 0
    assert checks["packages.foreign"]["status"] == "pass"
    assert [c["id"] for c in checks.values() if c["status"] == "fail"] == []
    again = fleet.sparkbase("apply", "--limit", "spark2", "--yes", "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    node = json.loads(again.stdout)["nodes"][0]
    assert node["status"] == "unchanged"
    assert [op["name"] for op in node["operations"] if op["status"] != "unchanged"] == []
    assert fleet.sparkbase("plan").returncode == 0


def test_a_hand_installed_foreign_package_is_warned_and_kept(fleet: Fleet,
                                                             converged: dict[str, Any]) -> None:
    """sparkbase did not install it, so it never purges it: apply keeps it and says so."""
    tools = f"linux-tools-{VARIANT_KERNEL}"  # a package only the variant pins
    fleet.sh("spark3", f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q {tools} && "
                       f"apt-mark hold {tools}")
    status, checks = _audit(fleet, "spark3")
    assert status == 0  # a warning never blocks
    foreign = checks["packages.foreign"]
    assert (foreign["status"], foreign["severity"]) == ("fail", "warn")
    assert foreign["observed"].startswith(f"{tools} ")
    applied = fleet.sparkbase("apply", "--limit", "spark3", "--yes", "--json")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    ops = json.loads(applied.stdout)["nodes"][0]["operations"]
    kept = next(op for op in ops if op["kind"] == "packages-kept" and op["section"] == "kernel")
    assert kept["reason"].startswith(f"kept: {tools} ") and "not installed by sparkbase" in kept["reason"]
    assert set(_installed(fleet, "spark3", [tools])) == {tools}
    fleet.sh("spark3", f"apt-mark unhold {tools} && "
                       f"DEBIAN_FRONTEND=noninteractive apt-get purge -y -q {tools}")
