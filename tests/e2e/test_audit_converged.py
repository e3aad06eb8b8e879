"""Audit and preflight on a converged fleet: this module's own lab (ports 2481…), a clone of
the run's converged image (`sparkbase apply --allow-reboot --yes` from the factory state, see
fleets.py), then drift injected by hand, one node each."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleets import NODES, ConvergedImage, clone_fleet
from ports import port_base

from sparkbase.cli.main import main
from sparkbase_lab import faults
from sparkbase_lab.fleet import Lab

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_AUDIT_PORT_BASE", 2481)


@pytest.fixture(scope="module")
def converged(tmp_path_factory: pytest.TempPathFactory, converged_image: ConvergedImage) -> Iterator[Lab]:
    yield from clone_fleet(converged_image, tmp_path_factory.mktemp("audit-lab"), PORT_BASE)


def audit(site: Path, lab: Lab, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["audit", "--site", str(site), "--lab-dir", str(lab.dir), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def failing(data: dict[str, Any]) -> set[tuple[str, str]]:
    nodes = data["nodes"]
    assert isinstance(nodes, list)
    return {(n["node"], c["id"]) for n in nodes for c in n["checks"] if c["status"] == "fail"}


def test_audit_is_clean_after_apply(
    converged: Lab, site_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, data = audit(site_copy, converged, capsys)
    assert failing(data) == set()
    assert code == 0 and data["status"] == "clean"


def test_preflight_qualifies_site_lanes(
    converged: Lab, site_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # speed is measured by bench/run.py, not asserted here (shared, noisy machines)
    # no lane runs on this fleet: the gate before launch qualifies the hosts; without
    # --before-launch each lane is refused as not serving on every node
    for lane in ("dsv41-flash", "glm-nvfp4", "glm-fp8"):
        code = main(["preflight", lane, "--before-launch", "--site", str(site_copy),
                     "--lab-dir", str(converged.dir)])
        out = capsys.readouterr().out
        assert code == 0, out
        assert f"preflight {lane}: qualified" in out
    assert main(["preflight", "glm-fp8", "--site", str(site_copy), "--lab-dir", str(converged.dir)]) == 1
    out = capsys.readouterr().out
    assert all(f"{node}: runtime.running.glm-fp8: " in out for node in NODES)


def test_preflight_still_refuses_the_rejected_variant(
    converged: Lab, site_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["preflight", "ds41f-ring4", "--site", str(site_copy), "--lab-dir", str(converged.dir)]) == 1
    out = capsys.readouterr().out
    assert "lane: lane ds41f-ring4 is disabled" in out
    assert "spark1: kernel.release: expected 7.0.0-1019-nvidia-64k, observed 6.17.0-1032-nvidia" in out


def test_hand_drift_is_named_on_the_right_node(
    converged: Lab, site_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ok = converged.run
    assert ok("spark1", "sed -i s/NCCL_IB_MERGE_NICS=0/NCCL_IB_MERGE_NICS=1/ /etc/nccl.conf")[0] == 0
    assert ok("spark2", "sysctl -w vm.min_free_kbytes=67584")[0] == 0
    faults.inject(converged, "spark3", "gid-moved")
    faults.inject(converged, "spark4", "gpu-latch")
    try:
        code, data = audit(site_copy, converged, capsys)
        gate = main(["preflight", "glm-fp8", "--site", str(site_copy), "--lab-dir", str(converged.dir)])
        refusals = capsys.readouterr().out
    finally:
        faults.clear(converged, "spark3", "gid-moved")
        faults.clear(converged, "spark4", "gpu-latch")
        ok("spark1", "sed -i s/NCCL_IB_MERGE_NICS=1/NCCL_IB_MERGE_NICS=0/ /etc/nccl.conf")
        ok("spark2", "sysctl -w vm.min_free_kbytes=1048576")
    assert code == 1
    bad = failing(data)
    assert ("spark1", "nccl.conf") in bad
    assert ("spark2", "sysctl.vm.min_free_kbytes") in bad
    assert {
        ("spark3", f"fabric.gid.{hca}")
        for hca in ("rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1")
    } <= bad
    assert ("spark4", "gpu.clock") in bad
    assert {node for node, _ in bad} == {"spark1", "spark2", "spark3", "spark4"}
    assert all(check.startswith(("nccl.conf", "sysctl.", "fabric.gid.", "gpu.clock")) for _, check in bad)
    nccl = next(
        c
        for n in data["nodes"]
        if n["node"] == "spark1"
        for c in n["checks"]
        if c["id"] == "nccl.conf"
    )
    assert nccl["observed"] == "NCCL_IB_MERGE_NICS=1 (as NCCL reads the file: the first line of a key wins)"
    assert nccl["expected"] == "NCCL_IB_MERGE_NICS=0"
    assert gate == 1 and "spark4: gpu.clock: expected >= 1000 MHz" in refusals
    code, _ = audit(site_copy, converged, capsys)
    assert code == 0, "the drift was not undone"


def test_a_stale_second_address_from_another_netplan_file_fails_the_audit(
    converged: Lab, site_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """netplan merges address lists across its files: an older file of the site's giving a
    fabric port another address leaves the port with two after `netplan apply`. The audit
    names the address the port was not given (it only checked the wanted one was there)."""
    ok = converged.run
    stale = "network:\n  version: 2\n  ethernets:\n    enp1s0f0np0:\n      addresses: [10.99.0.5/24]\n"
    assert ok("spark2", f"printf '{stale}' >/etc/netplan/50-old.yaml && netplan apply")[0] == 0
    try:
        code, data = audit(site_copy, converged, capsys)
    finally:
        ok("spark2", "rm -f /etc/netplan/50-old.yaml && netplan apply")
    assert code == 1
    # the port's RDMA device may now hold the stale address at the GID index too (as a real
    # ConnectX-7 lists one RoCE GID per address): that is the same fault, seen from the HCA
    assert ("spark2", "fabric.link.enp1s0f0np0") in failing(data)
    assert failing(data) <= {("spark2", "fabric.link.enp1s0f0np0"), ("spark2", "fabric.gid.rocep1s0f0")}
    link = next(c for n in data["nodes"] if n["node"] == "spark2" for c in n["checks"]
                if c["id"] == "fabric.link.enp1s0f0np0")
    assert "(not given: 10.99.0.5/24)" in link["observed"]
    code, _ = audit(site_copy, converged, capsys)
    assert code == 0, "the stale address was not undone"


def test_grub_reboot_and_a_foreign_fstab_swap_are_named(
    converged: Lab, site_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A one-shot GRUB entry to another kernel (the next reboot changes kernel) and another
    baseline's swap file put back in /etc/fstab are each named on their node."""
    ok = converged.run
    other = "Advanced options for Ubuntu>Ubuntu, with Linux 6.17.0-1008-nvidia"
    assert ok("spark1", f"grub-reboot '{other}'")[0] == 0
    assert ok("spark2", "echo '/swap-64k.img none swap sw 0 0' >> /etc/fstab")[0] == 0
    try:
        code, data = audit(site_copy, converged, capsys)
    finally:
        ok("spark1", "grub-editenv /boot/grub/grubenv unset next_entry")
        ok("spark2", "sed -i '\\|^/swap-64k.img |d' /etc/fstab")
    assert code == 1
    assert failing(data) == {("spark1", "boot.grub_default"), ("spark2", "memory.swap.foreign_fstab")}
    checks = {(n["node"], c["id"]): c for n in data["nodes"] for c in n["checks"]}
    grub = checks[("spark1", "boot.grub_default")]
    assert grub["severity"] == "error" and "grub-reboot" in grub["observed"]
    assert "grub-editenv /boot/grub/grubenv unset next_entry" in grub["fix"]
    swap = checks[("spark2", "memory.swap.foreign_fstab")]
    assert swap["severity"] == "warn" and "/swap-64k.img" in swap["observed"]
    code, _ = audit(site_copy, converged, capsys)
    assert code == 0, "the drift was not undone"


def test_a_path_in_another_paths_subnet_is_named(
    converged: Lab, site_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """spark2's enp1s0f0np0 carries the spark2-spark3 path (10.23.1.0/24); given an address
    in the spark3-spark4 path's subnet instead, its netplan, address and GID are named."""
    ok = converged.run
    netplan = "/etc/netplan/60-sparkbase-fabric.yaml"
    assert ok("spark2", f"sed -i 's#10.23.1.2/24#10.34.1.2/24#' {netplan} && netplan apply")[0] == 0
    try:
        code, data = audit(site_copy, converged, capsys)
    finally:
        ok("spark2", f"sed -i 's#10.34.1.2/24#10.23.1.2/24#' {netplan} && netplan apply")
    assert code == 1
    assert {(node, check) for node, check in failing(data) if check.startswith("fabric.")} == {
        ("spark2", "fabric.netplan"),
        ("spark2", "fabric.link.enp1s0f0np0"),
        ("spark2", "fabric.gid.rocep1s0f0"),
    }
    checks = {(n["node"], c["id"]): c for n in data["nodes"] for c in n["checks"]}
    gid = checks[("spark2", "fabric.gid.rocep1s0f0")]
    assert "10.34.1.2 (outside 10.23.1.0/24)" in gid["observed"]
    assert "10.23.1.2 in 10.23.1.0/24" in gid["expected"]
    _, data = audit(site_copy, converged, capsys)
    left = [check for _, check in failing(data) if check.startswith("fabric.")]
    assert not left, "the drift was not undone"


def test_audit_against_another_baseline_names_the_stamp(
    converged: Lab, site_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`audit --baseline` judges the --limit nodes against that baseline (as `apply
    --baseline` would converge them): a node still on the inventory's is drift there."""
    argv = ["audit", "--site", str(site_copy), "--lab-dir", str(converged.dir), "--format", "json",
            "--baseline", "ds41f-stock-pages-262k", "--limit", "spark1"]
    code = main(argv)
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [n["node"] for n in data["nodes"]] == ["spark1"]
    bad = failing(data)
    assert ("spark1", "stamp") in bad and ("spark1", "kernel.release") in bad
    assert ("spark1", "stamp.assignment") not in bad  # the stamp names the inventory's baseline
    # judged on the NCCL settings of the profile's one shape, the triangle's (8 channels, no
    # switchless setting), against the site's ring4 file the node carries
    conf = next(c for n in data["nodes"] for c in n["checks"] if c["id"] == "nccl.conf")
    assert conf["status"] == "fail" and "NCCL_MAX_NCHANNELS=8" in conf["expected"]
    assert "NCCL_SWITCHLESS_BIDIRECTIONAL" not in conf["expected"]
