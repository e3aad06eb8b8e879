"""Kernel installs, GRUB, reboots, fallback, DKMS under Secure Boot, swap page sizes.

Node ownership within the session lab: spark2 = kernel/page size/swap, spark3 = DKMS and
MOK, spark4 = fallbacks.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from sparkbase_lab import boot, console, faults, packages
from sparkbase_lab.fleet import Lab

pytestmark = pytest.mark.end_to_end

K64 = "7.0.0-1019-nvidia-64k"
K32 = "6.17.0-1032-nvidia"


def ok(lab: Lab, node: str, command: str) -> str:
    rc, out, err = lab.run(node, command)
    assert rc == 0, f"{node}: {command!r} -> {rc}\n{out}\n{err}"
    return out


def reboot_over_ssh(lab: Lab, node: str) -> None:
    """Reboot as pyinfra's server.reboot does: `reboot` over SSH, then reconnect."""
    before = lab.booted_at(node)
    started = time.monotonic()
    result = subprocess.run(lab.ssh_argv(node, ["reboot"]), capture_output=True, timeout=30)
    assert result.returncode in (0, 255), result.stderr
    assert time.monotonic() - started < 10, "the SSH session issuing reboot must not hang"
    lab.wait_booted(node, after=before, timeout=60)


def set_grub_default(lab: Lab, node: str, release: str) -> None:
    entry = boot.entry_path(release)
    ok(lab, node, f"sed -i 's/^GRUB_DEFAULT=.*/GRUB_DEFAULT=\"{entry}\"/' /etc/default/grub && update-grub")


def test_kernel_install_and_reboot_changes_release_and_page_size(lab: Lab) -> None:
    node = "spark2"
    kver = packages.KERNELS[K64]
    ok(lab, node, "apt-get update -q")
    ok(lab, node, f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                  f"linux-image-{K64}={kver} linux-headers-{K64}={kver} "
                  f"linux-modules-nvidia-580-open-{K64}={packages.VARIANT_DRIVER}-0ubuntu1+{kver} "
                  f"nvidia-utils-580={packages.VARIANT_DRIVER} grub-kho-off=1.0-1")
    set_grub_default(lab, node, K64)
    cfg = ok(lab, node, "cat /boot/grub/grub.cfg")
    assert f"menuentry 'Ubuntu, with Linux {K64}'" in cfg and "kho=off" in cfg
    assert ok(lab, node, "uname -r") == f"{packages.FACTORY_KERNEL}\n", "no change before reboot"
    reboot_over_ssh(lab, node)
    assert ok(lab, node, "uname -r") == f"{K64}\n"
    assert ok(lab, node, "getconf PAGESIZE") == "65536\n"
    assert K64 in ok(lab, node, "uname -a")
    assert "kho=off" in ok(lab, node, "cat /proc/cmdline")
    smi = ok(lab, node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    assert smi == f"{packages.VARIANT_DRIVER}\n"
    assert [s.release for s in lab.status() if s.name == node] == [K64]


def test_driver_mismatch_fails_like_nvml(lab: Lab) -> None:
    node = "spark4"
    ok(lab, node, "apt-get update -q && apt-get install -y -q --allow-downgrades "
                  f"nvidia-utils-580={packages.SITE_DRIVER}")
    rc, out, _ = lab.run(node, "nvidia-smi")
    assert rc == 18 and "Driver/library version mismatch" in out
    ok(lab, node, f"apt-get install -y -q --allow-downgrades nvidia-utils-580={packages.FACTORY_DRIVER}")


def test_swap_header_page_size_must_match(lab: Lab) -> None:
    node = "spark2"
    # the module's kernel-install test booted spark2 into the 64 KiB kernel; never skip quietly
    assert ok(lab, node, "getconf PAGESIZE").strip() == "65536", (
        "needs spark2 on the 64k kernel: run the whole module (its kernel-install test boots it)")
    ok(lab, node, "fallocate -l 64M /swap4k && chmod 600 /swap4k && mkswap -p 4096 /swap4k")
    rc, _, err = lab.run(node, "swapon /swap4k")
    assert rc == 255 and "swapspace has wrong page size" in err
    ok(lab, node, "fallocate -l 64M /swapfile && chmod 600 /swapfile && mkswap -p 65536 /swapfile")
    ok(lab, node, "swapon /swapfile")
    shown = ok(lab, node, "swapon --show=NAME,TYPE,SIZE --bytes --noheadings").split()
    # the kernel swaps on every page but the header page: SIZE is the file's size less one page
    assert shown == ["/swapfile", "file", str((64 << 20) - 65536)]
    ok(lab, node, "echo '/swapfile none swap sw 0 0' >> /etc/fstab")
    reboot_over_ssh(lab, node)
    assert "/swapfile" in ok(lab, node, "swapon --show")


def test_missing_and_panicking_kernels_fall_back(lab: Lab) -> None:
    node = "spark4"
    kver = packages.KERNELS[K32]
    ok(lab, node, f"apt-get update -q && apt-get install -y -q linux-image-{K32}={kver}")
    set_grub_default(lab, node, K32)
    faults.inject(lab, node, "kernel-panic", K32)
    try:
        reboot_over_ssh(lab, node)
        assert ok(lab, node, "uname -r") == f"{packages.FACTORY_KERNEL}\n"
        assert f"kernel {K32} panicked" in ok(lab, node, "cat /var/lib/sparkbase-lab/boot.log")
    finally:
        faults.clear(lab, node, "kernel-panic", K32)
    reboot_over_ssh(lab, node)
    assert ok(lab, node, "uname -r") == f"{K32}\n"
    # one-shot entry into a kernel whose image is gone: falls back to the one running
    ok(lab, node, f"grub-reboot '{boot.entry_path(packages.FACTORY_KERNEL)}' && "
                  f"mv /boot/vmlinuz-{packages.FACTORY_KERNEL} /root/")
    reboot_over_ssh(lab, node)
    assert ok(lab, node, "uname -r") == f"{K32}\n"
    assert "missing" in ok(lab, node, "tail -3 /var/lib/sparkbase-lab/boot.log")
    ok(lab, node, f"mv /root/vmlinuz-{packages.FACTORY_KERNEL} /boot/")


def test_dkms_module_needs_enrolled_mok_under_secure_boot(lab: Lab) -> None:
    node = "spark3"
    ok(lab, node, "apt-get update -q && apt-get install -y -q uvm-memory-saver-dkms=0.4.2-1")
    ok(lab, node, "dkms install uvm-memory-saver/0.4.2")
    assert "installed" in ok(lab, node, "dkms status")
    assert ok(lab, node, "modinfo -F sig_key uvm_memory_saver") == ""
    reboot_over_ssh(lab, node)
    assert "uvm_memory_saver" not in ok(lab, node, "lsmod")
    assert "refused to load uvm_memory_saver" in ok(lab, node, "cat /var/lib/sparkbase-lab/boot.log")
    rc, _, err = lab.run(node, "modprobe uvm_memory_saver")
    assert rc == 1 and "Key was rejected" in err
    # MOK: make a key pair where Ubuntu's DKMS looks, sign, enrol, reboot
    ok(lab, node, "mkdir -p /var/lib/shim-signed/mok && cd /var/lib/shim-signed/mok && "
                  "openssl req -new -x509 -newkey rsa:2048 -nodes -days 3650 -subj '/CN=spark fleet MOK/' "
                  "-keyout MOK.priv -outform DER -out MOK.der 2>/dev/null")
    ok(lab, node, "dkms remove uvm-memory-saver/0.4.2 --all && dkms install uvm-memory-saver/0.4.2")
    # kmod prints the signing certificate's serial number as sig_key (upper-case colon hex)
    serial = ok(lab, node, "modinfo -F sig_key uvm_memory_saver").strip()
    cert = "/var/lib/shim-signed/mok/MOK.der"
    cert_serial = ok(lab, node, f"openssl x509 -inform DER -in {cert} -noout -serial")
    assert serial == serial.upper() and serial.count(":") >= 7
    assert int(serial.replace(":", ""), 16) == int(cert_serial.strip().split("=", 1)[1], 16)
    assert ok(lab, node, "modinfo -F signer uvm_memory_saver") == "spark fleet MOK\n"
    assert ok(lab, node, "modinfo -F sig_hashalgo uvm_memory_saver") == "sha512\n"
    ok(lab, node, "echo 'options uvm_memory_saver leaf_packing=1' > /etc/modprobe.d/uvm-memory-saver.conf")
    ok(lab, node, "mokutil --import /var/lib/shim-signed/mok/MOK.der --root-pw")
    fingerprint = ok(lab, node, "openssl x509 -inform DER -in /var/lib/shim-signed/mok/MOK.der -noout "
                                "-fingerprint -sha1").strip().split("=", 1)[1].lower()
    pending = ok(lab, node, "mokutil --list-new")
    assert f"SHA1 Fingerprint: {fingerprint}" in pending
    assert serial.lower() in pending and "Issuer: CN=spark fleet MOK" in pending
    rc, _, _ = lab.run(node, "mokutil --test-key /var/lib/shim-signed/mok/MOK.der")
    assert rc == 1, "pending is not enrolled yet"
    # nobody at the console: MokManager times out, the key stays pending, the module refused
    reboot_over_ssh(lab, node)
    assert f"SHA1 Fingerprint: {fingerprint}" in ok(lab, node, "mokutil --list-new")
    assert f"SHA1 Fingerprint: {fingerprint}" not in ok(lab, node, "mokutil --list-enrolled")
    assert "uvm_memory_saver" not in ok(lab, node, "lsmod")
    assert "nobody at the console" in ok(lab, node, "cat /var/lib/sparkbase-lab/boot.log")
    # a person at the console at the next boot: Enroll MOK → Continue → Yes → password → Reboot
    console.request(lab, node, "enroll-mok")
    reboot_over_ssh(lab, node)
    assert f"SHA1 Fingerprint: {fingerprint}" in ok(lab, node, "mokutil --list-enrolled")
    rc, out, _ = lab.run(node, "mokutil --list-new")
    assert (rc, out.strip()) == (1, "MokNew is empty")
    assert "uvm_memory_saver" in ok(lab, node, "lsmod")
    assert ok(lab, node, "cat /sys/module/uvm_memory_saver/parameters/leaf_packing") == "1\n"
    assert ok(lab, node, "mokutil --sb-state") == "SecureBoot enabled\n"


def test_reboot_loses_runtime_state_keeps_disk(lab: Lab) -> None:
    node = "spark3"
    ok(lab, node, "echo never > /sys/kernel/mm/transparent_hugepage/enabled && "
                  "touch /run/volatile /root/kept "
                  "&& systemctl set-default multi-user.target && echo 'vm.watermark_boost_factor = 0' "
                  "> /etc/sysctl.d/90-spark.conf && systemctl disable gdm3")
    assert ok(lab, node, "cat /sys/kernel/mm/transparent_hugepage/enabled") == "never\n"
    lab.reboot(node)
    assert "[madvise]" in ok(lab, node, "cat /sys/kernel/mm/transparent_hugepage/enabled")
    assert ok(lab, node, "ls /run/volatile /root/kept 2>/dev/null; true") == "/root/kept\n"
    assert ok(lab, node, "systemctl get-default") == "multi-user.target\n"
    assert ok(lab, node, "sysctl -n vm.watermark_boost_factor") == "0\n"
    rc, out, _ = lab.run(node, "systemctl is-active gdm3")
    assert (rc, out) == (3, "inactive\n")
    rc, out, _ = lab.run(node, "systemctl is-enabled gdm3")
    assert (rc, out) == (1, "disabled\n")
    assert ok(lab, node, "systemctl is-active cups") == "active\n"
