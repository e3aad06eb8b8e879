"""`sparkbase capture`'s pure parts: facts -> captured values -> the baseline's YAML text
(comments kept, sources written, the result validates), and the targets it refuses."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from sparkbase.capture import (
    NotABaseline,
    capture_plan,
    captured_values,
    check_baseline_text,
    write_captured,
)
from sparkbase.cli import capture as capture_cli
from sparkbase.cli.main import main
from sparkbase.facts.model import (
    DkmsEntry,
    FstabEntry,
    GpuFacts,
    GrubBoot,
    GrubEntry,
    ModuleInfo,
    MokCertificate,
    NodeFacts,
    SecureBoot,
    UnitState,
    Unreachable,
)
from sparkbase.facts.script import FactPlan
from sparkbase.model.baseline import Baseline
from sparkbase.model.site import load_site

SITE_BASELINE = "site-stock-6.17-4k"
TIME = "2026-12-01T02:40:00Z"
MOK = "aa:" * 19 + "bb"
#: fields a capture of a converged site node marks
CAPTURED_KEYS = (
    "kernel.release", "kernel.package_version", "driver.version", "driver.package_version",
    "nccl.library.sha256", "nccl.library.version", "memory.sysctls", "memory.transparent_hugepages",
    "cpuset.cpus", "secure_boot.enabled", "host.disable_services", "os.release",
    "kernel.tools", "host.cpu_governor", "host.nvme.interrupt_coalescing",
)
VARIANT = "ds41f-7x-64k"
#: what a capture of a converged variant node marks beyond the site's fields
VARIANT_KEYS = (
    "kernel.fallback.release", "kernel.fallback.package_version", "memory.factory_swap.fstab",
    "memory.memory_saver.dkms_version",
    "memory.memory_saver.srcversion", "memory.memory_saver.packing", "host.nvidia_drm.purge",
    "host.fan_control.package_version", "host.fan_control.dkms_version", "host.fan_control.module",
    "host.fan_control.service", "secure_boot.mok_fingerprint", "memory.memory_saver.dkms_name",
    "memory.memory_saver.module", "host.fan_control.dkms_name",
)


def _library_hash(baseline: Baseline) -> dict[str, str | None]:
    """The host NCCL library's hash (none when NCCL is built into the image)."""
    library = baseline.nccl.library
    return {library.path: library.sha256} if library.path is not None else {}


def converged_facts(baseline: Baseline, node: str = "spark1") -> NodeFacts:
    """What a node converged to `baseline` reports (every pinned value as pinned)."""
    release = baseline.kernel.release
    entry = GrubEntry(path=baseline.kernel.grub_entry, release=release)
    entries = [entry]
    if baseline.kernel.fallback is not None:
        fallback = baseline.kernel.fallback.release
        entries.append(GrubEntry(path=f"Advanced options for Ubuntu>Ubuntu, with Linux {fallback}",
                                 release=fallback))
    units = {unit: UnitState("disabled", "inactive") for unit in baseline.host.disable_services}
    units["display-manager.service"] = UnitState("", "inactive")
    host, memory = baseline.host, baseline.memory
    modules = {build.module for build in baseline.dkms_builds()}
    dkms = tuple(DkmsEntry(build.dkms_name, build.dkms_version, release, "aarch64", "installed")
                 for build in baseline.dkms_builds())
    params: dict[str, str | None] = {"nvidia_drm.modeset": "Y" if host.nvidia_drm.modeset else "N",
              "nvidia_drm.fbdev": "Y" if host.nvidia_drm.fbdev else "N"}
    saver = memory.memory_saver
    saver_info, nvidia_modules = None, {}
    if saver is not None and saver.required:
        params[f"{saver.module}.{saver.packing_parameter}"] = "Y" if saver.packing else "N"
        srcversion = saver.srcversion or "0123456789ABCDEF01234"
        saver_info = ModuleInfo(filename=f"/lib/modules/{release}/updates/dkms/nvidia-uvm.ko.zst",
                                srcversion=srcversion)
        nvidia_modules[f"{saver.module}.srcversion"] = srcversion
    if host.fan_control is not None:
        units[host.fan_control.service] = UnitState("enabled", "active")
    fstab = [FstabEntry("/dev/nvme0n1p2", "/", "ext4", "defaults")]
    factory = memory.factory_swap
    if factory is not None:
        options = "sw,noauto" if factory.fstab == "noauto" else "sw"
        fstab.append(FstabEntry(factory.path, "none", "swap", options))
    return NodeFacts(
        node=node,
        kernel_release=release,
        page_size=baseline.kernel.page_size,
        cmdline=("BOOT_IMAGE=/vmlinuz", "ro", "quiet", *baseline.kernel.cmdline_add),
        thp=baseline.memory.transparent_hugepages,
        sysctls=dict(baseline.memory.sysctls),
        gpu=GpuFacts(driver_version=baseline.driver.version),
        module_params=params,
        modules=frozenset(modules),
        dkms=dkms,
        memory_saver=saver_info,
        nvidia_modules=nvidia_modules,
        governors=dict.fromkeys(range(20), host.cpu_governor or "ondemand"),
        nvme_coalescing=0x107 if host.nvme.interrupt_coalescing else 0,
        fstab=tuple(fstab),
        secure_boot=SecureBoot.ENABLED,
        mok_certificates=(MokCertificate(MOK),),
        default_target=baseline.host.boot_target,
        units=units,
        slice_allowed_cpus=frozenset(baseline.cpuset.cpus),
        file_sha256=_library_hash(baseline),
        packages={pin.name: pin.version for pin in baseline.packages()},
        grub=GrubBoot(entries=tuple(entries), default=entry.path, default_entry=entry),
        dgx_release={"DGX_OTA_VERSION": "7.2.3"},
    )


@pytest.fixture(scope="module")
def shipped() -> Baseline:
    return load_site(Path(__file__).resolve().parents[2]).baselines[SITE_BASELINE]


def captured_site(site_copy: Path, facts: NodeFacts, baseline: Baseline) -> tuple[str, str]:
    """(old text, new text) of the site baseline after capturing `facts` into it in place."""
    file = site_copy / "baselines" / f"{SITE_BASELINE}.yaml"
    old = file.read_text()
    new = write_captured(old, captured_values(facts, baseline), "spark1", TIME)
    file.write_text(new)
    return old, new


def test_converged_node_captures_its_own_baseline(site_copy: Path, shipped: Baseline) -> None:
    old, new = captured_site(site_copy, converged_facts(shipped), shipped)
    reloaded = load_site(site_copy).baselines[SITE_BASELINE]
    # the values a converged node reports are the values it was converged to
    assert reloaded.model_dump() == replace_os(shipped).model_dump()
    # every comment line of the file is still there
    comments = [line.strip() for line in old.splitlines() if line.strip().startswith("#")]
    assert comments and all(comment in new for comment in comments)
    assert "extends: spark-common" in new


def replace_os(baseline: Baseline) -> Baseline:
    """`baseline` with the release the fake node's /etc/dgx-release names (another numbering
    than the shipped 26.09 line); the site baseline pins no MOK and still pins none."""
    return baseline.model_copy(update={"os": baseline.os.model_copy(update={"release": "DGX OS 7.2.3"})})


@pytest.mark.parametrize(
    ("pinned", "seen", "captured"),
    [
        ("DGX OS 7.2", "7.2.3", "DGX OS 7.2"),  # the pinned line covers the node: kept
        ("DGX OS 7.2.3", "7.2.3", "DGX OS 7.2.3"),
        ("DGX OS 7.2", "7.20.1", "DGX OS 7.20.1"),  # 7.20 is not in the 7.2 line
        ("DGX OS 26.09", "7.2.3", "DGX OS 7.2.3"),
    ],
)
def test_os_release_keeps_a_line_that_covers_the_node(
    shipped: Baseline, pinned: str, seen: str, captured: str
) -> None:
    baseline = shipped.model_copy(update={"os": shipped.os.model_copy(update={"release": pinned})})
    facts = replace(converged_facts(shipped), dgx_release={"DGX_OTA_VERSION": seen})
    values = {v.key: v.value for v in captured_values(facts, baseline).values}
    assert values["os.release"] == captured


def test_mok_is_captured_only_where_the_baseline_manages_one(shipped: Baseline) -> None:
    facts = converged_facts(shipped)
    assert "secure_boot.mok_fingerprint" not in {v.key for v in captured_values(facts, shipped).values}
    pinning = shipped.model_copy(update={"secure_boot": shipped.secure_boot.model_copy(
        update={"mok_fingerprint": "cc:" * 19 + "dd"})})
    values = {v.key: v.value for v in captured_values(facts, pinning).values}
    assert values["secure_boot.mok_fingerprint"] == MOK  # the node's one enrolled key


def test_captured_fields_are_marked_and_replace_the_placeholders(site_copy: Path, shipped: Baseline) -> None:
    captured_site(site_copy, converged_facts(shipped), shipped)
    sources = load_site(site_copy).baselines[SITE_BASELINE].sources
    for key in CAPTURED_KEYS:
        source = sources[key]
        assert (source.kind, getattr(source, "node", None), getattr(source, "time", None)) == (
            "captured", "spark1", TIME), key
    # a file's entry the captured field sits under stays for the fields the node cannot tell
    assert sources["nccl.library"].kind == "placeholder"


def test_node_values_replace_the_files(site_copy: Path, shipped: Baseline) -> None:
    facts = replace(
        converged_facts(shipped),
        gpu=GpuFacts(driver_version="580.130.01"),
        packages={**converged_facts(shipped).packages, "nvidia-utils-580": "580.130.01-0ubuntu0.24.04.2"},
        sysctls={"vm.max_map_count": "65530", "vm.min_free_kbytes": "45166"},
        slice_allowed_cpus=frozenset({5, 6, 7}),
        file_sha256={str(shipped.nccl.library.path): "ab" * 32},
    )
    captured_site(site_copy, facts, shipped)
    baseline = load_site(site_copy).baselines[SITE_BASELINE]
    assert baseline.driver.version == "580.130.01"
    assert baseline.driver.package_version == "580.130.01-0ubuntu0.24.04.2"
    assert baseline.memory.sysctls == {"vm.max_map_count": "65530", "vm.min_free_kbytes": "45166"}
    assert baseline.cpuset.cpulist() == "5-7"
    assert baseline.nccl.library.sha256 == "ab" * 32


def test_what_the_node_cannot_tell_is_kept_and_said(shipped: Baseline) -> None:
    facts = replace(converged_facts(shipped), gpu=GpuFacts(error="not found"), packages={})
    capture = captured_values(facts, shipped)
    keys = {value.key for value in capture.values}
    assert "driver.version" not in keys and "kernel.package_version" not in keys
    assert any(item.startswith("driver.version: nvidia-smi: not found") for item in capture.missing)
    assert any(item.startswith("nccl.library.version:") for item in capture.missing)


def test_a_service_the_node_runs_is_dropped(shipped: Baseline) -> None:
    facts = converged_facts(shipped)
    running = dict(facts.units, **{"cups.service": UnitState("enabled", "active")})
    capture = captured_values(replace(facts, units=running), shipped)
    services = next(v.value for v in capture.values if v.key == "host.disable_services")
    assert services == [unit for unit in shipped.host.disable_services if unit != "cups.service"]
    assert capture.dropped == ("host.disable_services: cups.service (enabled or running on the node)",)


def test_writer_keeps_comments_and_adds_sources_to_a_file_without() -> None:
    text = "# head comment\nversion: 1.0.0  # keep me\nkernel:\n  release: 6.17.0-1032-nvidia  # old\n"
    from sparkbase.capture.core import Capture, Captured

    capture = Capture((Captured(("kernel", "release"), "6.17.0-1040-nvidia"),
                       Captured(("memory", "sysctls"), {"vm.max_map_count": 1048576})), ())
    out = write_captured(text, capture, "spark2", TIME)
    assert out.startswith("# head comment\nversion: 1.0.0  # keep me\n")
    assert "release: 6.17.0-1040-nvidia  # old" in out
    assert "kernel.release: {kind: captured, node: spark2, time: '2026-12-01T02:40:00Z'}" in out
    assert "vm.max_map_count: 1048576" in out


def test_a_more_specific_source_under_a_captured_field_goes() -> None:
    text = "version: 1.0.0\nsources:\n  memory.sysctls.vm.x: {kind: seed}\n  memory: {kind: seed}\n"
    from sparkbase.capture.core import Capture, Captured

    out = write_captured(text, Capture((Captured(("memory", "sysctls"), {"vm.x": 1}),), ()), "spark1", TIME)
    assert "memory.sysctls.vm.x" not in out
    assert "memory: {kind: seed}" in out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("site: four-spark-ring\ncontract: {}\n", "not a baseline file"),
        ("nodes: {}\nssh: {}\n", "not a baseline file"),
        ("- a list\n", "not a mapping"),
        ("description: no version\n", "has no version"),
        ("version: 1.0.0\nabstract: true\n", "abstract"),
    ],
)
def test_not_a_baseline_is_refused(text: str, message: str) -> None:
    with pytest.raises(NotABaseline, match=message):
        check_baseline_text(text)


def test_every_key_of_the_model_is_a_baseline_key() -> None:
    """An adopted baseline (`managed: []`) is a baseline capture may write into."""
    check_baseline_text("version: 1.0.0\nmanaged: []\ncpuset: {}\n")


def test_capture_plan_reads_moks_and_any_kernel_package() -> None:
    plan = capture_plan(FactPlan(packages=("nccl-site-ring4",), mok_keys=False))
    assert plan.mok_keys
    assert plan.packages == ("nccl-site-ring4", "linux-image-*", "linux-tools-*", "nvidia-utils-*",
                             "nvidia-drm-options-modeset*")


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("inventory/site.yaml", "'site' cannot be a baseline's name"),
        ("baselines/site.yaml", "'site' cannot be a baseline's name"),
        ("baselines/spark-common.yaml", "is an abstract baseline"),
        ("lanes/glm-fp8.yaml", "not a baseline file; refusing to write over it"),
    ],
)
def test_cli_refuses_to_write_over_a_file_that_is_not_a_baseline(
    site_copy: Path, target: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (site_copy / target).read_bytes()
    code = main(["capture", "spark1", "--site", str(site_copy), "--out", str(site_copy / target)])
    assert code == 2
    assert message in capsys.readouterr().err
    assert (site_copy / target).read_bytes() == before


def test_cli_refuses_a_fifo(site_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    fifo = tmp_path / "captured.yaml"
    os.mkfifo(fifo)
    code = main(["capture", "spark1", "--site", str(site_copy), "--out", str(fifo)])
    assert code == 2
    assert "is a FIFO; site files must be regular files; refusing to write over it" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"version: 1.0.0\nversion: 1.0.1\n", "duplicate key"),
        (b"\xff\xfe binary", "not valid UTF-8"),
        (b"root:x:0:0:root:/root:/bin/bash\n", "not a mapping"),
    ],
)
def test_cli_refuses_a_target_that_is_not_yaml_of_a_baseline(
    site_copy: Path, tmp_path: Path, content: bytes, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "odd.yaml"
    target.write_bytes(content)
    assert main(["capture", "spark1", "--site", str(site_copy), "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert message in err and "refusing to write over it" in err
    assert target.read_bytes() == content


def test_cli_unknown_node(site_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capture", "spark9", "--site", str(site_copy)]) == 2
    assert "no node spark9" in capsys.readouterr().err


@dataclass
class FakeNodes:
    """What the fake fleet was asked (plans) and answers other than a converged node."""

    plans: list[FactPlan] = field(default_factory=list)
    answers: dict[str, NodeFacts | Unreachable] = field(default_factory=dict)


@pytest.fixture
def fake_node(monkeypatch: pytest.MonkeyPatch, shipped: Baseline) -> FakeNodes:
    """`gather_node` answers as a node converged to the site baseline, unless told otherwise."""
    fake = FakeNodes()

    def gather(node: str, _target: object, plan: FactPlan) -> NodeFacts | Unreachable:
        fake.plans.append(plan)
        return fake.answers.get(node) or converged_facts(shipped, node)

    monkeypatch.setattr(capture_cli, "ssh_targets", lambda site, lab=None: dict.fromkeys(
        site.inventory.nodes))
    monkeypatch.setattr(capture_cli, "gather_node", gather)
    return fake


def test_cli_writes_a_new_file_from_the_nodes_baseline(
    site_copy: Path, fake_node: FakeNodes, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["capture", "spark1", "--site", str(site_copy)])
    assert code == 0, capsys.readouterr().err
    assert "capture spark1: wrote" in capsys.readouterr().out
    text = (site_copy / "baselines" / "captured-spark1.yaml").read_text()
    assert text.startswith("# Baseline A: the site contract.")  # the node's baseline's comments
    assert "extends: spark-common" in text
    baseline = load_site(site_copy).baselines["captured-spark1"]
    assert baseline.description.startswith("captured from spark1 at ")
    assert baseline.sources["kernel.release"].kind == "captured"
    assert len(fake_node.plans) == 1 and "linux-image-*" in fake_node.plans[0].packages  # one round trip


def test_cli_refuses_a_capture_that_does_not_validate(
    site_copy: Path, fake_node: FakeNodes, shipped: Baseline, capsys: pytest.CaptureFixture[str]
) -> None:
    facts = converged_facts(shipped)
    # the factory lab's nvidia-utils-580 is at the bare driver version, which no DGX OS ships
    utils = {**facts.packages, "nvidia-utils-580": shipped.driver.version}
    fake_node.answers["spark1"] = replace(facts, packages=utils)
    code = main(["capture", "spark1", "--site", str(site_copy)])
    err = capsys.readouterr().err
    assert code == 2
    assert "driver.package_version" in err and "was not written" in err
    assert not (site_copy / "baselines" / "captured-spark1.yaml").exists()


def test_cli_unreachable_node_is_exit_3(
    site_copy: Path, fake_node: FakeNodes, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_node.answers["spark1"] = Unreachable("spark1", "connection refused")
    assert main(["capture", "spark1", "--site", str(site_copy)]) == 3
    assert "spark1 unreachable: connection refused" in capsys.readouterr().err
    assert not (site_copy / "baselines" / "captured-spark1.yaml").exists()


def test_a_new_block_goes_where_the_model_orders_it() -> None:
    from sparkbase.capture.core import Capture, Captured

    text = ("extends: x\nversion: 1.0.0\nkernel:\n  page_size: 4096\n"
            "host:\n  boot_target: multi-user.target\nsources: {}\n")
    capture = Capture((Captured(("os", "release"), "DGX OS 7.5"), Captured(("cpuset", "cpus"), "5-9"),
                       Captured(("secure_boot", "enabled"), True)), ())
    out = write_captured(text, capture, "spark1", TIME)
    tops = [line.split(":")[0] for line in out.splitlines() if line and not line.startswith(" ")]
    assert tops == ["extends", "version", "os", "kernel", "secure_boot", "host", "cpuset", "sources"]


def test_swap_is_captured_from_swapon_and_its_header() -> None:
    from sparkbase.facts.model import SwapEntry

    variant = load_site(Path(__file__).resolve().parents[2]).baselines["ds41f-7x-64k"]
    swap = variant.memory.swap
    assert swap is not None
    size = 16 * 2**30
    facts = replace(converged_facts(variant), swaps=(SwapEntry(swap.path, size - 65536),),
                    swap_header_page_size={swap.path: 65536})
    values = {v.key: v.value for v in captured_values(facts, variant).values}
    assert (values["memory.swap.size_gib"], values["memory.swap.header_page_size"]) == (16, 65536)
    inactive = captured_values(replace(facts, swaps=()), variant)
    assert "memory.swap.size_gib" not in {v.key for v in inactive.values}
    assert any(item.startswith("memory.swap:") for item in inactive.missing)


@pytest.fixture(scope="module")
def variant() -> Baseline:
    return load_site(Path(__file__).resolve().parents[2]).baselines[VARIANT]


def values_of(facts: NodeFacts, baseline: Baseline) -> dict[str, object]:
    return {v.key: v.value for v in captured_values(facts, baseline).values}


def test_converged_variant_node_captures_its_own_baseline(site_copy: Path, variant: Baseline) -> None:
    file = site_copy / "baselines" / f"{VARIANT}.yaml"
    capture = captured_values(converged_facts(variant), variant)
    assert capture.dropped == ()
    file.write_text(write_captured(file.read_text(), capture, "spark3", TIME))
    reloaded = load_site(site_copy).baselines[VARIANT]
    expected = replace_os(variant).model_copy(update={"secure_boot": variant.secure_boot.model_copy(
        update={"mok_fingerprint": MOK})})  # the variant pins none: the node's one enrolled MOK
    assert reloaded.model_dump() == expected.model_dump()
    # the variant's NCCL is built into its image: the host has no library to read
    host_keys = [key for key in (*CAPTURED_KEYS, *VARIANT_KEYS) if not key.startswith("nccl.library")]
    for key in host_keys:
        source = reloaded.sources[key]
        assert (source.kind, getattr(source, "node", None), getattr(source, "time", None)) == (
            "captured", "spark3", TIME), key
    assert reloaded.sources["nccl.library"].kind == "recipe"


@pytest.mark.parametrize(
    ("packages", "tools"),
    [
        ({"linux-tools-6.17.0-1032-nvidia": "6.17.0-1032.32"}, True),
        ({"linux-tools-6.17.0-1040-nvidia": "6.17.0-1040.40"}, False),  # another kernel's tools
        ({"linux-image-6.17.0-1032-nvidia": "6.17.0-1032.32"}, False),
    ],
)
def test_kernel_tools_is_linux_tools_of_the_running_kernel(
    shipped: Baseline, packages: dict[str, str], tools: bool
) -> None:
    facts = replace(converged_facts(shipped), packages=packages)
    assert values_of(facts, shipped)["kernel.tools"] is tools


def test_governor_without_tools_is_dropped_with_them(shipped: Baseline) -> None:
    facts = converged_facts(shipped)
    packages = {k: v for k, v in facts.packages.items() if not k.startswith("linux-tools-")}
    capture = captured_values(replace(facts, packages=packages), shipped)
    values = {v.key: v.value for v in capture.values}
    assert (values["kernel.tools"], values["host.cpu_governor"]) == (False, None)
    assert capture.dropped == (
        "host.cpu_governor: performance (linux-tools-6.17.0-1032-nvidia is not installed)",)


@pytest.mark.parametrize(
    ("governors", "captured", "dropped"),
    [
        ({0: "performance", 1: "performance"}, "performance", ()),
        ({0: "performance", 1: "schedutil"}, None,
         ("host.cpu_governor: performance (the CPUs run performance, schedutil)",)),
        ({0: "ondemand"}, None, ("host.cpu_governor: performance (the CPUs run ondemand)",)),
    ],
)
def test_cpu_governor_is_performance_only_on_every_cpu(
    shipped: Baseline, governors: dict[int, str], captured: str | None, dropped: tuple[str, ...]
) -> None:
    capture = captured_values(replace(converged_facts(shipped), governors=governors), shipped)
    assert {v.key: v.value for v in capture.values}["host.cpu_governor"] == captured
    assert capture.dropped == dropped


def test_unread_governors_are_not_captured(shipped: Baseline) -> None:
    capture = captured_values(replace(converged_facts(shipped), governors={}), shipped)
    assert "host.cpu_governor" not in {v.key for v in capture.values}
    assert "host.cpu_governor: no CPU reported a scaling governor" in capture.missing


@pytest.mark.parametrize(("feature", "captured"), [(0x107, True), (0, False), (0x20, None), (None, None)])
def test_nvme_coalescing_from_feature_0x08(
    shipped: Baseline, feature: int | None, captured: bool | None
) -> None:
    capture = captured_values(replace(converged_facts(shipped), nvme_coalescing=feature), shipped)
    values = {v.key: v.value for v in capture.values}
    assert values.get("host.nvme.interrupt_coalescing") is captured
    if captured is None:
        assert any(item.startswith("host.nvme.interrupt_coalescing: feature 0x08")
                   for item in capture.missing)


def test_fallback_is_the_installed_release_with_a_grub_entry(variant: Baseline) -> None:
    fallback = variant.kernel.fallback
    assert fallback is not None
    image = f"linux-image-{fallback.release}"
    facts = converged_facts(variant)
    newer = replace(facts, packages={**facts.packages, image: "7.0.0-1019.20~24.04.1"})
    values = values_of(newer, variant)
    assert (values["kernel.fallback.release"], values["kernel.fallback.package_version"]) == (
        fallback.release, "7.0.0-1019.20~24.04.1")
    # installed without a menu entry: not a kernel the node can fall back to
    assert facts.grub is not None
    no_entry = replace(facts, grub=replace(facts.grub, entries=facts.grub.entries[:1]))
    capture = captured_values(no_entry, variant)
    assert "kernel.fallback.package_version" not in {v.key for v in capture.values}
    assert f"kernel.fallback: {fallback.release} is not installed with a GRUB entry" in capture.missing


def test_a_baseline_without_fallback_keeps_none_and_names_the_nodes_kernels(shipped: Baseline) -> None:
    facts = converged_facts(shipped)
    assert facts.grub is not None
    old = GrubEntry(path="Advanced options for Ubuntu>Ubuntu, with Linux 6.11.0-1016-nvidia",
                    release="6.11.0-1016-nvidia")
    facts = replace(facts, grub=replace(facts.grub, entries=(*facts.grub.entries, old)),
                    packages={**facts.packages, "linux-image-6.11.0-1016-nvidia": "6.11.0-1016.16"})
    capture = captured_values(facts, shipped)
    assert not any(v.key.startswith("kernel.fallback") for v in capture.values)
    assert ("kernel.fallback: the baseline keeps none; the node can also boot 6.11.0-1016-nvidia"
            in capture.missing)


@pytest.mark.parametrize(
    ("options", "fstab", "swapoff"),
    [("sw,noauto", "noauto", None), ("noauto", "noauto", None), ("sw", "as-installed", False),
     ("defaults", "as-installed", False)],
)
def test_factory_swap_is_its_fstab_line(
    variant: Baseline, options: str, fstab: str, swapoff: bool | None
) -> None:
    factory = variant.memory.factory_swap
    assert factory is not None
    swapping_off = variant.model_copy(update={"memory": variant.memory.model_copy(
        update={"factory_swap": factory.model_copy(update={"swapoff": True})})})
    facts = replace(converged_facts(variant), fstab=(FstabEntry(factory.path, "none", "swap", options),))
    values = values_of(facts, swapping_off)
    assert values["memory.factory_swap.fstab"] == fstab
    assert values.get("memory.factory_swap.swapoff") is swapoff


def test_factory_swap_without_its_line_is_not_captured(variant: Baseline, shipped: Baseline) -> None:
    capture = captured_values(replace(converged_facts(variant), fstab=()), variant)
    assert "memory.factory_swap.fstab" not in {v.key for v in capture.values}
    assert "memory.factory_swap: /etc/fstab has no swap line for /swap.img" in capture.missing
    # a baseline that leaves the installer's swap alone still does
    assert not any(v.key.startswith("memory.factory_swap") for v in captured_values(
        converged_facts(shipped), shipped).values)


def test_memory_saver_srcversion_is_the_loaded_dkms_build(variant: Baseline) -> None:
    facts = converged_facts(variant)
    rebuilt = replace(facts, memory_saver=ModuleInfo(srcversion="ABCDEF0123456789ABCDEF0"),
                      nvidia_modules={"nvidia_uvm.srcversion": "ABCDEF0123456789ABCDEF0"})
    assert values_of(rebuilt, variant)["memory.memory_saver.srcversion"] == "ABCDEF0123456789ABCDEF0"
    # the stock module loaded (modinfo's file, DKMS's build, says another srcversion): not captured
    stock = replace(facts, nvidia_modules={"nvidia_uvm.srcversion": "1111111111111111"})
    capture = captured_values(stock, variant)
    keys = {v.key for v in capture.values}
    assert "memory.memory_saver.srcversion" not in keys and "memory.memory_saver.packing" not in keys
    assert any(item.startswith("memory.memory_saver.srcversion: nvidia_uvm loaded (1111111111111111)")
               for item in capture.missing)


def test_memory_saver_without_its_dkms_build_is_not_captured(variant: Baseline) -> None:
    capture = captured_values(replace(converged_facts(variant), dkms=()), variant)
    keys = {v.key for v in capture.values}
    assert not keys & {"memory.memory_saver.dkms_version", "memory.memory_saver.srcversion",
                       "memory.memory_saver.dkms_name", "memory.memory_saver.module",
                       "host.fan_control.dkms_version", "host.fan_control.dkms_name"}
    assert ("memory.memory_saver.dkms_version: dkms status has no dgx-spark-memory-saver installed for "
            "7.0.0-1019-nvidia-64k") in capture.missing


@pytest.mark.parametrize(("flag", "packing"), [("Y", True), ("N", False), ("1", True)])
def test_memory_saver_packing_is_the_loaded_parameter(variant: Baseline, flag: str, packing: bool) -> None:
    facts = converged_facts(variant)
    params = {**facts.module_params, "nvidia_uvm.uvm_pack_sysmem_leaf_tables": flag}
    facts = replace(facts, module_params=params)
    assert values_of(facts, variant)["memory.memory_saver.packing"] is packing


def test_dkms_of_another_kernel_or_not_installed_is_no_version(variant: Baseline) -> None:
    facts = converged_facts(variant)
    other = tuple(replace(e, kernel="7.0.0-1019-nvidia") for e in facts.dkms)
    built = tuple(replace(e, status="built") for e in facts.dkms)
    for dkms in (other, built):
        keys = {v.key for v in captured_values(replace(facts, dkms=dkms), variant).values}
        assert "host.fan_control.dkms_version" not in keys


def test_fan_control_names_stay_only_where_the_node_confirms_them(variant: Baseline) -> None:
    facts = converged_facts(variant)
    values = values_of(replace(facts, dkms=tuple(replace(e, version="0.1.4") for e in facts.dkms)), variant)
    assert values["host.fan_control.dkms_version"] == "0.1.4"
    stopped = replace(facts, modules=frozenset({"nvidia_uvm"}),
                      units={**facts.units, "dgx-fan-control.service": UnitState("enabled", "failed")})
    capture = captured_values(stopped, variant)
    keys = {v.key for v in capture.values}
    assert "host.fan_control.module" not in keys and "host.fan_control.service" not in keys
    assert "host.fan_control.module: dgx_ec_fan_control is not loaded" in capture.missing
    assert "host.fan_control.service: dgx-fan-control.service is not enabled and active" in capture.missing


def test_modeset_purge_kept_where_the_package_is_gone_dropped_where_installed(variant: Baseline) -> None:
    facts = converged_facts(variant)
    assert values_of(facts, variant)["host.nvidia_drm.purge"] == "nvidia-drm-options-modeset0"
    installed = replace(facts, packages={**facts.packages, "nvidia-drm-options-modeset0": "25.07-1"})
    capture = captured_values(installed, variant)
    assert {v.key: v.value for v in capture.values}["host.nvidia_drm.purge"] is None
    assert capture.dropped == ("host.nvidia_drm.purge: nvidia-drm-options-modeset0 (installed on the node, "
                               "25.07-1)",)
    unread = replace(facts, packages={}, errors={"dpkg": "dpkg-query: not found"})
    assert "host.nvidia_drm.purge" not in values_of(unread, variant)


def test_a_null_capture_is_written_as_null_and_other_nulls_stay_null() -> None:
    from sparkbase.capture.core import Capture, Captured

    text = ("version: 1.0.0\nsecure_boot:\n  mok_fingerprint: null  # none yet\n"
            "host:\n  cpu_governor: performance  # keep\n")
    out = write_captured(text, Capture((Captured(("host", "cpu_governor"), None),), ()), "spark1", TIME)
    assert "  mok_fingerprint: null  # none yet\n" in out
    assert re.search(r"^  cpu_governor: null +# keep$", out, re.MULTILINE), out
