"""Faults change only the node's emulated state, show in what the node reports, and clear."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkbase_lab import faults, procs
from sparkbase_lab.fleet import Lab

pytestmark = pytest.mark.end_to_end

NETPLAN = """network:
  version: 2
  ethernets:
    enp1s0f0np0:
      mtu: 9000
      addresses: [192.168.100.11/24]
"""


def ok(lab: Lab, node: str, command: str) -> str:
    rc, out, err = lab.run(node, command)
    assert rc == 0, f"{node}: {command!r} -> {rc}\n{out}\n{err}"
    return out


def test_netplan_gids_and_gid_moved(lab: Lab) -> None:
    node = "spark1"
    ok(lab, node, f"mkdir -p /etc/netplan && cat > /etc/netplan/40-fabric.yaml <<'EOF'\n{NETPLAN}EOF\n"
                  "netplan apply")
    port = "/sys/class/infiniband/rocep1s0f0/ports/1"
    assert ok(lab, node, f"cat {port}/gids/3") == "0000:0000:0000:0000:0000:ffff:c0a8:640b\n"
    assert ok(lab, node, f"cat {port}/gid_attrs/types/3") == "RoCE v2\n"
    assert ok(lab, node, "cat /sys/class/net/enp1s0f0np0/mtu") == "9000\n"
    assert "192.168.100.11/24" in ok(lab, node, "ip -br addr show dev enp1s0f0np0")
    faults.inject(lab, node, "gid-moved")
    lab.run(node, "true")
    assert ok(lab, node, f"cat {port}/gids/5") == "0000:0000:0000:0000:0000:ffff:c0a8:640b\n"
    assert ok(lab, node, f"cat {port}/gids/3") == "0000:0000:0000:0000:0000:0000:0000:0000\n"
    faults.clear(lab, node, "gid-moved")
    assert ok(lab, node, f"cat {port}/gid_attrs/types/3") == "RoCE v2\n"


def test_link_down(lab: Lab) -> None:
    node = "spark1"
    faults.inject(lab, node, "link-down", "roceP2p1s0f1")
    try:
        rdma = ok(lab, node, "rdma link")
        assert "link roceP2p1s0f1/1 state DOWN physical_state DISABLED netdev enP2p1s0f1np1" in rdma
        assert ok(lab, node, "cat /sys/class/infiniband/roceP2p1s0f1/ports/1/state") == "1: DOWN\n"
        assert ok(lab, node, "cat /sys/class/net/enP2p1s0f1np1/operstate") == "down\n"
        assert "link rocep1s0f0/1 state ACTIVE" in rdma
    finally:
        faults.clear(lab, node, "link-down")
    assert "DOWN" not in ok(lab, node, "rdma link")


def test_gpu_latch_and_governor(lab: Lab) -> None:
    node = "spark1"
    faults.inject(lab, node, "gpu-latch")
    faults.inject(lab, node, "governor")
    try:
        q = ok(lab, node, "nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits")
        assert int(q.split(",")[0]) < 1000
        assert ok(lab, node, "cat /sys/devices/system/cpu/cpu19/cpufreq/scaling_governor") == "powersave\n"
        assert {"gpu-latch", "governor"} <= set(next(s for s in lab.status() if s.name == node).faults)
    finally:
        faults.clear(lab, node, "gpu-latch")
        faults.clear(lab, node, "governor")
    # idle (the default): clocked down, with NVML's GPU-idle reason; busy: at speed
    query = "--query-gpu=clocks.sm,utilization.gpu,clocks_event_reasons.active --format=csv,noheader,nounits"
    q = ok(lab, node, f"nvidia-smi {query}")
    assert q == "562, 0, 0x0000000000000001\n"
    faults.inject(lab, node, "gpu-busy")
    try:
        q = ok(lab, node, "nvidia-smi --query-gpu=clocks.sm,utilization.gpu --format=csv,noheader,nounits")
        assert q == "2418, 97\n"
    finally:
        faults.clear(lab, node, "gpu-busy")
    assert ok(lab, node, "cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor") == "performance\n"


def test_unreachable_and_hang(lab: Lab) -> None:
    node = "spark1"
    port = lab.port(node)
    faults.inject(lab, node, "unreachable")
    try:
        _wait(lambda: not procs.port_answers(port))
        rc, _, err = lab.run(node, "true")
        assert rc == 255 and "refused" in err
        assert next(s for s in lab.status() if s.name == node).state == "unreachable"
    finally:
        faults.clear(lab, node, "unreachable")
    _wait(lambda: procs.ssh_banner(port))
    faults.inject(lab, node, "hang")
    try:
        _wait(lambda: not procs.ssh_banner(port, 0.5))
        assert procs.port_answers(port), "a hung node accepts TCP but never greets"
        with pytest.raises(subprocess.TimeoutExpired):
            lab.run(node, "true", timeout=3)
    finally:
        faults.clear(lab, node, "hang")
    _wait(lambda: procs.ssh_banner(port))
    assert ok(lab, node, "hostname") == "spark1\n"


def test_faults_never_touch_the_machine(lab: Lab) -> None:
    assert not Path("/sys/class/infiniband/rocep1s0f0").exists()
    governor = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    before = governor.read_text() if governor.exists() else None
    faults.inject(lab, "spark4", "governor")
    faults.clear(lab, "spark4", "governor")
    assert (governor.read_text() if governor.exists() else None) == before


def _wait(condition: object, timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")
