"""The lab's views a tool written for real Sparks reads (issue 24, point 7), checked with no
node: the GRUB default by menu-entry id, `grub-editenv` without a file, the DRM card's
driver link, thermal zones and ttys, `/boot/config-<release>`, the DKMS build's module
version, and the machine's own files hidden from a node's disk."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sparkbase.facts.parsers.kernel import parse_grub
from sparkbase.model.kernel import KernelSpec
from sparkbase_lab import boot, image, kconfig, packages
from sparkbase_lab.shims import cmd_grub, cmd_modules, common, sysfs

K64 = "7.0.0-1019-nvidia-64k"
K4 = "7.0.0-1019-nvidia"
UUID = boot.root_uuid("spark2")
FACTORY_GRUB = 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\nGRUB_CMDLINE_LINUX=""\n'


def _kernel(release: str) -> KernelSpec:
    return KernelSpec(release=release, package_version="7.0.0-1019.19~24.04.2",
                      page_size=65536 if release.endswith("-64k") else 4096)


# --- GRUB: the default by menu-entry id -----------------------------------------------


def test_sparkbase_names_the_default_by_entry_id_as_the_recipe_pins_it() -> None:
    # spark-ds41f docs/setup.md 0925e797: GRUB_DEFAULT="gnulinux-advanced-$uuid>gnulinux-R-advanced-$uuid"
    entry = _kernel(K64).grub_entry
    assert entry == f"gnulinux-advanced-${{GRUB_DEVICE_UUID}}>gnulinux-{K64}-advanced-${{GRUB_DEVICE_UUID}}"
    assert "Advanced options" not in entry


def test_grub_mkconfig_expands_the_root_uuid_in_a_drop_in_and_that_entry_boots() -> None:
    dropin = f'GRUB_DEFAULT="{_kernel(K64).grub_entry}"\n'
    settings = boot.grub_settings(FACTORY_GRUB, [dropin], UUID)
    assert settings["GRUB_DEFAULT"] == boot.entry_id_path(K64, UUID)
    cfg = boot.render_grub_cfg([K4, K64], settings, UUID)
    assert f'set default="{boot.entry_id_path(K64, UUID)}"' in cfg
    choice = boot.select_boot(boot.parse_grub_cfg(cfg), {}, {K4, K64}, set(), K4)
    assert (choice.release, choice.fallback_reason) == (K64, None)
    # the same grub.cfg read by the audit's parser boots the same kernel
    grub = parse_grub(cfg, "")
    assert grub.default_entry is not None and grub.default_entry.release == K64


def test_a_drop_in_for_another_node_names_no_entry_here() -> None:
    """The UUID is this node's: a file copied with another node's literal id boots entry 0."""
    other = boot.entry_id_path(K4, boot.root_uuid("spark1"))
    settings = boot.grub_settings(FACTORY_GRUB, [f'GRUB_DEFAULT="{other}"\n'], UUID)
    cfg = boot.render_grub_cfg([K4, K64], settings, UUID)
    assert parse_grub(cfg, "").default_entry is None
    choice = boot.select_boot(boot.parse_grub_cfg(cfg), {}, {K4, K64}, set(), K4)
    assert choice.release == K64 and "GRUB booted entry 0" in (choice.fallback_reason or "")


@pytest.mark.parametrize("form", ["id", "title"])
def test_the_audit_reads_both_forms_a_node_may_carry(form: str) -> None:
    """A site's node may still have a title path (written by hand, or by sparkbase < 0.7)."""
    default = boot.entry_id_path(K4, UUID) if form == "id" else boot.entry_path(K4)
    cfg = boot.render_grub_cfg([K4, K64], {"GRUB_DEFAULT": default}, UUID)
    grub = parse_grub(cfg, "")
    assert grub.default == default
    assert grub.default_entry is not None and grub.default_entry.release == K4


# --- grub-editenv ------------------------------------------------------------------


@pytest.fixture()
def grubenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "grubenv"
    path.write_text(boot.render_grubenv({"saved_entry": boot.entry_id_path(K4, UUID), "next_entry": "1"}))
    monkeypatch.setattr(cmd_grub, "GRUBENV", str(path))
    return path


@pytest.mark.parametrize("argv", [["list"], ["-", "list"], ["GRUBENV", "list"]])
def test_grub_editenv_lists_the_default_block_without_a_file(
    argv: list[str], grubenv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # util/grub-editenv.c (coreos/grub 0340bdbc): one argument is the command on the default file
    argv = [str(grubenv) if a == "GRUBENV" else a for a in argv]
    assert cmd_grub.cmd_grub_editenv(argv) == 0
    assert capsys.readouterr().out == f"saved_entry={boot.entry_id_path(K4, UUID)}\nnext_entry=1\n"


def test_grub_editenv_unset_without_a_file_is_a_file_name(grubenv: Path) -> None:
    """`grub-editenv unset next_entry` has two arguments: the first is the file, as GRUB reads it."""
    with pytest.raises(common.Fail, match="only"):
        cmd_grub.cmd_grub_editenv(["unset", "next_entry"])
    assert cmd_grub.cmd_grub_editenv(["-", "unset", "next_entry"]) == 0
    assert "next_entry" not in boot.parse_grubenv(grubenv.read_text())


def test_grub_editenv_refuses_an_unknown_command(grubenv: Path) -> None:
    with pytest.raises(common.Fail, match="Unknown command `lsit'"):
        cmd_grub.cmd_grub_editenv(["lsit"])


# --- /sys: the DRM card's driver, thermal zones, ttys --------------------------------


def _loaded(sys_root: Path, *modules: str) -> None:
    for module in modules:
        (sys_root / "module" / module).mkdir(parents=True)


def test_the_drm_card_links_to_the_nvidia_driver_as_the_recipes_doctor_reads_it(tmp_path: Path) -> None:
    _loaded(tmp_path, "nvidia", "nvidia_drm")
    sysfs.write_drm(tmp_path)
    # the doctor's loop also meets the connector (card0-HDMI-A-1): only card0 has a driver
    cards = sorted(p.name for p in (tmp_path / "class/drm").glob("card[0-9]*")
                   if (p / "device/driver").is_symlink()
                   and os.path.basename(os.readlink(p / "device/driver")) == "nvidia")
    assert cards == ["card0"]
    # bin/spark 0161d716: basename "$(readlink "$entry/device/driver")" = nvidia
    driver = tmp_path / "class/drm/card0/device/driver"
    assert os.path.basename(os.readlink(driver)) == "nvidia"
    assert Path(os.path.realpath(driver)) == tmp_path / "bus/pci/drivers/nvidia"
    assert os.readlink(tmp_path / "class/drm/card0/device") == "../../../000f:01:00.0"
    connector = tmp_path / "class/drm/card0-HDMI-A-1"
    card = Path(os.path.realpath(tmp_path / "class/drm/card0"))
    assert Path(os.path.realpath(connector / "device")) == card
    assert not (connector / "device/driver").exists()
    assert (tmp_path / "class/drm/card0/device/vendor").read_text() == "0x10de\n"
    bound = tmp_path / "bus/pci/drivers/nvidia/000f:01:00.0"
    assert Path(os.path.realpath(bound)) == Path(os.path.realpath(tmp_path / "class/drm/card0/device"))


def test_no_drm_card_and_no_driver_link_without_the_modules(tmp_path: Path) -> None:
    _loaded(tmp_path, "nvidia", "nvidia_drm")
    sysfs.write_drm(tmp_path)
    for module in ("nvidia_drm", "nvidia"):
        (tmp_path / "module" / module).rmdir()
    sysfs.write_drm(tmp_path)
    assert not list((tmp_path / "class/drm").glob("card*")) if (tmp_path / "class/drm").exists() else True
    assert not (tmp_path / "devices/pci000f:00/000f:00:00.0/000f:01:00.0/driver").is_symlink()


def test_thermal_zones_are_the_gb10s_acpi_zones(tmp_path: Path) -> None:
    sysfs.write_thermal([], tmp_path)
    zones = sorted((tmp_path / "class/thermal").glob("thermal_zone*"))
    assert len(zones) == 7  # lablup/all-smi issue 147: seven acpitz zones on a DGX Spark
    temps = [int((z / "temp").read_text()) / 1000 for z in zones]
    assert {(z / "type").read_text() for z in zones} == {"acpitz\n"}
    assert min(temps) == 38.9 and max(temps) == 41.7
    assert os.readlink(zones[0]) == "../../devices/virtual/thermal/thermal_zone0"
    assert not list((tmp_path / "class/thermal").glob("cooling_device*"))


def test_the_fan_modules_cooling_device_shows_while_it_is_loaded(tmp_path: Path) -> None:
    sysfs.write_thermal(["nvidia", "dgx_ec_fan_control"], tmp_path)
    # bin/spark 0161d716: grep -lx dgx_ec_fan_floor /sys/class/thermal/cooling_device*/type
    types = [p.read_text() for p in (tmp_path / "class/thermal").glob("cooling_device*/type")]
    assert types == ["dgx_ec_fan_floor\n"]
    sysfs.write_thermal(["nvidia"], tmp_path)
    assert not list((tmp_path / "class/thermal").glob("cooling_device*"))


def test_ttys_and_the_active_console(tmp_path: Path) -> None:
    sysfs.write_tty(tmp_path)
    tty = tmp_path / "class/tty"
    # scripts/host-recovery 052248c1: vt=$(cat /sys/class/tty/tty0/active)
    assert (tty / "tty0/active").read_text() == "tty1\n"
    assert (tty / "tty1/dev").read_text() == "4:1\n"
    assert {"tty", "console", "ptmx", "tty63"} <= {p.name for p in tty.iterdir()}
    assert not (tty / "tty64").exists()


# --- /boot/config-<release> ----------------------------------------------------------


@pytest.mark.parametrize(("release", "chosen", "shift"), [
    (K64, "ARM64_64K_PAGES", 16), (K4, "ARM64_4K_PAGES", 12), ("6.17.0-1032-nvidia", "ARM64_4K_PAGES", 12)])
def test_the_kernel_config_is_kconfig_shaped_with_the_flavours_page_size(
    release: str, chosen: str, shift: int
) -> None:
    text = kconfig.kernel_config(release)
    lines = text.splitlines()
    assert lines[:4] == ["#", "# Automatically generated file; DO NOT EDIT.",
                         f"# Linux/arm64 {release.split('-')[0]} Kernel Configuration", "#"]
    for line in lines:  # every line is a comment, blank, or CONFIG_X=value
        assert line == "" or line.startswith("#") or (line.startswith("CONFIG_") and "=" in line), line
    choice = ("ARM64_4K_PAGES", "ARM64_16K_PAGES", "ARM64_64K_PAGES")
    assert [name for name in choice if f"CONFIG_{name}=y" in lines] == [chosen]
    unset = [name for name in choice if f"# CONFIG_{name} is not set" in lines]
    assert unset == [name for name in choice if name != chosen]
    assert f"CONFIG_PAGE_SHIFT={shift}" in lines
    # the recipe's check (scripts/kernel_readiness.py 0ad64e14)
    assert ("CONFIG_ARM64_64K_PAGES=y" in text) == release.endswith("-64k")
    assert len(lines) > 50


def test_the_kernel_image_package_carries_that_config() -> None:
    image_pkg = next(p for p in packages.CATALOGUE if p.name == f"linux-image-{K64}")
    config = next(f for f in image_pkg.files if f.path == f"/boot/config-{K64}")
    assert config.content.decode() == kconfig.kernel_config(K64)


# --- DKMS builds: modinfo's version is the source's MODULE_VERSION --------------------


def _source_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    files = {f.path: f.content.decode("utf-8", "replace") for p in packages.CATALOGUE for f in p.files}
    monkeypatch.setattr(cmd_modules, "read_text", lambda path, *a: files.get(str(path), ""))


def test_the_memory_saver_reports_the_drivers_version_not_the_dkms_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the recipe wants modinfo -F version nvidia_uvm == 580.178.04 (kernel_readiness.py 0ad64e14);
    # a real DKMS-built nvidia-uvm prints the driver's version (nvidia-vaapi-driver issue 260)
    _source_reader(monkeypatch)
    fields = dict(cmd_modules._module_lines("dgx-spark-memory-saver", "0.2.0", K64, "nvidia-uvm", {}))
    assert fields["version"] == packages.VARIANT_DRIVER == "580.178.04"
    assert fields["srcversion"] == packages.MEMORY_SAVER_SRCVERSION


def test_a_dkms_source_without_module_version_has_no_version_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cmd_modules, "read_text", lambda path, *a: "static int x = 0;\n")
    fields = dict(cmd_modules._module_lines("some-dkms", "1.2.3", K64, "some", {}))
    assert "version" not in fields


# --- the machine's own files -----------------------------------------------------------


def test_a_nodes_disk_hides_the_machines_own_directories(tmp_path: Path) -> None:
    machine, upper = tmp_path / "machine", tmp_path / "upper"
    for name in ("usr", "etc", "work", "farm", "lib64", "old_root"):
        (machine / name).mkdir(parents=True)
    (machine / "container_info.json").write_text("{}")
    upper.mkdir()
    (upper / "farm").mkdir()  # the node's own (kept)
    try:
        hidden = image.hide_machine(upper, machine)
    except OSError as exc:  # trusted.* xattrs and device nodes need root
        pytest.skip(f"needs root: {exc}")
    assert hidden == ["container_info.json", "old_root", "work"]
    for name in hidden:
        mode = os.lstat(upper / name)
        assert stat.S_ISCHR(mode.st_mode) and mode.st_rdev == os.makedev(0, 0)  # overlayfs whiteout
    for rel in image.MACHINE_DIRS:
        assert os.getxattr(upper / rel, "trusted.overlay.opaque") == b"y"
    assert "usr/local" in image.MACHINE_DIRS
    assert sorted(p.name for p in (upper / "usr/local").iterdir()) == [
        "bin", "etc", "games", "include", "lib", "man", "sbin", "share", "src"]
    assert image.hide_machine(upper, machine) == []  # idempotent
