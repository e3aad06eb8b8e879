"""Per-assertion testinfra checks of one node (each assertion is its own remote command)."""

from __future__ import annotations

from typing import Any

from sparkbase.render import kernel_cmdline, render_node


def test_kernel_release(host: Any, baseline: Any) -> None:
    assert host.run("uname -r").stdout.strip() == baseline.kernel.release


def test_page_size(host: Any, baseline: Any) -> None:
    assert host.run("getconf PAGESIZE").stdout.strip() == str(baseline.kernel.page_size)


def test_cmdline(host: Any, baseline: Any) -> None:
    cmdline = host.file("/proc/cmdline").content_string.split()
    for arg in kernel_cmdline(baseline):
        assert arg in cmdline


def test_driver(host: Any, baseline: Any) -> None:
    out = host.run("nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout
    assert out.strip() == baseline.driver.version


def test_gpu_clock(host: Any) -> None:
    out = host.run("nvidia-smi --query-gpu=clocks.sm --format=csv,noheader,nounits").stdout
    assert int(out.strip()) >= 1000


def test_nccl_library(host: Any, baseline: Any) -> None:
    assert host.file(baseline.nccl.library.path).sha256sum == baseline.nccl.library.sha256


def test_rendered_files(host: Any, site: Any, node: str) -> None:
    for rendered in render_node(site, node):
        assert host.file(rendered.path).sha256sum == rendered.sha256, rendered.path


def test_thp(host: Any, baseline: Any) -> None:
    text = host.file("/sys/kernel/mm/transparent_hugepage/enabled").content_string
    assert f"[{baseline.memory.transparent_hugepages}]" in text or (
        text.strip() == baseline.memory.transparent_hugepages
    )


def test_sysctls(host: Any, baseline: Any) -> None:
    for key, value in baseline.memory.sysctls.items():
        assert str(host.sysctl(key)) == value


def test_rdma_devices(host: Any, baseline: Any) -> None:
    for hca in baseline.fabric.hca_names():
        assert host.file(f"/sys/class/infiniband/{hca}").is_directory


def test_gids(host: Any, baseline: Any) -> None:
    index = baseline.fabric.gid_index
    for hca in baseline.fabric.hca_names():
        kind = host.file(f"/sys/class/infiniband/{hca}/ports/1/gid_attrs/types/{index}")
        assert kind.content_string.strip() == "RoCE v2"
        gid = host.file(f"/sys/class/infiniband/{hca}/ports/1/gids/{index}").content_string
        assert "ffff" in gid


def test_mtu(host: Any, baseline: Any) -> None:
    for port in baseline.fabric.ports:
        assert host.file(f"/sys/class/net/{port.netdev}/mtu").content_string.strip() == str(
            baseline.fabric.mtu
        )


def test_secure_boot(host: Any, baseline: Any) -> None:
    state = host.run("mokutil --sb-state").stdout
    assert ("enabled" in state) == baseline.secure_boot.enabled


def test_nvidia_drm(host: Any, baseline: Any) -> None:
    for name, wanted in (
        ("modeset", baseline.host.nvidia_drm.modeset),
        ("fbdev", baseline.host.nvidia_drm.fbdev),
    ):
        value = host.file(f"/sys/module/nvidia_drm/parameters/{name}").content_string.strip()
        assert value == ("Y" if wanted else "N")


def test_boot_target(host: Any, baseline: Any) -> None:
    assert host.run("systemctl get-default").stdout.strip() == baseline.host.boot_target


def test_disabled_services(host: Any, baseline: Any) -> None:
    for unit in baseline.host.disable_services:
        assert not host.service(unit).is_enabled


def test_slice(host: Any, baseline: Any) -> None:
    out = host.run(f"systemctl show -p AllowedCPUs --value {baseline.cpuset.slice}").stdout
    assert out.strip() == baseline.cpuset.cpulist()


def test_governor(host: Any) -> None:
    for cpu in range(20):
        path = f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"
        assert host.file(path).content_string.strip() == "performance"


def test_stamp(host: Any, site: Any, node: str) -> None:
    stamp = render_node(site, node)[-1]
    assert host.file(stamp.path).content_string == stamp.content


def test_packages(host: Any, baseline: Any) -> None:
    for pin in baseline.packages():
        assert host.package(pin.name).version == pin.version
