"""The emulated fleet prints what real tools print (issue 11): each check is the format of a
real sample in tests/fixtures/real/, produced by a node of the lab.

One factory-fresh single-node lab for the module (port base 2881), so no other module's
changes to a node (kernels, drivers) show here."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fleets import one_node_lab
from ports import port_base

from sparkbase_lab import faults, packages
from sparkbase_lab.fleet import Lab

pytestmark = pytest.mark.end_to_end

NODE = "spark1"
PORT_BASE = port_base("SPARKBASE_TEST_LAB_FORMATS_PORT_BASE", 2881)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One factory-fresh node for this module."""
    yield from one_node_lab(tmp_path_factory, "lab-formats", PORT_BASE)


def ok(lab: Lab, node: str, command: str) -> str:
    rc, out, err = lab.run(node, command)
    assert rc == 0, f"{node}: {command!r} -> {rc}\n{out}\n{err}"
    return out


def test_systemctl_prints_cpu_sets_as_ranges_joined_by_spaces(lab: Lab) -> None:
    ok(lab, NODE, "printf '[Slice]\\nAllowedCPUs=5-9,15-19\\n' > /etc/systemd/system/lab-fmt.slice "
                  "&& printf '[Service]\\nExecStart=/bin/true\\nCPUAffinity=3,4\\nCPUAffinity=5 6 7\\n' "
                  "> /etc/systemd/system/lab-fmt.service")
    out = ok(lab, NODE, "systemctl show -p UnitFileState -p ActiveState -p AllowedCPUs "
                        "lab-fmt.slice cups.service")
    blocks = out.split("\n\n")
    assert len(blocks) == 2
    assert "AllowedCPUs=5-9 15-19" in blocks[0].splitlines()
    assert "AllowedCPUs=" in blocks[1].splitlines()  # empty values print with -p
    assert ok(lab, NODE, "systemctl show -p CPUAffinity lab-fmt.service") == "CPUAffinity=3-7\n"


def test_modinfo_prints_kmods_fields(lab: Lab) -> None:
    out = ok(lab, NODE, "modinfo nvidia_uvm")
    keys = [line.split(":", 1)[0] for line in out.splitlines() if not line.startswith(" ")]
    assert keys[:3] == ["filename", "version", "license"]
    assert keys.index("srcversion") < keys.index("depends") < keys.index("name") < keys.index("vermagic")
    assert keys[-5:] == ["sig_id", "signer", "sig_key", "sig_hashalgo", "signature"]
    assert re.search(r"^filename:       /lib/modules/\S+/kernel/nvidia-580-open/nvidia-uvm\.ko$", out, re.M)
    assert re.search(r"^srcversion:     [0-9A-F]{23}$", out, re.M)
    assert re.search(r"^sig_key:        ([0-9A-F]{2}:){19}[0-9A-F]{2}$", out, re.M)
    continuation = [line for line in out.splitlines() if line.startswith(" ")]
    assert continuation
    assert all(line.startswith(" " * 16) and len(line.strip()) <= 60 for line in continuation)
    srcversion = ok(lab, NODE, "modinfo -F srcversion nvidia_uvm")
    assert ok(lab, NODE, "cat /sys/module/nvidia_uvm/srcversion") == srcversion
    assert ok(lab, NODE, "modinfo -F depends nvidia_uvm") == "nvidia\n"


@pytest.mark.parametrize(
    ("fault", "printed", "status"),
    [
        ("sb-not-enforcing", "SecureBoot enabled\nSecureBoot validation is disabled in shim\n", 0),
        ("sb-setup-mode", "SecureBoot disabled\nPlatform is in Setup Mode\n", 0),
        ("sb-disabled", "SecureBoot disabled\n", 0),
    ],
)
def test_every_secure_boot_state(lab: Lab, fault: str, printed: str, status: int) -> None:
    faults.inject(lab, NODE, fault)
    try:
        rc, out, _ = lab.run(NODE, "mokutil --sb-state")
        assert (rc, out) == (status, printed)
    finally:
        faults.clear(lab, NODE, fault)
    assert ok(lab, NODE, "mokutil --sb-state") == "SecureBoot enabled\n"


def test_no_efi_variables(lab: Lab) -> None:
    faults.inject(lab, NODE, "no-efi")
    try:
        rc, out, err = lab.run(NODE, "mokutil --sb-state")
        assert (rc, out, err) == (1, "", "EFI variables are not supported on this system\n")
        rc, _, err = lab.run(NODE, "efibootmgr")
        assert rc == 2 and "EFI variables are not supported" in err
    finally:
        faults.clear(lab, NODE, "no-efi")


def test_enrolled_keys_list_as_mokutil_prints_them(lab: Lab) -> None:
    out = ok(lab, NODE, "mokutil --list-enrolled")
    assert out.startswith("[key 1]\n"
                          "SHA1 Fingerprint: 76:a0:92:06:58:00:bf:37:69:01:c3:72:cd:55:a9:0e:1f:de:d2:e0\n"
                          "Certificate:\n    Data:\n        Version: 3 (0x2)\n        Serial Number:\n"
                          "            b9:41:24:a0:18:2c:92:67\n")
    issuer = ("C=GB, ST=Isle of Man, L=Douglas, O=Canonical Ltd., "
              "CN=Canonical Ltd. Master Certificate Authority")
    assert f"        Issuer: {issuer}\n" in out


def test_dkms_noise_goes_to_stderr_and_interleaves_when_merged(lab: Lab) -> None:
    ok(lab, NODE, "apt-get update -q && apt-get install -y -q uvm-memory-saver-dkms=0.4.2-1 "
                  "&& dkms install uvm-memory-saver/0.4.2")
    clean = ok(lab, NODE, "dkms status")
    assert re.fullmatch(r"uvm-memory-saver/0\.4\.2, \S+, aarch64: installed\n", clean)
    faults.inject(lab, NODE, "dkms-noise")
    try:
        rc, out, err = lab.run(NODE, "dkms status")
        assert rc == 0 and out == clean
        assert "Error! Could not locate dkms.conf file.\nFile: /var/lib/dkms/" in err
        assert "Deprecated feature: REMAKE_INITRD" in err
        merged = ok(lab, NODE, "dkms status 2>&1")
        assert "aarch64: installedDeprecated feature: REMAKE_INITRD\n" in merged
    finally:
        faults.clear(lab, NODE, "dkms-noise")
        ok(lab, NODE, "dkms remove uvm-memory-saver/0.4.2 --all")


def test_grub_cfg_has_ids_and_grub_editenv_lists_saved_entry_as_ubuntu_writes_it(lab: Lab) -> None:
    cfg = ok(lab, NODE, "cat /boot/grub/grub.cfg")
    ids = re.findall(r"\$menuentry_id_option '(gnulinux-[^']+)'", cfg)
    uuid = ids[0].removeprefix("gnulinux-simple-")
    kernel = packages.FACTORY_KERNEL
    assert ids[:3] == [f"gnulinux-simple-{uuid}", f"gnulinux-advanced-{uuid}",
                       f"gnulinux-{kernel}-advanced-{uuid}"]
    assert f"\t\tlinux\t/boot/vmlinuz-{kernel} root=UUID={uuid} ro" in cfg
    saved = f"gnulinux-advanced-{uuid}>gnulinux-{kernel}-advanced-{uuid}"
    ok(lab, NODE, f"grub-set-default '{saved}'")
    assert f"saved_entry={saved}\n" in ok(lab, NODE, "grub-editenv /boot/grub/grubenv list")
    ok(lab, NODE, "grub-editenv /boot/grub/grubenv unset saved_entry")


def test_dgx_release_uses_dgx_os_7_numbering(lab: Lab) -> None:
    text = ok(lab, NODE, "cat /etc/dgx-release")
    assert 'DGX_SWBUILD_VERSION="7.' in text and 'DGX_OTA_VERSION="7.' in text


def test_the_nodes_own_view_of_kernel_swap_and_cpufreq(lab: Lab) -> None:
    release = ok(lab, NODE, "uname -r")
    assert ok(lab, NODE, "cat /proc/sys/kernel/osrelease") == release
    assert ok(lab, NODE, "head -1 /proc/swaps") == "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
    ok(lab, NODE, "fallocate -l 64M /lab-fmt.swap && chmod 600 /lab-fmt.swap "
                  "&& mkswap /lab-fmt.swap >/dev/null && swapon /lab-fmt.swap")
    try:
        line = ok(lab, NODE, "grep lab-fmt /proc/swaps")
        usable_kib = 64 * 1024 - 4  # every page but the header page
        assert line == f"/lab-fmt.swap{' ' * 27}file\t\t{usable_kib}\t\t0\t\t-2\n"
        assert ok(lab, NODE, "swapon --show=NAME,SIZE --bytes --noheadings | grep lab-fmt").split()[1] == str(
            usable_kib * 1024)
    finally:
        ok(lab, NODE, "swapoff /lab-fmt.swap && rm -f /lab-fmt.swap")
    assert ok(lab, NODE, "readlink /sys/devices/system/cpu/cpu7/cpufreq") == "../cpufreq/policy7\n"
    assert ok(lab, NODE, "cat /sys/devices/system/cpu/cpufreq/policy7/scaling_governor") == "performance\n"
    assert ok(lab, NODE, "cat /sys/devices/system/cpu/cpufreq/policy7/related_cpus") == "7\n"
    assert ok(lab, NODE, "ls /sys/class/drm") == "card0\ncard0-HDMI-A-1\nrenderD128\nversion\n"


def test_module_files_exist_for_what_is_loaded_and_kernels_have_build_and_initrd(lab: Lab) -> None:
    release = ok(lab, NODE, "uname -r").strip()
    for module in ok(lab, NODE, "lsmod | tail -n +2 | cut -d' ' -f1").split():
        assert ok(lab, NODE, f"modinfo -F filename {module}").startswith(f"/lib/modules/{release}/")
    assert ok(lab, NODE, f"ls /boot/initrd.img-{release}").strip() == f"/boot/initrd.img-{release}"
    assert ok(lab, NODE, f"readlink /lib/modules/{release}/build") == f"/usr/src/linux-headers-{release}\n"
    ok(lab, NODE, f"update-initramfs -d -k {release} && update-initramfs -c -k {release}")
    assert "initramfs" in ok(lab, NODE, f"head -1 /boot/initrd.img-{release}")


def test_nvme_features_follow_the_kernel_argument_and_set_feature(lab: Lab) -> None:
    apst = ok(lab, NODE, "nvme get-feature /dev/nvme0 -f 0x0c -H")
    assert apst.startswith("get-feature:0x0c (Autonomous Power State Transition), Current value:0x00000001\n")
    assert "(APSTE): Enabled" in apst
    # DGX OS's nvidia-nvme-options sets coalescing to 0x107 at boot (its factory default);
    # nvme-cli 2.x prints zero as 00000000 and takes the value as -V/--value (-v is verbose)
    assert ok(lab, NODE, "nvme get-feature /dev/nvme0 -f 8") == (
        "get-feature:0x08 (Interrupt Coalescing), Current value:0x00000107\n")
    ok(lab, NODE, "nvme set-feature /dev/nvme0 -f 8 -V 0x0a01")
    assert "Current value:0x00000a01" in ok(lab, NODE, "nvme get-feature /dev/nvme0 -f 8")
    ok(lab, NODE, "nvme set-feature /dev/nvme0 -f 8 --value=0x107")
    assert "BootOrder: 0001,0000" in ok(lab, NODE, "efibootmgr")


PROBE = "python3 -c \"import os, platform; print(platform.release(), os.sysconf('SC_PAGE_SIZE'))\""


def test_programs_see_the_nodes_kernel_release_and_page_size(lab: Lab) -> None:
    """Through the C library (uname(2), sysconf): the preload library in the node only."""
    release = ok(lab, NODE, "uname -r").strip()
    assert ok(lab, NODE, PROBE) == f"{release} 4096\n"
    assert ok(lab, NODE, "cat /etc/ld.so.preload") == "/usr/local/lib/sparkbase-lab/libsparkbase-node.so\n"
    big = "7.0.0-1019-nvidia-64k"
    # the image's postinst runs update-grub and update-initramfs from /usr/sbin (apt's PATH)
    ok(lab, NODE, f"apt-get update -q && apt-get install -y -q linux-image-{big} linux-modules-{big} "
                  f">/dev/null && grub-reboot 'Advanced options for Ubuntu>Ubuntu, with Linux {big}'")
    assert f"initrd.img-{big}" in ok(lab, NODE, "ls /boot")
    lab.reboot(NODE)
    assert ok(lab, NODE, PROBE) == f"{big} 65536\n"
    assert ok(lab, NODE, "getconf PAGESIZE") == "65536\n"
