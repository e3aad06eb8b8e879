"""Fact parsers on captured command outputs (no host)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbase.facts.model import Gid, SecureBoot
from sparkbase.facts.parsers.cpuset import format_cpu_list, parse_cpu_list, parse_fast_cpus
from sparkbase.facts.parsers.driver import parse_event_reasons, parse_nvidia_smi_query
from sparkbase.facts.parsers.fabric import parse_ip_addr_json
from sparkbase.facts.parsers.files import parse_sha256sum
from sparkbase.facts.parsers.host import parse_governors
from sparkbase.facts.parsers.kernel import parse_grub, parse_grubenv, parse_page_size, parse_uname_rm
from sparkbase.facts.parsers.memory import parse_swap_header, parse_swapon_show, parse_thp
from sparkbase.facts.parsers.modules import modinfo_fields, parse_dkms_status, parse_modinfo
from sparkbase.facts.parsers.nccl import parse_kv_conf
from sparkbase.facts.parsers.packages import parse_dpkg_query
from sparkbase.facts.parsers.secure_boot import (
    normalise_serial,
    parse_mok_certificates,
    parse_mok_enrolled,
    parse_sb_state,
)
from sparkbase.facts.parsers.units import parse_systemctl_show, unit_state

FIXTURES = Path(__file__).parents[1] / "fixtures" / "facts"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_uname_release_and_machine() -> None:
    assert parse_uname_rm("7.0.0-1019-nvidia-64k aarch64\n") == ("7.0.0-1019-nvidia-64k", "aarch64")
    with pytest.raises(ValueError):
        parse_uname_rm("Linux\n")


@pytest.mark.parametrize(("text", "size"), [("4096\n", 4096), ("65536\n", 65536)])
def test_page_size(text: str, size: int) -> None:
    assert parse_page_size(text) == size


def test_page_size_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        parse_page_size("getconf: Unrecognized variable\n")


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("always [madvise] never\n", "madvise"),
        ("[always] madvise never\n", "always"),
        ("always madvise [never]\n", "never"),
        ("never\n", "never"),
    ],
)
def test_thp_bracketed_and_bare(text: str, mode: str) -> None:
    assert parse_thp(text) == mode


def test_thp_unreadable() -> None:
    with pytest.raises(ValueError):
        parse_thp("always madvise never\n")


def _cpuinfo() -> str:
    blocks = []
    for cpu in range(20):
        part = "0xd85" if cpu in (*range(5, 10), *range(15, 20)) else "0xd87"
        blocks.append(f"processor\t: {cpu}\nCPU implementer\t: 0x41\nCPU part\t: {part}\n")
    return "\n".join(blocks)


def test_fast_cpus_by_cpu_part() -> None:
    assert parse_fast_cpus(_cpuinfo()) == (5, 6, 7, 8, 9, 15, 16, 17, 18, 19)


def test_nvidia_smi_query_normal_and_latched() -> None:
    """Clock, power, load and clock-event reasons from one line (`csv,noheader,nounits`)."""
    normal = parse_nvidia_smi_query("580.126.09, 2418, 35.21, 97, 0x0000000000000000\n", 0)
    assert (normal.driver_version, normal.sm_clock_mhz, normal.power_w) == ("580.126.09", 2418, 35.21)
    assert (normal.utilization_pct, normal.event_reasons) == (97, 0)
    latched = parse_nvidia_smi_query("580.126.09, 611, 10.12, 98, 0x0000000000000000\n", 0)
    assert latched.sm_clock_mhz == 611 and latched.error is None
    idle = parse_nvidia_smi_query("580.126.09, 208, 4.05, 0, 0x0000000000000001\n", 0)
    assert (idle.utilization_pct, idle.event_reasons) == (0, 1)


def test_nvidia_smi_query_unreported_fields_are_none() -> None:
    gpu = parse_nvidia_smi_query("580.126.09, nan, [N/A], [N/A], [Not Supported]\n", 0)
    assert (gpu.sm_clock_mhz, gpu.power_w, gpu.utilization_pct, gpu.event_reasons) == (None, None, None, None)
    assert parse_event_reasons("0x00000000000001FF") == 0x1FF
    assert parse_event_reasons("0xnope") is None and parse_event_reasons("1") is None


def test_nvidia_smi_failure_is_recorded() -> None:
    gpu = parse_nvidia_smi_query(fixture("nvidia-smi-mismatch.out"), 18)
    assert gpu.driver_version is None
    assert gpu.error is not None and "exit 18" in gpu.error and "mismatch" in gpu.error


def test_dkms_status() -> None:
    entries = parse_dkms_status(fixture("dkms-status.out")).entries
    assert [(e.name, e.version, e.kernel, e.status) for e in entries] == [
        ("uvm-memory-saver", "0.4.2", "7.0.0-1019-nvidia-64k", "installed"),
        ("uvm-memory-saver", "0.4.2", "6.17.0-1032-nvidia", "built"),
        ("nvidia-fs", "2.20.5", None, "added"),
    ]


def test_modinfo_signed_keeps_the_key_as_printed() -> None:
    info = parse_modinfo(fixture("modinfo-signed.out"), 0)
    assert info.signer == "sparkbase lab MOK"
    # kmod prints the signing certificate's serial (20 random bytes, upper-case colon-hex)
    assert info.sig_key == "30:68:CF:6C:FE:96:6E:E8:9A:FF:56:35:D2:17:CA:84:8C:E2:FB:37"
    assert normalise_serial(info.sig_key) == "3068cf6cfe966ee89aff5635d217ca848ce2fb37"
    assert info.srcversion == "79DFE57FB4D471761C11388"
    assert info.vermagic is not None and info.vermagic.startswith("7.0.0-1019-nvidia-64k ")


def test_modinfo_missing_module() -> None:
    info = parse_modinfo("modinfo: ERROR: Module uvm_memory_saver not found.\n", 1)
    assert info.sig_key is None and info.error is not None and "not found" in info.error


def test_mokutil() -> None:
    assert parse_sb_state("SecureBoot enabled\n") is SecureBoot.ENABLED
    assert parse_sb_state("SecureBoot disabled\n") is SecureBoot.DISABLED
    assert parse_sb_state("EFI variables are not supported on this system\n") is SecureBoot.UNSUPPORTED
    assert parse_mok_enrolled(fixture("mokutil-list-enrolled.out"))[1].startswith("de:68:7c")
    with pytest.raises(ValueError):
        parse_sb_state("mokutil: command output nobody expected\n")


def test_swapon_show_bytes() -> None:
    swaps = parse_swapon_show("/swap-64k.img 17179869184\n")
    assert swaps[0].name == "/swap-64k.img" and swaps[0].size_bytes == 16 * 1024**3
    assert parse_swapon_show("") == ()


@pytest.mark.parametrize(
    ("at_4k", "at_64k", "size"),
    [("SWAPSPACE2", "..........", 4096), ("..........", "SWAPSPACE2", 65536), ("", "", None)],
)
def test_swap_header(at_4k: str, at_64k: str, size: int | None) -> None:
    assert parse_swap_header(at_4k, at_64k) == size


def test_systemctl_show_blocks_with_and_without_blank_lines() -> None:
    lab = "UnitFileState=enabled\nActiveState=active\nUnitFileState=disabled\nActiveState=inactive\n"
    real = "UnitFileState=enabled\nActiveState=active\n\nUnitFileState=disabled\nActiveState=inactive\n"
    for text in (lab, real):
        shown = parse_systemctl_show(text, ["gdm3.service", "cups.service"])
        assert unit_state(shown["gdm3.service"]).active
        assert not unit_state(shown["cups.service"]).enabled
    with pytest.raises(ValueError):
        parse_systemctl_show(lab, ["only-one.service"])


def test_sha256sum_with_missing_files() -> None:
    text = (
        "585287f61a4b7ff7c4978033aa8b0bd2eddb29f28b2666ccc9ea93868e6a2a6d  /opt/nccl/libnccl.so\n"
        "sha256sum: /etc/nccl.conf: No such file or directory\n"
    )
    assert parse_sha256sum(text) == {
        "/opt/nccl/libnccl.so": "585287f61a4b7ff7c4978033aa8b0bd2eddb29f28b2666ccc9ea93868e6a2a6d",
        "/etc/nccl.conf": None,
    }


def test_ip_addr_json() -> None:
    data = [
        {"ifname": "lo", "mtu": 65536, "operstate": "UNKNOWN", "addr_info": []},
        {
            "ifname": "enp1s0f0np0",
            "mtu": 9000,
            "operstate": "UP",
            "addr_info": [
                {"family": "inet", "local": "192.168.101.1", "prefixlen": 24},
                {"family": "inet6", "local": "fe80::1", "prefixlen": 64},
            ],
        },
    ]
    iface = parse_ip_addr_json(json.dumps(data))["enp1s0f0np0"]
    assert (iface.mtu, iface.operstate, iface.addresses) == (9000, "UP", ("192.168.101.1/24",))


def test_governors() -> None:
    text = (
        "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor:performance\n"
        "/sys/devices/system/cpu/cpu12/cpufreq/scaling_governor:powersave\n"
    )
    assert parse_governors(text) == {0: "performance", 12: "powersave"}


def test_dpkg_query_counts_only_installed() -> None:
    text = "nccl-site-ring4\t2.27.7-1+site.ring4.p3\tii \nold-pkg\t1.0\trc \nheld\t2.0\thi \n"
    assert parse_dpkg_query(text) == {"nccl-site-ring4": "2.27.7-1+site.ring4.p3", "held": "2.0"}


def test_gid_ipv4_mapped() -> None:
    assert Gid("0000:0000:0000:0000:0000:ffff:c0a8:6501", "RoCE v2").ipv4 == "192.168.101.1"
    assert Gid("fe80:0000:0000:0000:0000:0000:0000:0001", "RoCE v2").ipv4 is None
    assert Gid(None, None).ipv4 is None


def test_kv_conf() -> None:
    assert parse_kv_conf("# c\nNCCL_IB_MERGE_NICS=0\n\nNCCL_IB_GID_INDEX = 3\n") == {
        "NCCL_IB_MERGE_NICS": "0",
        "NCCL_IB_GID_INDEX": "3",
    }


#: grub.cfg as Ubuntu's grub-mkconfig writes it with GRUB_DEFAULT=saved
UBUNTU_GRUB_CFG = fixture("grub-ubuntu.cfg")


def test_grub_saved_default_is_read_from_grubenv() -> None:
    from sparkbase.facts.parsers.kernel import parse_grub

    saved = "gnulinux-advanced-9d1e>gnulinux-6.17.0-1008-nvidia-advanced-9d1e"
    env = f"# GRUB Environment Block\nsaved_entry={saved}\n"
    grub = parse_grub(UBUNTU_GRUB_CFG, env + "#" * 900)
    assert grub.default_entry is not None and grub.default_entry.release == "6.17.0-1008-nvidia"
    assert grub.oneshot is None
    assert [e.release for e in grub.entries if not e.recovery] == [
        "6.17.0-1032-nvidia", "6.17.0-1032-nvidia", "6.17.0-1008-nvidia", None
    ]


def test_grub_without_saved_entry_boots_entry_zero_and_oneshot_wins_once() -> None:
    from sparkbase.facts.parsers.kernel import parse_grub

    grub = parse_grub(UBUNTU_GRUB_CFG, "next_entry=1>2\n")
    assert grub.default == "0" and grub.default_entry is not None
    assert grub.default_entry.path == "Ubuntu" and grub.default_entry.release == "6.17.0-1032-nvidia"
    assert grub.oneshot == "1>2"
    assert grub.oneshot_entry is not None and grub.oneshot_entry.release == "6.17.0-1008-nvidia"
    # a grub.cfg without the next_entry branch ignores grub-reboot, as GRUB does
    plain = parse_grub('set default="0"\n' + UBUNTU_GRUB_CFG.split("function", 1)[1], "next_entry=1>2\n")
    assert plain.oneshot is None


def test_fstab_and_dgx_release() -> None:
    from sparkbase.facts.parsers.memory import parse_fstab
    from sparkbase.facts.parsers.os_release import parse_os_release

    fstab = parse_fstab("# c\n\nUUID=1 / ext4 errors=remount-ro 0 1\n/swap-64k.img none swap sw 0 0  # 64k\n")
    assert [(e.spec, e.vfstype) for e in fstab] == [("UUID=1", "ext4"), ("/swap-64k.img", "swap")]
    with pytest.raises(ValueError):
        parse_fstab("/swapfile none\n")
    release = parse_os_release(
        'DGX_NAME="DGX Spark"\nDGX_SWBUILD_VERSION="26.09.1"\nDGX_OTA_VERSION="26.09.1"\n'
        'DGX_OTA_DATE="Tue Oct 13 09:12:44 UTC 2026"\nDGX_OTA_VERSION="26.09.2"\n'
    )
    assert release["DGX_OTA_VERSION"] == "26.09.2" and release["DGX_NAME"] == "DGX Spark"


def test_module_versions_from_sysfs() -> None:
    from sparkbase.facts.parsers.modules import parse_module_attrs

    text = "/sys/module/nvidia/version:580.126.09\n/sys/module/nvidia/srcversion:A1B2C3\nnoise\n"
    assert parse_module_attrs(text) == {"nvidia.version": "580.126.09", "nvidia.srcversion": "A1B2C3"}


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("5-9 15-19", {*range(5, 10), *range(15, 20)}),  # systemd AllowedCPUs=
        ("5-9,15-19", {*range(5, 10), *range(15, 20)}),  # cpuset.cpus
        ("3 4 5 6 7", {3, 4, 5, 6, 7}),  # systemd CPUAffinity=
        ("0, 2-3", {0, 2, 3}),
        ("", set()),
    ],
)
def test_cpu_lists_in_every_form_are_sets(text: str, cpus: set[int]) -> None:
    assert parse_cpu_list(text) == cpus
    assert parse_cpu_list(format_cpu_list(cpus)) == cpus


@pytest.mark.parametrize("text", ["5-", "a-b", "9-5", "all"])
def test_cpu_list_garbage_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpu_list(text)


def test_format_cpu_list() -> None:
    assert format_cpu_list({5, 6, 7, 8, 9, 15, 16, 17, 18, 19}) == "5-9,15-19"
    assert format_cpu_list({1, 3}) == "1,3"


def test_dkms_status_unknown_lines_are_noise_never_fatal() -> None:
    found = parse_dkms_status("WARNING: something odd\nuvm-memory-saver/0.2.0, 7.0.0-1019-nvidia-64k, "
                                "aarch64: installed (WARNING! Diff between built and installed module!)\n")
    assert [e.status for e in found.entries] == ["installed"]
    assert found.noise == ("WARNING: something odd",)


def test_modinfo_keeps_the_first_of_repeated_fields_and_joins_continuations() -> None:
    fields = modinfo_fields("alias: a\nalias: b\nsig_key: 40:8B:\n\t\t66:4E\nparm: x:int\n")
    assert fields == {"alias": "a", "sig_key": "40:8B:66:4E", "parm": "x:int"}


def test_mok_certificate_names_in_both_openssl_styles() -> None:
    text = ("[key 1]\nSHA1 Fingerprint: 9c:ca:60\nCertificate:\n    Data:\n        Serial Number:\n"
            "            30:b5:1f\n        Issuer: CN = sparkbase lab MOK (not for production)\n"
            "        Subject: CN = sparkbase lab MOK (not for production)\n[key 2]\n"
            "SHA1 Fingerprint: 01:02\n        Serial Number: 4660 (0x1234)\n"
            "        Issuer: C=GB, O=Canonical Ltd., CN=Canonical Ltd. Master Certificate Authority\n")
    first, second = parse_mok_certificates(text)
    assert (first.serial, first.issuer_cn) == ("30b51f", "sparkbase lab MOK (not for production)")
    assert (second.serial, second.issuer_cn) == ("1234", "Canonical Ltd. Master Certificate Authority")


#: a real grub-mkconfig grub.cfg (separate /boot), as GRUB_DEFAULT=saved would write it
REAL = Path(__file__).parents[1] / "fixtures" / "real"
REAL_GRUB = (REAL / "boot_grub_grub.cfg__ubuntu24.04_separate_boot__otus-hw07.txt").read_text().replace(
    '   set default="0"', '   set default="${saved_entry}"')
UUID = "bae9d9ac-cfb9-4e94-a5e5-faa77306bffb"


@pytest.mark.parametrize(
    ("saved", "path"),
    [
        (f"gnulinux-advanced-{UUID}>gnulinux-6.8.0-88-generic-recovery-{UUID}",
         "Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-88-generic (recovery mode)"),  # ids
        ("Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-88-generic",
         "Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-88-generic"),  # titles
        ("1>1", "Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-88-generic (recovery mode)"),  # indexes
        (f"gnulinux-simple-{UUID}", "Ubuntu"),  # a top-level id
        ("", "Ubuntu"),  # nothing saved: entry 0
        ("Ubuntu, with Linux 6.8.0-88-generic", None),  # a nested title without its submenu: no entry
        ("1", None),  # a submenu is not bootable
    ],
)
def test_saved_entry_on_a_real_grub_cfg_by_id_title_and_index(saved: str, path: str | None) -> None:
    grub = parse_grub(REAL_GRUB, f"# GRUB Environment Block\nsaved_entry={saved}\n" + "#" * 900)
    assert grub.default == (saved or "0")
    assert (grub.default_entry.path if grub.default_entry else None) == path
    assert grub.oneshot is None


def test_grub_editenv_list_reads_as_the_block_does() -> None:
    listed = "saved_entry=1>1\nnext_entry=0\nboot_success=1\n"
    block = "# GRUB Environment Block\n" + listed + "#" * 900
    assert parse_grubenv(listed) == parse_grubenv(block)
    grub = parse_grub(REAL_GRUB, listed)
    assert grub.oneshot == "0" and grub.oneshot_entry is not None and grub.oneshot_entry.path == "Ubuntu"
    assert grub.default_entry is not None and grub.default_entry.recovery
