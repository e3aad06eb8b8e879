"""Issue 11 end to end: the emulated fleet prints what real tools print, and sparkbase reads
it right. The five misjudgements (cpuset by set, signature by serial, Secure Boot not
enforcing, dkms noise, real grub.cfg) on a node converged to the variant, which then audits
clean and applies no change. Own lab (port base SPARKBASE_TEST_FACTS_PORT_BASE): a clone of
the run's variant image (conftest.py `variant_image`), whose spark2 a real apply moved from the
factory state to the variant."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import fleets
import pytest
from ports import port_base

from sparkbase.audit.expected import expected_for
from sparkbase.audit.run import judge_node
from sparkbase.facts.collect import gather_fleet
from sparkbase.facts.model import NodeFacts, SecureBoot
from sparkbase.facts.parsers.kernel import parse_grubenv
from sparkbase.facts.parsers.modules import parse_modinfo
from sparkbase.facts.parsers.secure_boot import normalise_serial, parse_mok_certificates
from sparkbase.model.site import load_site
from sparkbase.transport import ssh_targets
from sparkbase_lab import faults

pytestmark = pytest.mark.end_to_end

PORT_BASE = port_base("SPARKBASE_TEST_FACTS_PORT_BASE", 2871)
NODE = fleets.VARIANT_NODE
VARIANT = fleets.VARIANT
VARIANT_KERNEL = fleets.VARIANT_KERNEL
SAVER = "nvidia_uvm"  # the memory saver is a patched nvidia-uvm (under updates/dkms)


class Fleet(fleets.Fleet):
    """The shared fleet; `sh` runs on NODE, the node this module converges and reads."""

    def sh(self, command: str, input: str | None = None) -> str:  # type: ignore[override]
        """Run a shell command on NODE; fail the test if it fails."""
        return super().sh(NODE, command, input)

    def facts(self) -> tuple[Any, NodeFacts]:
        """What the audit reads on the node, judged against the variant."""
        site = load_site(self.site)
        expected = expected_for(site, NODE, VARIANT)
        found = gather_fleet(ssh_targets(site, self.lab.dir), {NODE: expected.plan()})[NODE]
        assert isinstance(found, NodeFacts), found
        return expected, found

    def failed(self) -> dict[str, Any]:
        expected, found = self.facts()
        return {r.id: r for r in judge_node(expected, found) if r.status == "fail"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, variant_image: fleets.ConvergedImage) -> Iterator[Fleet]:
    for shared in fleets.image_fleet(variant_image, tmp_path_factory.mktemp("facts"), PORT_BASE, nodes=2):
        yield Fleet(shared.lab, shared.site)


@pytest.fixture(scope="module")
def variant(fleet: Fleet, variant_image: fleets.ConvergedImage) -> dict[str, Any]:
    """spark2 converged to the variant (policy override, its MOK enrolled at the console), as
    the apply's JSON report: the variant image's apply, the node booted again in the clone."""
    assert [n["status"] for n in variant_image.report["nodes"]] == ["changed"]
    assert fleet.sh("uname -r").strip() == VARIANT_KERNEL
    return variant_image.report


def test_the_node_prints_kmod_signatures_as_kmod_does(fleet: Fleet, variant: dict[str, Any]) -> None:
    info = parse_modinfo(fleet.sh(f"modinfo -k {VARIANT_KERNEL} {SAVER}"), 0)
    assert info.filename is not None and "/updates/dkms/" in info.filename
    assert info.srcversion is not None and int(info.srcversion, 16) >= 0
    assert info.sig_key is not None and info.sig_key == info.sig_key.upper() and ":" in info.sig_key
    enrolled = parse_mok_certificates(fleet.sh("mokutil --list-enrolled"))
    signer = [cert for cert in enrolled if cert.serial == normalise_serial(info.sig_key)]
    assert len(signer) == 1, (info.sig_key, enrolled)
    # the serial, not the SHA-1 fingerprint the baseline pins: the misjudgement of 0.1.0
    assert normalise_serial(info.sig_key) != signer[0].fingerprint.replace(":", "").lstrip("0")
    pinned = load_site(fleet.site).baselines[VARIANT].secure_boot.mok_fingerprint
    if pinned is not None:
        assert signer[0].fingerprint == pinned
    assert info.signer == signer[0].issuer_cn
    # the loaded nvidia_uvm is the patched one: the recipe's srcversion, packing on by default
    saver = load_site(fleet.site).baselines[VARIANT].memory.memory_saver
    assert saver is not None and info.srcversion == saver.srcversion
    assert fleet.sh("cat /sys/module/nvidia_uvm/srcversion").strip() == saver.srcversion
    assert fleet.sh("cat /sys/module/nvidia_uvm/parameters/uvm_pack_sysmem_leaf_tables").strip() == "Y"


def test_variant_node_audits_clean_and_a_second_apply_changes_nothing(
    fleet: Fleet, variant: dict[str, Any]
) -> None:
    shown = fleet.sh("systemctl show -p AllowedCPUs sparkbase-serving.slice").strip()
    assert shown == "AllowedCPUs=5-9 15-19"  # systemd's own format: ranges joined by spaces
    expected, found = fleet.facts()
    assert found.errors == {}, found.errors
    assert found.slice_allowed_cpus == frozenset({*range(5, 10), *range(15, 20)})
    assert found.secure_boot is SecureBoot.ENABLED
    results = {r.id: r for r in judge_node(expected, found)}
    assert [(i, r.observed) for i, r in results.items() if r.blocking] == []
    for check in ("cpuset.slice", "memory_saver.signature", "memory_saver.dkms", "memory_saver.loaded",
                  "secure_boot.state", "boot.grub_default"):
        assert results[check].status == "pass", check
    again = fleet.sparkbase("apply", "--limit", NODE, "--baseline", VARIANT, "--yes",
                            "--override-policy", "e2e: idempotence on real formats", "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    node = json.loads(again.stdout)["nodes"][0]
    assert node["status"] == "unchanged"
    assert [op["name"] for op in node["operations"] if op["status"] != "unchanged"] == []
    dkms = next(op for op in node["operations"] if op["kind"] == "dkms-install")
    assert "signed by" in dkms["reason"]  # judged by the signing certificate, as the audit does


def test_dkms_noise_is_reported_never_fatal(fleet: Fleet, variant: dict[str, Any]) -> None:
    faults.inject(fleet.lab, NODE, "dkms-noise")
    try:
        _, found = fleet.facts()
        assert [(e.name, e.kernel, e.status) for e in found.dkms] == [
            ("dgx-spark-fan-control", VARIANT_KERNEL, "installed"),
            ("dgx-spark-memory-saver", VARIANT_KERNEL, "installed"),
        ]
        assert any("Deprecated feature" in line for line in found.dkms_noise)
        failed = fleet.failed()
        assert "memory_saver.dkms" not in failed and "host.fan_control.dkms" not in failed
        plan = fleet.sparkbase("plan", "--limit", NODE, "--baseline", VARIANT,
                               "--override-policy", "e2e: dkms noise")
        assert "build and sign" not in plan.stdout.split("apply summary")[0].replace("=", "")
    finally:
        faults.clear(fleet.lab, NODE, "dkms-noise")


@pytest.mark.parametrize(
    ("fault", "state", "observed"),
    [
        ("sb-not-enforcing", SecureBoot.NOT_ENFORCING, "validation disabled in shim"),
        ("sb-setup-mode", SecureBoot.SETUP_MODE, "setup mode"),
        ("no-efi", SecureBoot.UNSUPPORTED, "not supported"),
    ],
)
def test_secure_boot_that_does_not_enforce_fails_with_its_own_words(
    fleet: Fleet, variant: dict[str, Any], fault: str, state: SecureBoot, observed: str
) -> None:
    faults.inject(fleet.lab, NODE, fault)
    try:
        _, found = fleet.facts()
        assert found.secure_boot is state
        failed = fleet.failed()
        assert "secure_boot.state" in failed
        assert observed in str(failed["secure_boot.state"].observed)
        if state is SecureBoot.NOT_ENFORCING:
            assert "mokutil --enable-validation" in str(failed["secure_boot.state"].fix)
    finally:
        faults.clear(fleet.lab, NODE, fault)


def test_grub_cfg_as_grub_mkconfig_writes_it(fleet: Fleet, variant: dict[str, Any]) -> None:
    cfg = fleet.sh("cat /boot/grub/grub.cfg")
    assert "$menuentry_id_option 'gnulinux-" in cfg
    _, found = fleet.facts()
    assert found.grub is not None and found.grub.default_entry is not None
    assert found.grub.default_entry.release == VARIANT_KERNEL
    assert all(entry.ident for entry in found.grub.entries if entry.release)
    listed = parse_grubenv(fleet.sh("grub-editenv /boot/grub/grubenv list"))
    assert listed == parse_grubenv(fleet.sh("cat /boot/grub/grubenv"))


def test_dgx_release_in_dgx_os_7_numbering(fleet: Fleet, variant: dict[str, Any]) -> None:
    _, found = fleet.facts()
    assert found.dgx_release is not None
    assert found.dgx_release["DGX_NAME"] == "DGX Spark"
    assert found.dgx_release.get("DGX_SWBUILD_VERSION", "").startswith("7.")
