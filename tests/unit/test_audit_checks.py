"""Every check on a converged node passes; each drift fails exactly the check named for it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from test_audit_support import converged, converged_node, grub_boot, shipped

from sparkbase.audit.checks import node_checks, planned_checks
from sparkbase.audit.expected import Expected, expected_for
from sparkbase.audit.registry import NodeCheck, Outcome, Subject, ok
from sparkbase.audit.run import build_report, judge_fleet, judge_node
from sparkbase.facts.model import (
    FactsResult,
    FstabEntry,
    Gid,
    GpuFacts,
    Interface,
    NodeFacts,
    SecureBoot,
    UnitState,
    Unreachable,
)
from sparkbase.model.site import Site
from sparkbase.render import node_files

SITE = shipped()
SITE_BASELINE = "site-stock-6.17-4k"
VARIANT = "ds41f-7x-64k"


@pytest.fixture(scope="module")
def site() -> Site:
    return SITE


@pytest.mark.parametrize("baseline", [SITE_BASELINE, VARIANT])
def test_converged_node_passes_every_check(site: Site, baseline: str) -> None:
    expected, facts = converged_node(site, "spark2", baseline)
    results = judge_node(expected, facts)
    failed = [(r.id, r.observed) for r in results if r.status == "fail"]
    assert failed == []
    assert len(results) > 30


def test_expected_files_are_what_render_node_gives(site: Site) -> None:
    expected = expected_for(site, "spark3")
    assert [(f.path, f.sha256) for f in expected.files] == [
        (f.path, f.sha256) for f in node_files(site, "spark3")
    ]


def test_every_registered_check_applies_to_a_shipped_baseline(site: Site) -> None:
    covered = set()
    for baseline in (SITE_BASELINE, VARIANT):
        expected = expected_for(site, "spark1", baseline)
        covered |= {planned.check for planned in planned_checks(expected)}
    assert covered == set(node_checks())


@pytest.mark.parametrize("baseline", sorted(SITE.baselines))
def test_no_check_crashes_on_any_node_under_any_baseline(site: Site, baseline: str) -> None:
    """Every check plans and judges every node of the site under every baseline it has (a
    crash would be reported as that check failing: `check crashed: ...`)."""
    for node in sorted(site.inventory.nodes):
        expected = expected_for(site, node, baseline)
        results = judge_node(expected, converged(expected))
        assert results, f"nothing judged on {node}"
        assert [(r.id, r.observed) for r in results if "check crashed" in (r.observed or "")] == []


def _gpu(clock: int) -> Callable[[NodeFacts], NodeFacts]:
    return lambda f: replace(f, gpu=GpuFacts(f.gpu.driver_version, clock, 10.1))


def _set(**changes: object) -> Callable[[NodeFacts], NodeFacts]:
    return lambda f: replace(f, **changes)  # type: ignore[arg-type]


def _with_file(path: str, digest: str | None) -> Callable[[NodeFacts], NodeFacts]:
    return lambda f: replace(f, file_sha256={**f.file_sha256, path: digest})


def _sysctl(key: str, value: str) -> Callable[[NodeFacts], NodeFacts]:
    return lambda f: replace(f, sysctls={**f.sysctls, key: value})


def _unit(unit: str, state: UnitState) -> Callable[[NodeFacts], NodeFacts]:
    return lambda f: replace(f, units={**f.units, unit: state})


def _gid(hca: str, gid: Gid) -> Callable[[NodeFacts], NodeFacts]:
    return lambda f: replace(f, gids={**f.gids, hca: gid})


def _iface(name: str, **changes: object) -> Callable[[NodeFacts], NodeFacts]:
    return lambda f: replace(f, interfaces={**f.interfaces, name: replace(f.interfaces[name], **changes)})  # type: ignore[arg-type]


NCCL_CONF = "/etc/nccl.conf"
SITE_DRIFTS: list[tuple[str, Callable[[NodeFacts], NodeFacts], set[str]]] = [
    ("old kernel", _set(kernel_release="6.17.0-1008-nvidia"), {"kernel.release"}),
    ("64k pages", _set(page_size=65536), {"kernel.page_size"}),
    ("splash on cmdline", lambda f: replace(f, cmdline=(*f.cmdline, "splash")), {"kernel.cmdline"}),
    ("kho=off on cmdline", lambda f: replace(f, cmdline=(*f.cmdline, "kho=off")), {"kernel.cmdline"}),
    (
        "thp arg missing",
        lambda f: replace(f, cmdline=tuple(a for a in f.cmdline if "hugepage" not in a)),
        {"kernel.cmdline"},
    ),
    ("driver", lambda f: replace(f, gpu=GpuFacts("580.95.05", 2418, 35.0)), {"driver.version"}),
    ("nvidia-smi fails", _set(gpu=GpuFacts(error="nvidia-smi exit 18: mismatch")), {"driver.version"}),
    ("latched GPU", _gpu(611), {"gpu.clock"}),
    ("other NCCL", _set(file_sha256=None), set()),  # placeholder replaced below
    (
        "nccl.conf edited",
        lambda f: replace(
            f,
            file_sha256={**f.file_sha256, NCCL_CONF: "0" * 64},
            nccl_conf=(f.nccl_conf or "").replace("NCCL_IB_MERGE_NICS=0", "NCCL_IB_MERGE_NICS=1"),
        ),
        {"nccl.conf"},
    ),
    ("netplan edited", _with_file("/etc/netplan/60-sparkbase-fabric.yaml", "1" * 64), {"fabric.netplan"}),
    ("MTU 1500", _iface("enp1s0f0np0", mtu=1500), {"fabric.link.enp1s0f0np0"}),
    ("link down", _iface("enP2p1s0f1np1", operstate="DOWN"), {"fabric.link.enP2p1s0f1np1"}),
    (
        "HCA missing",
        lambda f: replace(f, rdma_devices=tuple(d for d in f.rdma_devices if d != "rocep1s0f1")),
        {"fabric.rdma.rocep1s0f1"},
    ),
    (
        "GID moved",
        _gid("rocep1s0f0", Gid("fe80:0000:0000:0000:0000:0000:0000:0001", "RoCE v2")),
        {"fabric.gid.rocep1s0f0"},
    ),
    (
        "GID v1",
        _gid("roceP2p1s0f0", Gid("0000:0000:0000:0000:0000:ffff:c0a8:6502", "IB/RoCE v1")),
        {"fabric.gid.roceP2p1s0f0"},
    ),
    (
        "GID wrong subnet",
        _gid("rocep1s0f0", Gid("0000:0000:0000:0000:0000:ffff:c0a8:6601", "RoCE v2")),
        {"fabric.gid.rocep1s0f0"},
    ),
    ("THP never", _set(thp="never"), {"memory.thp"}),
    ("sysctl", _sysctl("vm.min_free_kbytes", "67584"), {"sysctl.vm.min_free_kbytes"}),
    ("Secure Boot off", _set(secure_boot=SecureBoot.DISABLED), {"secure_boot.state"}),
    ("Secure Boot not enforcing", _set(secure_boot=SecureBoot.NOT_ENFORCING), {"secure_boot.state"}),
    ("Secure Boot setup mode", _set(secure_boot=SecureBoot.SETUP_MODE), {"secure_boot.state"}),
    (
        "modeset on",
        lambda f: replace(f, module_params={**f.module_params, "nvidia_drm.modeset": "Y"}),
        {"host.nvidia_drm"},
    ),
    ("graphical", _set(default_target="graphical.target"), {"host.boot_target"}),
    (
        "display manager",
        _unit("display-manager.service", UnitState("alias", "active")),
        {"host.display_manager"},
    ),
    ("cups enabled", _unit("cups.service", UnitState("enabled", "active")), {"service.cups.service"}),
    ("slice", _set(slice_allowed_cpus=frozenset(range(20))), {"cpuset.slice"}),
    ("slice unset", _set(slice_allowed_cpus=None), {"cpuset.slice"}),
    (
        "sysctl.d edited",
        _with_file("/etc/sysctl.d/90-sparkbase.conf", None),
        {"file./etc/sysctl.d/90-sparkbase.conf"},
    ),
    ("no stamp", _set(stamp=None), {"stamp"}),
    (
        "other baseline stamp",
        lambda f: replace(f, stamp={**(f.stamp or {}), "baseline": "ds41f-7x-64k"}),
        {"stamp", "stamp.assignment"},
    ),
    (
        "same version, other hash",
        lambda f: replace(f, stamp={**(f.stamp or {}), "baseline_sha256": "f" * 64}),
        {"stamp"},
    ),
    (
        "package",
        lambda f: replace(f, packages={**f.packages, "nvidia-utils-580": "580.95.05"}),
        {"package.nvidia-utils-580"},
    ),
    (
        "variant leftovers installed",
        lambda f: replace(f, packages={**f.packages, "libnccl2": "2.28.9-1+cuda13.0",
                                       "linux-image-7.0.0-1019-nvidia-64k": "7.0.0-1019.19"}),
        {"packages.foreign"},
    ),
]
SITE_KERNEL = "6.17.0-1032-nvidia"
FACTORY_KERNEL = "6.17.0-1008-nvidia"
ADVANCED = "Advanced options for Ubuntu>Ubuntu, with Linux "
SITE_DRIFTS += [
    (
        "grub-reboot to another kernel",
        _set(grub=grub_boot(SITE_KERNEL, grubenv=f"next_entry={ADVANCED}9.9.0-1001-nvidia\n")),
        {"boot.grub_default"},
    ),
    ("GRUB default is the newest", _set(grub=grub_boot(SITE_KERNEL, default="0")), {"boot.grub_default"}),
    (
        "GRUB_DEFAULT=saved, grub-set-default to another kernel",
        _set(grub=grub_boot(SITE_KERNEL, default="${saved_entry}",
                            grubenv=f"saved_entry={ADVANCED}9.9.0-1001-nvidia\n")),
        {"boot.grub_default"},
    ),
    (
        "no GRUB entry for the kernel",
        _set(grub=grub_boot(FACTORY_KERNEL, default=f"{ADVANCED}{SITE_KERNEL}")),
        {"boot.grub_default"},
    ),
    (
        "the variant's swap file back in fstab",
        lambda f: replace(f, fstab=(*(f.fstab or ()), FstabEntry("/swap-64k.img", "none", "swap", "sw"))),
        {"memory.swap.foreign_fstab"},
    ),
    ("older DGX OS", _set(dgx_release={"DGX_SWBUILD_VERSION": "7.2.3"}), {"os.release"}),
    ("no /etc/dgx-release", _set(dgx_release=None), {"os.release"}),
]
SITE_DRIFTS[8] = (
    "other NCCL library",
    lambda f: replace(f, file_sha256={**f.file_sha256, "/opt/nccl-site/lib/libnccl.so.2.27.7": "2" * 64}),
    {"nccl.library"},
)


@pytest.mark.parametrize(("name", "drift", "ids"), SITE_DRIFTS, ids=[d[0] for d in SITE_DRIFTS])
def test_drift_names_the_right_check(
    site: Site, name: str, drift: Callable[[NodeFacts], NodeFacts], ids: set[str]
) -> None:
    expected, facts = converged_node(site, "spark1", SITE_BASELINE)
    results = judge_node(expected, drift(facts))
    failed = {r.id for r in results if r.status == "fail"}
    assert failed == ids
    for result in results:
        if result.status == "fail":
            assert result.fix and result.expected is not None and result.observed is not None


def _variant_pins_a_mok() -> bool:
    return SITE.baselines[VARIANT].secure_boot.mok_fingerprint is not None


VARIANT_DRIFTS: list[tuple[str, Callable[[NodeFacts], NodeFacts], set[str]]] = [
    ("swap off", _set(swaps=()), {"memory.swap"}),
    ("swap 4k header", _set(swap_header_page_size={"/swap-64k.img": 4096}), {"memory.swap"}),
    (
        "swap less its header page, as the kernel counts it",
        lambda f: replace(f, swaps=(replace(f.swaps[0], size_bytes=16 * 1024**3 - 65536),)),
        set(),
    ),
    (
        "swap too small",
        lambda f: replace(f, swaps=(replace(f.swaps[0], size_bytes=8 * 1024**3),)),
        {"memory.swap"},
    ),
    ("saver not built",
     lambda f: replace(f, dkms=tuple(e for e in f.dkms if e.name != "dgx-spark-memory-saver")),
     {"memory_saver.dkms"}),
    (
        "saver unsigned",
        lambda f: replace(f, memory_saver=replace(f.memory_saver, sig_key=None)),  # type: ignore[type-var]
        {"memory_saver.signature"},
    ),
    ("key not enrolled", _set(mok_certificates=()),
     {"memory_saver.signature", "host.fan_control.signature", "secure_boot.mok"}),
    (
        "signed by another key",
        lambda f: replace(f, memory_saver=replace(f.memory_saver, sig_key="40:E5:D9:9D"),  # type: ignore[type-var]
                          dkms_noise=("Deprecated feature: REMAKE_INITRD",)),
        # with no pinned MOK, a signer no enrolled certificate matches is also a missing enrolment
        {"memory_saver.signature"} | ({"secure_boot.mok"} if not _variant_pins_a_mok() else set()),
    ),
    (
        "stock nvidia-uvm loaded (the recipe's srcversion not)",
        lambda f: replace(f, nvidia_modules={**f.nvidia_modules, "nvidia_uvm.srcversion": "NVIDIA_UVM01"}),
        {"memory_saver.loaded"},
    ),
    (
        "packing off",
        lambda f: replace(
            f, module_params={**f.module_params, "nvidia_uvm.uvm_pack_sysmem_leaf_tables": "N"}
        ),
        {"memory_saver.loaded"},
    ),
    ("fan off", _unit("dgx-fan-control.service", UnitState("disabled", "inactive")),
     {"host.fan_control.service"}),
    ("fan module not built for the running kernel",
     lambda f: replace(f, dkms=tuple(e for e in f.dkms if e.name != "dgx-spark-fan-control")),
     {"host.fan_control.dkms"}),
    ("fan module unsigned",
     lambda f: replace(f, fan_control=replace(f.fan_control, sig_key=None, signer=None)),  # type: ignore[type-var]
     {"host.fan_control.signature"}),
    ("fan module not loaded", lambda f: replace(f, modules=f.modules - {"dgx_ec_fan_control"}),
     {"host.fan_control.loaded"}),
    ("modeset0 override still installed",
     lambda f: replace(f, packages={**f.packages, "nvidia-drm-options-modeset0": "25.07-1"}),
     {"host.nvidia_drm.purge"}),
    ("modeset off (the override's option in the initramfs)",
     lambda f: replace(f, module_params={**f.module_params, "nvidia_drm.modeset": "N"}),
     {"host.nvidia_drm"}),
    (
        "site NCCL left",
        lambda f: replace(f, packages={**f.packages, "nccl-site-ring4": "2.27.7-1+site.ring4.p3"}),
        {"packages.foreign"},
    ),
    (
        "fbdev off",
        lambda f: replace(f, module_params={**f.module_params, "nvidia_drm.fbdev": "N"}),
        {"host.nvidia_drm"},
    ),
    (
        # the boot unit activates it: a line would fail at boot on the 4 KiB fallback kernel
        "swap file listed in fstab as auto",
        lambda f: replace(f, fstab=(*(f.fstab or ()), FstabEntry("/swap-64k.img", "none", "swap", "sw"))),
        {"memory.swap.fstab"},
    ),
    (
        "swap file listed noauto: harmless",
        lambda f: replace(f, fstab=(*(f.fstab or ()), FstabEntry("/swap-64k.img", "none", "swap", "noauto"))),
        set(),
    ),
    (
        "boot swap unit disabled",
        lambda f: replace(f, units={**f.units, "sparkbase-swap.service": UnitState("disabled", "inactive")}),
        {"memory.swap.boot_unit"},
    ),
    ("APST not pinned", lambda f: replace(f, cmdline=tuple(a for a in f.cmdline if "nvme" not in a)),
     {"kernel.cmdline"}),
]


@pytest.mark.parametrize(("name", "drift", "ids"), VARIANT_DRIFTS, ids=[d[0] for d in VARIANT_DRIFTS])
def test_variant_drift_names_the_right_check(
    site: Site, name: str, drift: Callable[[NodeFacts], NodeFacts], ids: set[str]
) -> None:
    expected, facts = converged_node(site, "spark1", VARIANT)
    failed = {r.id for r in judge_node(expected, drift(facts)) if r.status == "fail"}
    assert failed == ids


def test_nccl_conf_is_read_as_nccl_reads_it(site: Site) -> None:
    """/etc/nccl.conf with the pinned MERGE_NICS=0 after a MERGE_NICS=1: NCCL takes the first
    line, 1; the check says so (not "same settings, different file")."""
    expected, facts = converged_node(site)
    conf = facts.nccl_conf or ""
    doubled = replace(facts, file_sha256={**facts.file_sha256, NCCL_CONF: "0" * 64},
                      nccl_conf="NCCL_IB_MERGE_NICS=1\n" + conf)
    result = next(r for r in judge_node(expected, doubled) if r.id == "nccl.conf")
    assert result.status == "fail"
    assert result.observed == "NCCL_IB_MERGE_NICS=1 (as NCCL reads the file: the first line of a key wins)"
    spaced = replace(doubled, nccl_conf=conf.replace("NCCL_IB_MERGE_NICS=0", "NCCL_IB_MERGE_NICS = 0"))
    result = next(r for r in judge_node(expected, spaced) if r.id == "nccl.conf")
    assert result.observed is not None and "'NCCL_IB_MERGE_NICS '=' 0'" in result.observed
    assert "NCCL_IB_MERGE_NICS=(unset)" in result.observed


def test_latch_fix_says_unplug(site: Site) -> None:
    expected, facts = converged_node(site)
    result = next(r for r in judge_node(expected, _gpu(611)(facts)) if r.id == "gpu.clock")
    assert result.severity == "error" and result.fix == "full AC disconnect (unplug power), then re-run"
    assert result.observed is not None and "611 MHz" in result.observed


def test_package_drift_is_only_a_warning(site: Site) -> None:
    expected, facts = converged_node(site)
    drifted = replace(facts, packages={})
    results = [r for r in judge_node(expected, drifted) if r.status == "fail"]
    assert results and all(r.severity == "warn" and not r.blocking for r in results)


def test_foreign_packages_are_a_warning_naming_each_with_its_version(site: Site) -> None:
    expected, facts = converged_node(site)
    assert "dgx-spark-fan-control" in expected.foreign_packages
    assert "nccl-site-ring4" not in expected.foreign_packages
    # the variant's NCCL is in its image now; the host package its 1.4.0 pinned is foreign
    assert "libnccl2" in expected.foreign_packages
    left = replace(facts, packages={**facts.packages, "dgx-spark-fan-control": "1.3.0-1"})
    result = next(r for r in judge_node(expected, left) if r.id == "packages.foreign")
    assert result.status == "fail" and result.severity == "warn" and not result.blocking
    assert result.observed == "dgx-spark-fan-control 1.3.0-1"
    assert result.fix is not None and "--allow-reboot" in result.fix
    clean = next(r for r in judge_node(expected, facts) if r.id == "packages.foreign")
    assert clean.status == "pass"


def test_fleet_agreement(site: Site) -> None:
    facts = {node: converged_node(site, node)[1] for node in ("spark1", "spark2", "spark3", "spark4")}
    assert all(r.status == "pass" for r in judge_fleet(facts))
    facts["spark3"] = replace(
        facts["spark3"], governors=dict.fromkeys(range(20), "powersave"), kernel_release="6.17.0-1008-nvidia"
    )
    failed = {r.id for r in judge_fleet(facts) if r.status == "fail"}
    assert failed == {"fleet.governor", "fleet.kernel"}
    governor = next(r for r in judge_fleet(facts) if r.id == "fleet.governor")
    assert governor.observed is not None and "spark3=powersave" in governor.observed


def test_report_exit_codes(site: Site) -> None:
    nodes = ("spark1", "spark2", "spark3", "spark4")
    expectations = {node: expected_for(site, node) for node in nodes}
    clean = {node: converged_node(site, node)[1] for node in nodes}
    assert build_report("s", expectations, clean).exit_code == 0
    drifted = {**clean, "spark2": replace(clean["spark2"], thp="never")}
    report = build_report("s", expectations, drifted)
    assert report.exit_code == 1 and [r.node for r in report.all_results() if r.blocking] == ["spark2", None]
    gone: dict[str, FactsResult] = {**drifted, "spark4": Unreachable("spark4", "connection refused")}
    report = build_report("s", expectations, gone)
    assert report.exit_code == 3
    assert [n.reachable for n in report.nodes] == [True, True, True, False]
    assert any(r.node == "spark2" and r.id == "memory.thp" for r in report.all_results())


def test_a_port_with_an_address_it_was_not_given_fails_link(site: Site) -> None:
    """netplan merges address lists across files: a stale second address on a fabric port
    (its path's subnet then at three ends, or two paths in one subnet) fails, naming it."""
    expected, facts = converged_node(site)
    port = facts.interfaces["enp1s0f0np0"]
    stale = replace(port, addresses=(*port.addresses, "192.168.77.1/24"))
    drifted = replace(facts, interfaces={**facts.interfaces, "enp1s0f0np0": stale})
    failed = [r for r in judge_node(expected, drifted) if r.status == "fail"]
    assert [r.id for r in failed] == ["fabric.link.enp1s0f0np0"]
    assert "(not given: 192.168.77.1/24)" in (failed[0].observed or "")
    assert "remove 192.168.77.1/24 from enp1s0f0np0" in (failed[0].fix or "")


def test_interface_without_address_fails_link(site: Site) -> None:
    expected, facts = converged_node(site)
    drifted = replace(
        facts, interfaces={**facts.interfaces, "enp1s0f0np0": Interface("enp1s0f0np0", 9000, "UP", ())}
    )
    failed = {r.id for r in judge_node(expected, drifted) if r.status == "fail"}
    assert failed == {"fabric.link.enp1s0f0np0"}


def _result(site: Site, facts_change: Callable[[NodeFacts], NodeFacts], check: str,
            baseline: str = SITE_BASELINE) -> object:
    expected, facts = converged_node(site, "spark1", baseline)
    return next(r for r in judge_node(expected, facts_change(facts)) if r.id == check)


def test_grub_oneshot_names_grub_reboot_and_how_to_clear_it(site: Site) -> None:
    oneshot = _set(grub=grub_boot(SITE_KERNEL, grubenv=f"next_entry={ADVANCED}9.9.0-1001-nvidia\n"))
    result = _result(site, oneshot, "boot.grub_default")
    assert result.status == "fail" and result.severity == "error"  # type: ignore[attr-defined]
    assert "(grub-reboot) boots 9.9.0-1001-nvidia next" in result.observed  # type: ignore[attr-defined]
    assert "grub-editenv /boot/grub/grubenv unset next_entry" in result.fix  # type: ignore[attr-defined]


def test_grub_saved_default_and_oneshot_to_the_baseline_kernel_pass(site: Site) -> None:
    saved = _set(grub=grub_boot(SITE_KERNEL, default="${saved_entry}",
                                grubenv=f"saved_entry={ADVANCED}{SITE_KERNEL}\n"
                                        f"next_entry=gnulinux-advanced-0b1f>gnulinux-{SITE_KERNEL}-advanced-0b1f\n"))
    assert _result(site, saved, "boot.grub_default").status == "pass"  # type: ignore[attr-defined]


def test_apst_missing_names_apst_in_the_fix(site: Site) -> None:
    result = _result(site, lambda f: replace(f, cmdline=tuple(a for a in f.cmdline if "nvme" not in a)),
                     "kernel.cmdline", VARIANT)
    assert "APST" in result.fix  # type: ignore[attr-defined]
    other = _result(site, lambda f: replace(f, cmdline=(*f.cmdline, "splash")), "kernel.cmdline", VARIANT)
    assert "APST" not in other.fix  # type: ignore[attr-defined]


def test_os_release_is_a_warning_and_a_release_line_matches_its_updates(site: Site) -> None:
    result = _result(site, _set(dgx_release={"DGX_SWBUILD_VERSION": "7.2.3", "DGX_OTA_VERSION": "7.6.0"}),
                     "os.release")
    assert result.status == "fail" and not result.blocking  # type: ignore[attr-defined]
    assert result.observed == "DGX OS 7.6.0"  # type: ignore[attr-defined]
    # the site pins the line "DGX OS 7.5"; 7.5.0 and 7.5.2 are on it, 7.50 is not
    for on_line in ("7.5.0", "7.5.2"):
        passed = _result(site, _set(dgx_release={"DGX_OTA_VERSION": on_line}), "os.release")
        assert passed.status == "pass"  # type: ignore[attr-defined]
    other = _result(site, _set(dgx_release={"DGX_OTA_VERSION": "7.50"}), "os.release")
    assert other.status == "fail"  # type: ignore[attr-defined]


def test_fleet_agrees_on_free_memory_reserve_and_nvidia_modules(site: Site) -> None:
    facts = {node: converged_node(site, node)[1] for node in ("spark1", "spark2", "spark3", "spark4")}
    two, four = facts["spark2"], facts["spark4"]
    facts["spark2"] = replace(two, sysctls={**two.sysctls, "vm.min_free_kbytes": "67584"})
    facts["spark4"] = replace(four, nvidia_modules={**four.nvidia_modules, "nvidia.srcversion": "DKMSBUILT0"})
    results = {r.id: r for r in judge_fleet(facts)}
    failed = {i for i, r in results.items() if r.status == "fail"}
    assert failed == {"fleet.min_free_kbytes", "fleet.nvidia_modules"}
    assert "spark2=67584" in str(results["fleet.min_free_kbytes"].observed)
    assert "DKMSBUILT" in str(results["fleet.nvidia_modules"].observed)


OTHER_MOK = "0a:0b:0c:0d:0e:0f:10:11:12:13:14:15:16:17:18:19:1a:1b:1c:1d"


@pytest.mark.parametrize(("pin", "fails"), [
    ("converged", set()),
    (OTHER_MOK, {"memory_saver.signature", "host.fan_control.signature", "secure_boot.mok"}),
])
def test_a_pinned_mok_is_found_by_fingerprint_and_judged_by_serial(site: Site, pin: str,
                                                                   fails: set[str]) -> None:
    expected, facts = converged_node(site, "spark1", VARIANT)
    fingerprint = facts.mok_certificates[0].fingerprint if pin == "converged" else pin
    secure = expected.baseline.secure_boot.model_copy(update={"mok_fingerprint": fingerprint})
    pinned = replace(expected, baseline=expected.baseline.model_copy(update={"secure_boot": secure}))
    results = {r.id: r for r in judge_node(pinned, facts)}
    assert {i for i, r in results.items() if r.status == "fail"} == fails
    assert results["memory_saver.signature"].expected == f"signed with MOK {fingerprint}"


def test_os_release_in_dgx_os_7_numbering_says_the_numberings_differ(site: Site) -> None:
    """A baseline written in release-notes numbering (the recipe's "DGX OS 26.09.2") against a
    real dgx-release (7.x) says the numberings differ instead of asking for an OS update."""
    expected, facts = converged_node(site, "spark1")
    os_pin = expected.baseline.os.model_copy(update={"release": "DGX OS 26.09.2"})
    calendar = replace(expected, baseline=expected.baseline.model_copy(update={"os": os_pin}))
    real = {"DGX_SWBUILD_VERSION": "7.2.3", "DGX_OTA_VERSION": "7.5.0"}  # a real dgx-release
    result = next(r for r in judge_node(calendar, replace(facts, dgx_release=real)) if r.id == "os.release")
    assert result.status == "fail" and not result.blocking
    assert "another numbering" in str(result.observed)
    assert "'DGX OS 7.5'" in str(result.fix)


def _model_crashes(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    return ok(expected.cables["rocep9"], None)


def _facts_crash(expected: Expected, facts: NodeFacts, at: Subject) -> Outcome:
    return ok(1 / len(facts.node[:0]), None)


@pytest.mark.parametrize(
    ("judge", "observed"),
    [
        (_model_crashes, "check crashed: KeyError: 'rocep9'"),
        (_facts_crash, "check crashed: ZeroDivisionError: division by zero"),
    ],
    ids=["model", "facts"],
)
def test_a_crashing_check_fails_alone_and_says_why(judge: Callable[..., Outcome], observed: str) -> None:
    expected, facts = converged_node(SITE, "spark1")
    check = NodeCheck("test.crash", "test", "error", "crashes", judge)
    [planned] = check.plan(expected)
    result = check.run(expected, facts, planned.item, planned.id)
    assert (result.status, result.observed, result.fix) == ("fail", observed, "report this bug")
    assert result.blocking and result.node == "spark1"
    # and every registered check still judges the same node cleanly
    assert all(r.status != "fail" for r in judge_node(expected, facts))
