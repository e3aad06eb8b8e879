"""MOK enrolment pending: imported with `mokutil --import`, not yet enrolled by a person at
the console. apply reports it as its own state with the MokManager steps, the audit shows it
(the modules signed by that key are not expected to load until then), and neither calls it a
generic failure or a plain reboot."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_audit_support import converged_node, shipped

from sparkbase.audit.run import judge_node
from sparkbase.deploy.areas.secure_boot import MokImport
from sparkbase.deploy.kinds import Step
from sparkbase.deploy.reboot import module_mismatches, mok_enrolment, reboot_reasons
from sparkbase.deploy.results import NodeResult, NodeStatus, Report
from sparkbase.facts.model import NodeFacts
from sparkbase.model.baseline import Baseline
from sparkbase.model.cmdline import rendered_kernel_args
from sparkbase.model.site import Site
from sparkbase.policy.mok import CONSOLE_STEPS, pending_enrolment, pending_signer

VARIANT = "ds41f-7x-64k"
KEY = "aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd"


@pytest.fixture(scope="module")
def site() -> Site:
    return shipped()


def _pending(facts: NodeFacts) -> NodeFacts:
    """The node after `mokutil --import` and a reboot nobody attended: the key that signed the
    modules is pending, not enrolled, and neither signed module is loaded (the stock
    nvidia_uvm is)."""
    cert = facts.mok_certificates[0]
    stock = {**facts.nvidia_modules, "nvidia_uvm.srcversion": "0123456789ABCDEF01234"}
    return replace(facts, mok_certificates=facts.mok_certificates[1:], mok_pending=(cert,),
                   modules=facts.modules - {"dgx_ec_fan_control"}, nvidia_modules=stock)


def test_the_console_steps_are_mokmanagers() -> None:
    assert [step.split(" (")[0] for step in CONSOLE_STEPS[2:]] == [
        "Continue", "Yes", "the password: the node's root password", "Reboot"]
    assert "Enroll MOK" in CONSOLE_STEPS[1]


def test_pending_is_imported_and_not_enrolled() -> None:
    assert pending_enrolment(KEY, [], [KEY.upper()]) is not None
    assert pending_enrolment(KEY, [KEY], [KEY]) is None  # enrolled wins
    assert pending_enrolment(KEY, [], []) is None  # never imported: not pending
    assert pending_enrolment(None, [], [KEY]) is None  # no key signs the modules


def test_audit_shows_pending_with_the_console_steps_not_a_generic_failure(site: Site) -> None:
    expected, facts = converged_node(site, "spark1", VARIANT)
    results = {r.id: r for r in judge_node(expected, _pending(facts))}
    failed = {i for i, r in results.items() if r.status == "fail"}
    assert failed == {"secure_boot.mok", "memory_saver.signature", "memory_saver.loaded",
                      "host.fan_control.signature", "host.fan_control.loaded"}
    for check in failed:
        assert "MOK enrolment pending" in str(results[check].observed) + str(results[check].fix), check
        assert "Enroll MOK → Continue → Yes" in str(results[check].fix), check
    assert "not expected to load" in str(results["memory_saver.loaded"].observed)
    assert "dmesg" not in str(results["memory_saver.loaded"].fix)


def test_audit_with_the_key_enrolled_is_clean_again(site: Site) -> None:
    expected, facts = converged_node(site, "spark1", VARIANT)
    assert [r.id for r in judge_node(expected, facts) if r.status == "fail"] == []
    signer = pending_signer(facts.memory_saver, facts.mok_certificates, facts.mok_certificates, None)
    assert signer is None  # enrolled: nothing pending, even if mokutil still listed it


def test_a_pinned_pending_key_is_named_by_the_mok_check(site: Site) -> None:
    expected, facts = converged_node(site, "spark1", VARIANT)
    pending = _pending(facts)
    key = pending.mok_pending[0].fingerprint
    secure = expected.baseline.secure_boot.model_copy(update={"mok_fingerprint": key})
    pinned = replace(expected, baseline=expected.baseline.model_copy(update={"secure_boot": secure}))
    mok = {r.id: r for r in judge_node(pinned, pending)}["secure_boot.mok"]
    assert mok.status == "fail" and str(mok.observed).startswith(f"MOK enrolment pending: {key}")


def _boot(baseline: Baseline, modules: list[str]) -> dict[str, Any]:
    return {"kernel": baseline.kernel.release, "page_size": 65536, "cmdline": rendered_kernel_args(baseline),
            "modules": modules,
            "drm_modeset": "", "drm_fbdev": "", "staged": []}


def test_a_reboot_does_not_load_what_a_pending_key_signed(site: Site) -> None:
    baseline = site.baselines[VARIANT]
    boot = _boot(baseline, ["nvidia", "nvidia_drm"])
    mok = {"enrolled": [], "pending": [KEY]}
    assert module_mismatches(baseline, boot, mok, KEY) == []
    assert mok_enrolment(baseline, mok, KEY) is not None
    # once enrolled, modules that still do not load are a problem again
    enrolled = {"enrolled": [KEY], "pending": []}
    assert module_mismatches(baseline, boot, enrolled, KEY) == ["nvidia_uvm is not loaded",
                                                                "dgx_ec_fan_control is not loaded"]
    assert mok_enrolment(baseline, enrolled, KEY) is None
    staged = Step(MokImport(certificate="/var/lib/shim-signed/mok/MOK.der", fingerprint=KEY), "enrol",
                  reboot=True, section="secure_boot")
    assert reboot_reasons(baseline, boot, mok, [staged], KEY) == ["enrol changes"]


def test_apply_reports_the_state_and_exits_1() -> None:
    pending = pending_enrolment(KEY, [], [KEY])
    assert pending is not None
    node = NodeResult("spark2", VARIANT, NodeStatus.MOK_PENDING, mok_enrolment=pending.to_json())
    report = Report("apply", [node])
    data = report.to_json()["nodes"][0]
    assert data["status"] == "MOK enrolment pending"
    assert data["mok_enrolment"] == {"state": "pending", "fingerprint": KEY,
                                     "console_steps": list(CONSOLE_STEPS)}
    assert report.exit_code() == 1
    assert "Enroll MOK → Continue → Yes" in node.detail()


def test_the_lab_enrols_only_with_a_person_at_the_console(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The lab's boot: pending keys stay pending with nobody at the console; `lab console
    NODE enroll-mok` puts a person there for exactly the next boot."""
    import json

    from sparkbase_lab import console
    from sparkbase_lab.fleet import Lab, LabError

    lab = Lab(tmp_path / "lab", port_base=2201)
    firmware = lab.node_dir("spark1") / "firmware" / "firmware.json"
    monkeypatch.setattr(Lab, "node_names", property(lambda _self: ["spark1"]))
    with pytest.raises(LabError, match="no firmware record"):
        console.request(lab, "spark1", "enroll-mok")
    firmware.parent.mkdir(parents=True)
    firmware.write_text(json.dumps({"enrolled": [], "pending": [{"fingerprint": KEY}]}))
    with pytest.raises(LabError, match="unknown console action"):
        console.request(lab, "spark1", "reset-bios")
    with pytest.raises(LabError, match="unknown node"):
        console.request(lab, "spark9", "enroll-mok")
    assert "1 key(s) pending now" in console.request(lab, "spark1", "enroll-mok")
    assert json.loads(firmware.read_text())["console"] == "enroll-mok"
