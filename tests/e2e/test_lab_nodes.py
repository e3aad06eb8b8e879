"""The emulated fleet end to end: nodes, SSH, hardware facts, isolation."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import paramiko
import pytest

from sparkbase_lab import packages
from sparkbase_lab.fleet import Lab

pytestmark = pytest.mark.end_to_end


def ok(lab: Lab, node: str, command: str) -> str:
    rc, out, err = lab.run(node, command)
    assert rc == 0, f"{node}: {command!r} -> {rc}\n{out}\n{err}"
    return out


def test_four_nodes_distinct(lab: Lab) -> None:
    assert lab.node_names == ["spark1", "spark2", "spark3", "spark4"]
    status = lab.status()
    assert [s.state for s in status] == ["up"] * 4
    assert len({s.pid for s in status}) == 4
    assert [ok(lab, n, "hostname").strip() for n in lab.node_names] == lab.node_names
    keys = [line.split()[-1] for line in lab.known_hosts_path.read_text().splitlines()]
    assert len(set(keys)) == 4
    config = lab.ssh_config_path.read_text()
    for i, name in enumerate(lab.node_names):
        assert f"Host {name}\n  HostName 127.0.0.1\n  Port {lab.port_base + i}\n" in config
    assert "StrictHostKeyChecking yes" in config


def test_files_do_not_leak_between_nodes(lab: Lab) -> None:
    ok(lab, "spark1", "echo only-on-spark1 > /root/lab-marker && mkdir -p /etc/lab-test")
    for node in ("spark2", "spark3", "spark4"):
        rc, _, _ = lab.run(node, "test -e /root/lab-marker")
        assert rc == 1
    assert not Path("/root/lab-marker").exists()
    assert not Path("/etc/lab-test").exists()
    assert ok(lab, "spark1", "cat /root/lab-marker") == "only-on-spark1\n"


def test_node_root_has_skel_dotfiles_only(lab: Lab) -> None:
    listing = set(ok(lab, "spark2", "ls -A /root").split())
    assert {".bashrc", ".profile", ".ssh"} <= listing
    assert not listing & {".pyenv", ".cargo", ".config"}


def test_factory_facts_over_openssh(lab: Lab) -> None:
    node = "spark1"
    assert ok(lab, node, "uname -r") == f"{packages.FACTORY_KERNEL}\n"
    assert ok(lab, node, "uname -m") == "aarch64\n"
    assert ok(lab, node, "getconf PAGESIZE") == "4096\n"
    assert ok(lab, node, "nproc") == "20\n"
    q = ok(lab, node, "nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader,nounits")
    assert q == f"NVIDIA GB10, {packages.FACTORY_DRIVER}, 562\n"  # idle: no lane serves on a factory node
    assert "NVIDIA GB10" in ok(lab, node, "nvidia-smi")
    assert ok(lab, node, "mokutil --sb-state") == "SecureBoot enabled\n"
    assert ok(lab, node, "mokutil --list-enrolled").count("[key ") == 1
    assert ok(lab, node, "systemctl get-default") == "graphical.target\n"
    assert ok(lab, node, "systemctl is-enabled gdm3") == "enabled\n"
    assert ok(lab, node, "systemctl is-active display-manager") == "active\n"
    # the installer's 4 KiB-page swap file, as curtin writes it into fstab
    assert "/swap.img\tnone\tswap\tsw\t0\t0\n" in ok(lab, node, "cat /etc/fstab")
    assert ok(lab, node, "swapon --show=NAME,SIZE --bytes --noheadings").split() == [
        "/swap.img", str((8 << 30) - 4096)]
    for unit in ("snapd", "dgx-dashboard", "dgx-dashboard-admin", "bluetooth", "cups-browsed",
                 "snapd.snap-repair.timer", "fwupd-refresh.timer", "cups.socket", "cups.path",
                 "snapd.socket", "snapd.seeded"):
        assert ok(lab, node, f"systemctl is-active {unit}") == "active\n", unit
    # DGX OS's governor unit is Type=idle with no RemainAfterExit: it ran at boot and exited
    assert ok(lab, node, "systemctl is-enabled nv-cpu-governor") == "enabled\n"
    assert lab.run(node, "systemctl is-active nv-cpu-governor")[:2] == (3, "inactive\n")
    assert ok(lab, node, "systemctl is-enabled fwupd") == "static\n"
    assert "[madvise]" in ok(lab, node, "cat /sys/kernel/mm/transparent_hugepage/enabled")
    assert ok(lab, node, "cat /sys/devices/system/cpu/cpu7/cpufreq/scaling_governor") == "performance\n"
    assert "quiet splash" in ok(lab, node, "cat /proc/cmdline")
    cpuinfo = ok(lab, node, "grep 'CPU part' /proc/cpuinfo").split("\n")
    assert sum("0xd85" in line for line in cpuinfo) == 10
    links = json.loads(ok(lab, node, "ip -j addr"))
    names = {link["ifname"] for link in links}
    assert {"lo", "enp1s0f0np0", "enp1s0f1np1", "enP2p1s0f0np0", "enP2p1s0f1np1", "enP7s7"} <= names
    rdma = ok(lab, node, "rdma link")
    assert "link rocep1s0f0/1 state ACTIVE physical_state LINK_UP netdev enp1s0f0np0" in rdma
    assert "roceP2p1s0f1/1" in rdma
    assert ok(lab, node, "cat /sys/class/infiniband/rocep1s0f1/ports/1/gid_attrs/types/1") == "RoCE v2\n"
    assert ok(lab, node, "ls /sys/class/infiniband/roceP2p1s0f0/device/net") == "enP2p1s0f0np0\n"
    assert "nvidia_drm" in ok(lab, node, "lsmod")
    assert ok(lab, node, "cat /sys/module/nvidia_drm/parameters/modeset") == "N\n"
    assert ok(lab, node, "test -d /sys/firmware/efi && echo uefi") == "uefi\n"
    assert ok(lab, node, "dpkg-query -W -f '${Version}' nvidia-utils-580") == packages.FACTORY_DRIVER


def test_paramiko_strict_host_keys(lab: Lab, tmp_path: Path) -> None:
    config = paramiko.SSHConfig.from_path(str(lab.ssh_config_path))
    for node in lab.node_names:
        host = config.lookup(node)
        client = paramiko.SSHClient()
        client.load_host_keys(str(lab.known_hosts_path))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect(host["hostname"], port=int(host["port"]), username=host["user"],
                       key_filename=host["identityfile"][0], look_for_keys=False, allow_agent=False)
        _, stdout, _ = client.exec_command("hostname")
        assert stdout.read().decode().strip() == node
        client.close()
    # a wrong key for spark1 is refused
    lines = lab.known_hosts_path.read_text().splitlines()
    wrong = tmp_path / "known_hosts"
    wrong.write_text(lines[0].split()[0] + " " + " ".join(lines[1].split()[1:]) + "\n")
    host = config.lookup("spark1")
    client = paramiko.SSHClient()
    client.load_host_keys(str(wrong))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.BadHostKeyException):
        client.connect(host["hostname"], port=int(host["port"]), username="root",
                       key_filename=host["identityfile"][0], look_for_keys=False, allow_agent=False)


def test_openssh_config_alias(lab: Lab) -> None:
    result = subprocess.run(["ssh", "-F", str(lab.ssh_config_path), "spark3", "true"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    result = subprocess.run(["ssh", "-F", str(lab.ssh_config_path), "spark3", "exit 42"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 42


def test_sysctl_is_per_node(lab: Lab) -> None:
    machine = Path("/proc/sys/vm/swappiness").read_text()
    ok(lab, "spark1", "sysctl -w vm.swappiness=7")
    assert ok(lab, "spark1", "cat /proc/sys/vm/swappiness") == "7\n"
    assert ok(lab, "spark1", "sysctl -n vm.swappiness") == "7\n"
    assert ok(lab, "spark3", "sysctl -n vm.swappiness") == "60\n"
    assert Path("/proc/sys/vm/swappiness").read_text() == machine
    rc, _, _ = lab.run("spark1", "sysctl -w kernel.pid_max=40000")
    assert rc != 0, "non-emulated sysctls are read-only in a node"


def test_apt_sees_only_the_lab_repository(lab: Lab) -> None:
    ok(lab, "spark1", "apt-get update -q")
    policy = ok(lab, "spark1", "apt-cache policy nccl-site-ring4")
    assert "file:/srv/sparkbase-lab/apt" in policy
    rc, _, _ = lab.run("spark1", "apt-cache show openssh-server 2>/dev/null | grep -q deb.debian.org")
    assert rc != 0
