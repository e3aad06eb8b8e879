"""The stand-in package catalogue and the repository builder."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from sparkbase_lab import packages


def names_versions() -> set[tuple[str, str]]:
    return {(p.name, p.version) for p in packages.CATALOGUE}


def test_catalogue_has_every_kernel_and_driver_combination() -> None:
    have = names_versions()
    for release, kver in packages.KERNELS.items():
        for prefix in ("linux-image-", "linux-headers-", "linux-modules-"):
            assert (prefix + release, kver) in have
        for driver in packages.DRIVERS:
            assert (f"linux-modules-nvidia-580-open-{release}", f"{driver}-0ubuntu1+{kver}") in have
    for driver in packages.DRIVERS:
        assert ("nvidia-utils-580", driver) in have


def test_catalogue_has_ubuntus_versions_of_the_pinned_kernels_and_drivers() -> None:
    """As Ubuntu's archive versions them: `~24.04.N` kernels, the NVIDIA module package at the
    kernel's version `+1`, nvidia-utils at `<driver>-0ubuntu0.24.04.1`."""
    have = names_versions()
    for release, (kver, _driver) in packages.UBUNTU_KERNELS.items():
        for prefix in ("linux-image-", "linux-headers-", "linux-modules-"):
            assert (prefix + release, kver) in have
        assert (f"linux-modules-nvidia-580-open-{release}", f"{kver}+1") in have
    for version in packages.UBUNTU_UTILS.values():
        assert ("nvidia-utils-580", version) in have
    assert len(have) == len(packages.CATALOGUE), "no package version twice"


def test_catalogue_names_others_rely_on() -> None:
    have = names_versions()
    for pair in [
        ("nccl-site-ring4", "2.27.7-1+site.ring4.p3"), ("libnccl2", "2.28.9-1+cuda13.0"),
        ("dgx-spark-memory-saver", "0.2.0-1"), ("dgx-spark-fan-control", "0.1.3-1"),
        ("nvidia-drm-options-modeset0", "25.07-1"),
        ("grub-kho-off", "1.0-1"),
    ]:
        assert pair in have
    assert len(have) == len(packages.CATALOGUE), "duplicate name=version"


def test_module_versions_match_driver() -> None:
    for p in packages.CATALOGUE:
        if p.name.startswith("linux-modules-nvidia-580-open-"):
            names = sorted(f.path.rsplit("/", 1)[1] for f in p.files)
            assert names == ["nvidia-drm.ko", "nvidia-modeset.ko", "nvidia-uvm.ko", "nvidia.ko"]
            for ko in p.files:
                release = p.name.removeprefix("linux-modules-nvidia-580-open-")
                driver = packages.nvidia_module_version(p.version, release)
                assert f"version={driver}\n".encode() in ko.content


def test_nccl_files_are_stable_and_hashed() -> None:
    site = packages.find(packages.NCCL_SITE_PACKAGE, packages.NCCL_SITE_VERSION)
    (lib,) = site.files
    assert lib.path == packages.NCCL_SITE_PATH
    assert len(lib.content) > 100_000
    assert hashlib.sha256(lib.content).hexdigest() == packages.NCCL_SITE_SHA256
    assert packages.library_sha256(packages.NCCL_STOCK_PATH) == packages.NCCL_STOCK_SHA256
    assert packages.NCCL_SITE_SHA256 != packages.NCCL_STOCK_SHA256
    # pinned: baselines carry this value
    assert packages.NCCL_SITE_SHA256 == "585287f61a4b7ff7c4978033aa8b0bd2eddb29f28b2666ccc9ea93868e6a2a6d"


def test_dkms_conf_and_fan_unit() -> None:
    dkms = packages.find("dgx-spark-memory-saver", "0.2.0-1")
    files = {f.path: f.content.decode() for f in dkms.files}
    conf = files["/usr/src/dgx-spark-memory-saver-0.2.0/dkms.conf"]
    # the saver's own dkms.conf (christopherowen/dgx-spark-memory-saver 5971feb9)
    for line in ('PACKAGE_NAME="dgx-spark-memory-saver"', 'BUILT_MODULE_NAME[0]="nvidia-uvm"',
                 'DEST_MODULE_LOCATION[0]="/updates/dkms"',
                 'BUILD_EXCLUSIVE_KERNEL="^7[.]0[.]0-1019-nvidia-64k$"'):
        assert line in conf
    source = files["/usr/src/dgx-spark-memory-saver-0.2.0/nvidia-uvm.c"]
    assert "uvm_pack_sysmem_leaf_tables = true" in source
    assert packages.MEMORY_SAVER_SRCVERSION in source
    fan = {f.path: f.content.decode() for f in packages.find("dgx-spark-fan-control", "0.1.3-1").files}
    unit = fan["/lib/systemd/system/dgx-fan-control.service"]
    assert "WantedBy=multi-user.target" in unit and "After=systemd-modules-load.service" in unit
    # the fan repository's own dkms.conf (d19178a0), at the fleet's DKMS version
    for line in ('PACKAGE_NAME="dgx-spark-fan-control"', 'PACKAGE_VERSION="0.1.3"',
                 'BUILT_MODULE_NAME[0]="dgx_ec_fan_control"', 'BUILT_MODULE_LOCATION[0]="kernel"',
                 'BUILD_EXCLUSIVE_ARCH="^aarch64$"'):
        assert line in fan["/usr/src/dgx-spark-fan-control-0.1.3/dkms.conf"]
    assert "/usr/src/dgx-spark-fan-control-0.1.3/kernel/dgx_ec_fan_control.c" in fan
    override = packages.find("nvidia-drm-options-modeset0", "25.07-1").files
    assert [(f.path, f.content) for f in override] == [
        ("/etc/modprobe.d/zz-nvidia-drm-override.conf", b"options nvidia-drm modeset=0\n")]
    assert "nvidia-drm-options-modeset0" in {p.name for p in packages.factory_packages()}


def test_factory_set() -> None:
    names = {p.name for p in packages.factory_packages()}
    assert f"linux-image-{packages.FACTORY_KERNEL}" in names
    assert "gdm3" in names and "nccl-site-ring4" not in names


def test_hash_is_stable() -> None:
    assert packages.catalogue_hash() == packages.catalogue_hash()


def test_install_offline_registers_packages(tmp_path: Path) -> None:
    base = tmp_path / "status"
    base.write_text("Package: base\nStatus: install ok installed\nVersion: 1\n")
    upper = tmp_path / "upper"
    pkg = packages.find(packages.NCCL_SITE_PACKAGE, packages.NCCL_SITE_VERSION)
    packages.install_offline([pkg], upper, base)
    status = (upper / "var/lib/dpkg/status").read_text()
    assert "Package: base" in status and "Package: nccl-site-ring4\nStatus: install ok installed" in status
    listed = (upper / "var/lib/dpkg/info/nccl-site-ring4.list").read_text().split()
    assert packages.NCCL_SITE_PATH in listed and "/opt/nccl-site" in listed
    assert (upper / "opt/nccl-site/lib/libnccl.so.2").readlink() == Path("libnccl.so.2.27.7")


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb not installed")
def test_build_repo_once(tmp_path: Path) -> None:
    repo = tmp_path / "apt"
    assert packages.build_repo(repo) is True
    index = (repo / "Packages").read_text()
    assert index.count("Package: ") == len(packages.CATALOGUE)
    assert "Filename: ./nccl-site-ring4_2.27.7-1+site.ring4.p3_all.deb" in index
    assert packages.build_repo(repo) is False


def test_the_fixed_packages_are_data_read_in_their_order() -> None:
    """The desktop, service and tuning stand-ins come from catalogue.json (issue 23.5), whole:
    every entry a package of the catalogue, its file texts ending in a newline."""
    document = json.loads(packages.FIXED_CATALOGUE.read_text())
    listed = [(entry["name"], entry["version"]) for entry in document["packages"]]
    assert [(p.name, p.version) for p in packages.FIXED_PACKAGES] == listed
    assert set(listed) <= names_versions()
    gdm = packages.find("gdm3", "46.2-1ubuntu1")
    (unit,) = gdm.files
    assert unit.path == "/lib/systemd/system/gdm3.service" and unit.mode == 0o644
    assert unit.content.decode().endswith("Alias=display-manager.service\n")
    cpupower = next(f for p in packages.FIXED_PACKAGES for f in p.files if f.path == "/usr/bin/cpupower")
    assert cpupower.mode == 0o755 and cpupower.content.startswith(b"#!/bin/sh\n")
    factory = {p.name for p in packages.factory_packages()}
    assert set(packages.FACTORY_SERVICE_PACKAGES) | {"gdm3", "cups", "nvidia-nvme-options"} <= factory


@pytest.mark.parametrize(("entry", "says"), [
    ({"name": "x", "version": "1", "description": "d", "depends": "y"}, "package 0: keys must be"),
    ({"name": "x", "version": "1"}, "package 0: keys must be"),
    ({"name": "x", "version": "1", "description": "d", "files": [{"path": "/a"}]},
     "package 0 (x): a file is"),
    ({"name": "x", "version": "1", "description": "d", "files": [{"path": "/a", "lines": "text"}]},
     "package 0 (x) /a: lines must be"),
])
def test_a_bad_catalogue_entry_is_named(entry: dict[str, object], says: str, tmp_path: Path) -> None:
    data = tmp_path / "catalogue.json"
    data.write_text(json.dumps({"format": 1, "packages": [entry]}))
    with pytest.raises(ValueError, match=re.escape(says)):
        packages.load_fixed_packages(data)
