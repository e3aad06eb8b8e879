"""Per-assertion testinfra checks of one node (each assertion is its own remote command)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from sparkbase.facts.model import Gid as GidFacts
from sparkbase.facts.parsers.cpuset import parse_cpu_list, parse_fast_cpus
from sparkbase.facts.parsers.driver import GPU_QUERY, parse_nvidia_smi_query
from sparkbase.facts.parsers.secure_boot import parse_sb_state
from sparkbase.model.cmdline import rendered_kernel_args
from sparkbase.policy.gpu_clock import ClockState, judge_clock
from sparkbase.render import node_files

#: clock states the audit's gpu.clock passes (an idle GPU clocks down: not a latch)
CLOCK_PASSES = {ClockState.FULL, ClockState.IDLE}


def test_kernel_release(host: Any, baseline: Any) -> None:
    assert host.run("uname -r").stdout.strip() == baseline.kernel.release


def test_page_size(host: Any, baseline: Any) -> None:
    assert host.run("getconf PAGESIZE").stdout.strip() == str(baseline.kernel.page_size)


def test_cmdline(host: Any, baseline: Any) -> None:
    cmdline = host.file("/proc/cmdline").content_string.split()
    for arg in rendered_kernel_args(baseline):
        assert arg in cmdline


def test_driver(host: Any, baseline: Any) -> None:
    out = host.run("nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout
    assert out.strip() == baseline.driver.version


def test_gpu_clock(host: Any) -> None:
    query = ",".join(GPU_QUERY)
    result = host.run(f"nvidia-smi --query-gpu={query} --format=csv,noheader,nounits")
    judgement = judge_clock(parse_nvidia_smi_query(result.stdout, result.rc))
    if judgement.state is ClockState.UNKNOWN:  # as the audit: test_driver reports it
        pytest.skip(f"no SM clock reading ({judgement.reading})")
    assert judgement.state in CLOCK_PASSES, judgement.reading


def test_nccl_library(host: Any, baseline: Any) -> None:
    assert host.file(baseline.nccl.library.path).sha256sum == baseline.nccl.library.sha256


def test_rendered_files(host: Any, site: Any, node: str) -> None:
    for rendered in node_files(site, node):
        assert host.file(rendered.path).sha256sum == rendered.sha256, rendered.path


def test_thp(host: Any, baseline: Any) -> None:
    text = host.file("/sys/kernel/mm/transparent_hugepage/enabled").content_string
    assert f"[{baseline.memory.transparent_hugepages}]" in text or (
        text.strip() == baseline.memory.transparent_hugepages
    )


def test_sysctls(host: Any, baseline: Any) -> None:
    for key, value in baseline.memory.sysctls.items():
        assert " ".join(str(host.sysctl(key)).split()) == " ".join(value.split()), key


def test_rdma_devices(host: Any, baseline: Any) -> None:
    for hca in baseline.fabric.hca_names():
        assert host.file(f"/sys/class/infiniband/{hca}").is_directory


def test_gids(host: Any, expected: Any) -> None:
    index = expected.gid_index  # the inventory's for this node, else the baseline's
    for port in expected.baseline.fabric.ports:
        attrs = f"/sys/class/infiniband/{port.hca}/ports/1"
        kind = host.file(f"{attrs}/gid_attrs/types/{index}").content_string.strip()
        assert kind == "RoCE v2", port.hca
        gid = GidFacts(gid=host.file(f"{attrs}/gids/{index}").content_string.strip(), type=kind)
        cable = expected.cables.get(port.netdev)
        want = cable.address.split("/")[0] if cable else None
        assert gid.ipv4 is not None and (want is None or gid.ipv4 == want), (port.hca, gid.gid)


def test_mtu(host: Any, baseline: Any) -> None:
    for port in baseline.fabric.ports:
        assert host.file(f"/sys/class/net/{port.netdev}/mtu").content_string.strip() == str(
            baseline.fabric.mtu
        )


def test_secure_boot(host: Any, baseline: Any) -> None:
    state = parse_sb_state(host.run("mokutil --sb-state").stdout)
    assert state.enforcing == baseline.secure_boot.enabled, state.value


def test_nvidia_drm(host: Any, baseline: Any) -> None:
    for name, wanted in (
        ("modeset", baseline.host.nvidia_drm.modeset),
        ("fbdev", baseline.host.nvidia_drm.fbdev),
    ):
        value = host.file(f"/sys/module/nvidia_drm/parameters/{name}").content_string.strip()
        assert (value.upper() in {"Y", "1", "ON", "TRUE"}) == wanted, f"{name}={value}"


def test_boot_target(host: Any, baseline: Any) -> None:
    assert host.run("systemctl get-default").stdout.strip() == baseline.host.boot_target


def test_disabled_services(host: Any, baseline: Any) -> None:
    for unit in baseline.host.disable_services:
        service = host.service(unit)
        assert not service.is_enabled, unit
        assert not service.is_running, unit


def test_slice(host: Any, baseline: Any) -> None:
    out = host.run(f"systemctl show -p AllowedCPUs --value {baseline.cpuset.slice}").stdout
    assert parse_cpu_list(out.strip()) == frozenset(baseline.cpuset.cpus)  # a set: `5-9 15-19` is right


def test_slice_fast_cores(host: Any, baseline: Any) -> None:
    fast = parse_fast_cpus(host.file("/proc/cpuinfo").content_string)
    if fast:  # a cpuinfo without CPU parts says nothing either way, as in the audit
        assert set(baseline.cpuset.cpus) <= set(fast)


def test_governor(host: Any, baseline: Any) -> None:
    """A warning, as the audit grades it (host.governor is severity warn): never a failure."""
    want = baseline.host.cpu_governor
    if want is None:
        pytest.skip("the baseline does not manage the CPU governor")
    cpus = host.run("ls -d /sys/devices/system/cpu/cpu[0-9]*").stdout.split()
    assert cpus
    for cpu in cpus:
        governor = host.file(f"{cpu}/cpufreq/scaling_governor")
        if governor.exists and governor.content_string.strip() != want:
            warnings.warn(f"{cpu}: governor {governor.content_string.strip()}, not {want}", stacklevel=1)


def test_stamp(host: Any, site: Any, node: str) -> None:
    stamp = node_files(site, node)[-1]
    assert host.file(stamp.path).content_string == stamp.content


def test_packages(host: Any, baseline: Any) -> None:
    for pin in baseline.packages():
        assert host.package(pin.name).version == pin.version
