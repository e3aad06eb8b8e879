"""`sparkbase capture`'s pure parts: facts -> captured values -> the baseline's YAML text
(comments kept, sources written, the result validates), and the targets it refuses."""

from __future__ import annotations

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
from sparkbase.cli.main import main
from sparkbase.facts.model import (
    GpuFacts,
    GrubBoot,
    GrubEntry,
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
)


def converged_facts(baseline: Baseline, node: str = "spark1") -> NodeFacts:
    """What a node converged to `baseline` reports (every pinned value as pinned)."""
    release = baseline.kernel.release
    entry = GrubEntry(path=baseline.kernel.grub_entry, release=release)
    units = {unit: UnitState("disabled", "inactive") for unit in baseline.host.disable_services}
    units["display-manager.service"] = UnitState("", "inactive")
    return NodeFacts(
        node=node,
        kernel_release=release,
        page_size=baseline.kernel.page_size,
        cmdline=("BOOT_IMAGE=/vmlinuz", "ro", "quiet", *baseline.kernel.cmdline_add),
        thp=baseline.memory.transparent_hugepages,
        sysctls=dict(baseline.memory.sysctls),
        gpu=GpuFacts(driver_version=baseline.driver.version),
        module_params={"nvidia_drm.modeset": "N", "nvidia_drm.fbdev": "N"},
        secure_boot=SecureBoot.ENABLED,
        mok_certificates=(MokCertificate(MOK),),
        default_target=baseline.host.boot_target,
        units=units,
        slice_allowed_cpus=frozenset(baseline.cpuset.cpus),
        file_sha256={baseline.nccl.library.path: baseline.nccl.library.sha256},
        packages={pin.name: pin.version for pin in baseline.packages()},
        grub=GrubBoot(entries=(entry,), default=entry.path, default_entry=entry),
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
        file_sha256={shipped.nccl.library.path: "ab" * 32},
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
    from sparkbase.capture import Capture, Captured

    capture = Capture((Captured(("kernel", "release"), "6.17.0-1040-nvidia"),
                       Captured(("memory", "sysctls"), {"vm.max_map_count": 1048576})), ())
    out = write_captured(text, capture, "spark2", TIME)
    assert out.startswith("# head comment\nversion: 1.0.0  # keep me\n")
    assert "release: 6.17.0-1040-nvidia  # old" in out
    assert "kernel.release: {kind: captured, node: spark2, time: '2026-12-01T02:40:00Z'}" in out
    assert "vm.max_map_count: 1048576" in out


def test_a_more_specific_source_under_a_captured_field_goes() -> None:
    text = "version: 1.0.0\nsources:\n  memory.sysctls.vm.x: {kind: seed}\n  memory: {kind: seed}\n"
    from sparkbase.capture import Capture, Captured

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


def test_capture_plan_reads_moks_and_any_kernel_package() -> None:
    plan = capture_plan(FactPlan(packages=("nccl-site-ring4",), mok_keys=False))
    assert plan.mok_keys
    assert plan.packages == ("nccl-site-ring4", "linux-image-*", "nvidia-utils-*")


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
    import sparkbase.facts.collect
    import sparkbase.transport

    fake = FakeNodes()

    def gather(node: str, _target: object, plan: FactPlan) -> NodeFacts | Unreachable:
        fake.plans.append(plan)
        return fake.answers.get(node) or converged_facts(shipped, node)

    monkeypatch.setattr(sparkbase.transport, "ssh_targets", lambda site, lab=None: dict.fromkeys(
        site.inventory.nodes))
    monkeypatch.setattr(sparkbase.facts.collect, "gather_node", gather)
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
    from sparkbase.capture import Capture, Captured

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
