"""Pure boot computations of the emulated node: GRUB, kernel choice, cmdline, GIDs, swap."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbase_lab import boot

REAL = Path(__file__).parent.parent / "fixtures" / "real"

K8 = "6.17.0-1008-nvidia"
K32 = "6.17.0-1032-nvidia"
K64 = "7.0.0-1019-nvidia-64k"
FACTORY_GRUB = 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\nGRUB_CMDLINE_LINUX=""\n'


def menu(default: str = "0", kernels: tuple[str, ...] = (K8, K32, K64), extra: str = "") -> boot.GrubMenu:
    settings = boot.grub_settings(
        FACTORY_GRUB.replace("GRUB_DEFAULT=0", f'GRUB_DEFAULT="{default}"'), [extra] if extra else []
    )
    return boot.parse_grub_cfg(boot.render_grub_cfg(list(kernels), settings))


def test_grub_settings_dropins_append_in_order() -> None:
    settings = boot.grub_settings(
        FACTORY_GRUB,
        [
            'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT kho=off"',
            'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT} transparent_hugepage=never"',
        ],
    )
    assert settings["GRUB_CMDLINE_LINUX_DEFAULT"] == "quiet splash kho=off transparent_hugepage=never"
    assert boot.kernel_args(settings) == "quiet splash kho=off transparent_hugepage=never"


def test_shell_quoting_and_comments() -> None:
    env = boot.parse_shell_assignments("# c\nA='x y' # trailing\nB=\"$A z\"\nexport C=plain\n")
    assert env == {"A": "x y", "B": "x y z", "C": "plain"}


def test_grub_cfg_lists_every_kernel_newest_first() -> None:
    m = menu()
    assert m.default == "0"
    top = [e for e in m.entries if ">" not in e.path]
    assert [e.release for e in top] == [K64]
    sub = [e for e in m.entries if e.path.startswith(boot.SUBMENU + ">") and "recovery" not in e.path]
    assert [e.release for e in sub] == [K64, K32, K8]
    assert sub[0].path == boot.entry_path(K64)
    assert sub[0].args == f"{boot.ROOT_ARGS} quiet splash"


def test_default_zero_boots_newest() -> None:
    choice = boot.select_boot(menu(), {}, {K8, K32, K64}, set(), K8)
    assert choice == boot.BootChoice(K64, f"{boot.ROOT_ARGS} quiet splash", None, False)


def test_default_by_submenu_path() -> None:
    m = menu(default=boot.entry_path(K32))
    assert boot.select_boot(m, {}, {K8, K32, K64}, set(), K8).release == K32


def test_oneshot_wins_once() -> None:
    m = menu(default=boot.entry_path(K32))
    choice = boot.select_boot(m, {"next_entry": boot.entry_path(K8)}, {K8, K32, K64}, set(), K32)
    assert choice.release == K8 and choice.used_oneshot
    assert boot.select_boot(m, {}, {K8, K32, K64}, set(), K8).release == K32


def test_saved_default_reads_grubenv() -> None:
    m = menu(default="saved")
    env = boot.parse_grubenv(boot.render_grubenv({"saved_entry": boot.entry_path(K8)}))
    assert boot.select_boot(m, env, {K8, K32, K64}, set(), None).release == K8


def test_missing_image_falls_back_to_previous() -> None:
    m = menu(default=boot.entry_path(K64))
    choice = boot.select_boot(m, {}, {K8, K32}, set(), K32)
    assert choice.release == K32
    assert choice.fallback_reason is not None and "missing" in choice.fallback_reason


def test_panicking_kernel_falls_back() -> None:
    m = menu(default=boot.entry_path(K64))
    choice = boot.select_boot(m, {}, {K8, K32, K64}, {K64}, K8)
    assert choice.release == K8
    assert choice.fallback_reason is not None and "panicked" in choice.fallback_reason


def test_no_bootable_kernel_is_an_error() -> None:
    with pytest.raises(RuntimeError):
        boot.select_boot(menu(kernels=(K8,)), {}, {K8}, {K8}, K8)


def test_grubenv_block_is_1024_bytes_and_round_trips() -> None:
    text = boot.render_grubenv({"next_entry": boot.entry_path(K64)})
    assert len(text.encode()) == 1024
    assert boot.parse_grubenv(text) == {"next_entry": boot.entry_path(K64)}


def test_cmdline_and_page_size() -> None:
    line = boot.proc_cmdline(K64, "root=/dev/nvme0n1p2 ro quiet kho=off transparent_hugepage=never")
    assert line == (
        f"BOOT_IMAGE=/boot/vmlinuz-{K64} root=/dev/nvme0n1p2 ro quiet kho=off transparent_hugepage=never"
    )
    assert boot.cmdline_param(line, "kho") == "off"
    assert boot.cmdline_param(line, "quiet") == ""
    assert boot.cmdline_param(line, "splash") is None
    assert boot.page_size(K64) == 65536
    assert boot.page_size(K32) == 4096


def test_version_sort() -> None:
    assert sorted([K64, K8, K32], key=boot.version_key) == [K8, K32, K64]
    assert boot.version_key("6.17.0-1032-nvidia") > boot.version_key("6.17.0-1008-nvidia")


@pytest.mark.parametrize(
    ("ip", "gid"),
    [
        ("192.168.1.1", "0000:0000:0000:0000:0000:ffff:c0a8:0101"),
        ("10.0.0.2/24", "0000:0000:0000:0000:0000:ffff:0a00:0002"),
    ],
)
def test_gid_from_ipv4(ip: str, gid: str) -> None:
    assert boot.gid_from_ipv4(ip) == gid


def test_gid_table_index_3_is_roce_v2_and_moves() -> None:
    table = boot.gid_table("4c:bb:47:00:00:01", "192.168.1.1/24")
    assert table[3] == ("0000:0000:0000:0000:0000:ffff:c0a8:0101", "RoCE v2")
    assert table[2][1] == "IB/RoCE v1"
    assert table[0][0].startswith("fe80:0000:0000:0000:4ebb:47ff:fe00:0001")
    moved = boot.gid_table("4c:bb:47:00:00:01", "192.168.1.1/24", moved=True)
    assert 3 not in moved and moved[5] == table[3]
    assert set(boot.gid_table("4c:bb:47:00:00:01", None)) == {0, 1}


@pytest.mark.parametrize("size", [4096, 16384, 65536])
def test_swap_header_page_size(size: int) -> None:
    header = bytearray(65536)
    header[size - 10 : size] = b"SWAPSPACE2"
    assert boot.swap_header_page_size(bytes(header)) == size


def test_swap_header_absent() -> None:
    assert boot.swap_header_page_size(bytes(65536)) is None


def test_parse_size() -> None:
    assert boot.parse_size("16G") == 16 << 30
    assert boot.parse_size("512M") == 512 << 20
    assert boot.parse_size("4096") == 4096
    assert boot.parse_size("1GiB") == 1 << 30
    with pytest.raises(ValueError):
        boot.parse_size("lots")


def test_thp_forms() -> None:
    assert boot.thp_text("madvise") == "always [madvise] never\n"
    assert boot.thp_mode("always madvise [never]") == "never"
    assert boot.thp_mode("never\n") == "never"


def test_sysctl_and_modprobe_parsing() -> None:
    conf = boot.parse_sysctl_conf(
        ["vm.swappiness = 10\n# x\n", "vm/watermark_boost_factor=0\n-vm.dirty_ratio=5"]
    )
    assert conf == {"vm.swappiness": "10", "vm.watermark_boost_factor": "0", "vm.dirty_ratio": "5"}
    opts = boot.parse_modprobe_options(
        ["options nvidia-drm modeset=1 fbdev=1\n", "options uvm_memory_saver leaf_packing=1 # on"]
    )
    assert opts == {"nvidia_drm": {"modeset": "1", "fbdev": "1"}, "uvm_memory_saver": {"leaf_packing": "1"}}
    assert boot.sysfs_param("1") == "1"
    assert boot.sysfs_param("1", boolean=True) == "Y" and boot.sysfs_param("off", boolean=True) == "N"


def test_cpuinfo_marks_fast_cores() -> None:
    blocks = boot.cpuinfo_text().strip().split("\n\n")
    assert len(blocks) == 20
    parts = [b.split("CPU part\t: ")[1].split("\n")[0] for b in blocks]
    assert [i for i, p in enumerate(parts) if p == "0xd85"] == [*range(5, 10), *range(15, 20)]


def test_mok_fingerprint_format() -> None:
    fp = boot.sha1_fingerprint(b"abc")
    assert fp == "a9:99:3e:36:47:06:81:6a:ba:3e:25:71:78:50:c2:6c:9c:d0:d8:9d"


# --- GRUB as grub-mkconfig writes it, and as GRUB resolves names ----------------------------

UUID = boot.root_uuid("spark2")


def test_rendered_cfg_has_grub_mkconfig_shape() -> None:
    text = boot.render_grub_cfg([K8, K64], boot.grub_settings(FACTORY_GRUB, []), UUID)
    assert "### BEGIN /etc/grub.d/10_linux ###" in text
    assert f"submenu 'Advanced options for Ubuntu' $menuentry_id_option 'gnulinux-advanced-{UUID}' {{" in text
    assert (f"menuentry 'Ubuntu, with Linux {K64}' --class ubuntu --class gnu-linux --class gnu --class os "
            f"$menuentry_id_option 'gnulinux-{K64}-advanced-{UUID}' {{") in text
    assert f"\t\tlinux\t/boot/vmlinuz-{K8} root=UUID={UUID} ro quiet splash" in text
    assert 'if [ "${next_entry}" ] ; then\n   set default="${next_entry}"' in text


@pytest.mark.parametrize(
    ("name", "release"),
    [
        ("0", K64),
        ("1>0", K64),
        ("1>2", K8),
        (boot.entry_path(K8), K8),
        (boot.entry_id_path(K8, UUID), K8),
        (f"gnulinux-advanced-{UUID}>Ubuntu, with Linux {K8}", K8),
        (f"gnulinux-simple-{UUID}", K64),
    ],
)
def test_names_resolve_as_grub_resolves_them(name: str, release: str) -> None:
    m = boot.parse_grub_cfg(boot.render_grub_cfg([K8, K64], boot.grub_settings(FACTORY_GRUB, []), UUID))
    entry = boot.resolve_entry(m, name)
    assert entry is not None and entry.release == release and "recovery" not in entry.path


@pytest.mark.parametrize("name", [boot.entry_title(K8), "Advanced options for Ubuntu", "7", "gnulinux-nope"])
def test_names_grub_cannot_resolve(name: str) -> None:
    """A bare title of a submenu entry, a submenu itself, or a missing index boot nothing."""
    m = boot.parse_grub_cfg(boot.render_grub_cfg([K8, K64], boot.grub_settings(FACTORY_GRUB, []), UUID))
    assert boot.resolve_entry(m, name) is None


def test_unresolvable_default_boots_entry_zero_as_grub_does() -> None:
    m = menu(default=boot.entry_title(K8))
    choice = boot.select_boot(m, {}, {K8, K32, K64}, set(), K8)
    assert choice.release == K64 and "GRUB booted entry 0" in (choice.fallback_reason or "")


def test_saved_entry_as_ubuntu_writes_it() -> None:
    settings = boot.grub_settings(FACTORY_GRUB.replace("GRUB_DEFAULT=0", "GRUB_DEFAULT=saved"), [])
    m = boot.parse_grub_cfg(boot.render_grub_cfg([K8, K32, K64], settings, UUID))
    assert m.default == "${saved_entry}"
    env = {"saved_entry": boot.entry_id_path(K32, UUID)}
    assert boot.select_boot(m, env, {K8, K32, K64}, set(), None).release == K32


def test_real_grub_mkconfig_output_parses() -> None:
    """Ubuntu 24.04 with a separate /boot (`linux /vmlinuz-…`), ids on every entry."""
    text = (REAL / "boot_grub_grub.cfg__ubuntu24.04_separate_boot__otus-hw07.txt").read_text()
    m = boot.parse_grub_cfg(text)
    assert m.default == "0"
    uuid = "bae9d9ac-cfb9-4e94-a5e5-faa77306bffb"
    assert [(e.path, e.release) for e in m.entries] == [
        ("Ubuntu", "6.8.0-88-generic"),
        (f"{boot.SUBMENU}>Ubuntu, with Linux 6.8.0-88-generic", "6.8.0-88-generic"),
        (f"{boot.SUBMENU}>Ubuntu, with Linux 6.8.0-88-generic (recovery mode)", "6.8.0-88-generic"),
    ]
    entry = boot.resolve_entry(m, f"gnulinux-advanced-{uuid}>gnulinux-6.8.0-88-generic-advanced-{uuid}")
    assert entry is not None and entry.args == "root=/dev/mapper/ubuntu--otus-ubuntu--lv ro"


def test_real_grubenv_block_reads() -> None:
    text = (REAL / "SECONDBEST__boot_grub_grubenv__next_entry.txt").read_text()
    assert boot.parse_grubenv(text) == {"next_entry": f"{boot.SUBMENU}>Ubuntu, with Linux 6.8.0-88-generic"}
