"""The gate holds a lane to its qualified releases once it has one: preflight refuses what
matches none (naming what differs from the newest), an override records it in the one
decision log, a site without releases keeps today's gate, `lock --check` reports."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_gate_preflight import _report

from sparkbase.cli import preflight as preflight_cli
from sparkbase.cli.main import main
from sparkbase.gate import preflight as preflight_module
from sparkbase.gate.preflight import PreflightResult, lane_level
from sparkbase.gate.records import Completion, NewRelease, shape_of, write_release
from sparkbase.gate.refusals import judge, lane_refusals
from sparkbase.gate.releases import release_refusals
from sparkbase.model.site import Site, load_site

LANE = "dsv41-flash"


def record(site_root: Path, name: str = "r1") -> None:
    """Qualify the lane as the site declares it now (the record only)."""
    site = load_site(site_root)
    write_release(site_root, NewRelease(
        LANE, name, site_root / "lanes" / f"{LANE}.yaml", shape_of(site, LANE), {"name": "s", "digest": "d"},
        {"p1": Completion("p1", "x")}, {}, "ops@mgmt", datetime.now(UTC).isoformat(timespec="seconds")))


def change_unit(site_root: Path) -> None:
    lane = site_root / "lanes" / f"{LANE}.yaml"
    text = lane.read_text()
    lane.write_text(text.replace("unit: lane-dsv41-flash.service", "unit: lane-dsv41-next.service"))


def refusals(site_root: Path) -> list[str]:
    return [r.line() for r in release_refusals(load_site(site_root), LANE)]


def test_no_release_no_qualification_refusal(site_copy: Path) -> None:
    assert refusals(site_copy) == []
    change_unit(site_copy)
    assert refusals(site_copy) == []  # a lane the gate does not hold to a release yet


def test_what_runs_must_match_a_release_once_there_is_one(site_copy: Path) -> None:
    record(site_copy)
    assert refusals(site_copy) == []
    change_unit(site_copy)
    (line,) = refusals(site_copy)
    assert line.startswith("lane: qualification: what runs matches none of the 1 qualified release(s) in "
                           "releases/dsv41-flash/; against the newest, r1: ")
    assert 'lane setting runtime.unit: "lane-dsv41-next.service"; r1: "lane-dsv41-flash.service"' in line
    assert line.endswith("(`sparkbase qualify dsv41-flash` qualifies it)")
    record(site_copy, "r2")  # the changed lane qualified: it matches r2
    assert refusals(site_copy) == []


def test_a_baseline_change_is_named_by_its_render_hash(site_copy: Path) -> None:
    record(site_copy)
    baseline = site_copy / "baselines" / "site-stock-6.17-4k.yaml"
    baseline.write_text(baseline.read_text().replace("version: 1.3.0", "version: 1.3.1"))
    for lane in (site_copy / "lanes").glob("*.yaml"):  # every lane on it moves with it
        lane.write_text(lane.read_text().replace("baseline_version: 1.3.0", "baseline_version: 1.3.1"))
    (line,) = refusals(site_copy)
    assert "baseline render hash" in line and "(site-stock-6.17-4k 1.3.1); r1: " in line
    assert 'lane setting baseline_version: "1.3.1"; r1: "1.3.0"' in line


def test_a_record_that_cannot_be_read_refuses(site_copy: Path) -> None:
    record(site_copy)
    (site_copy / "releases" / LANE / "r1" / "release.json").write_text("{")
    (line,) = refusals(site_copy)
    assert line.startswith("lane: qualification: ") and "r1/release.json: not JSON" in line


def test_qualify_itself_is_gated_without_the_release_check(site_copy: Path) -> None:
    record(site_copy)
    change_unit(site_copy)
    site = load_site(site_copy)
    assert [r.reason for r in lane_level(site, LANE)][-1].startswith("qualification: ")
    assert lane_level(site, LANE, releases=False) == lane_refusals(site, LANE, site.lanes[LANE])


@pytest.fixture
def faked_audit(monkeypatch: pytest.MonkeyPatch) -> None:
    """`preflight` with the fleet's audit faked (converged nodes), its lane-level reasons real."""
    def fake_preflight(site: Site, name: str, targets: Any, parallel: int = 16,
                       before_launch: bool = False, releases: bool = True) -> PreflightResult:
        report = _report(name)
        return PreflightResult(name, tuple(judge(lane_level(site, name, releases), report)), report, 0.01)

    monkeypatch.setattr(preflight_module, "preflight", fake_preflight)
    monkeypatch.setattr(preflight_cli, "preflight", fake_preflight)
    monkeypatch.setattr(preflight_cli, "ssh_targets", lambda site, lab=None: {})


def test_preflight_refuses_then_an_override_is_recorded(site_copy: Path, faked_audit: None, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    record(site_copy)
    argv = ["preflight", LANE, "--site", str(site_copy), "--json"]
    assert main(argv) == 0 and json.loads(capsys.readouterr().out)["qualified"] is True
    change_unit(site_copy)
    assert main(argv) == 1
    (refusal,) = json.loads(capsys.readouterr().out)["refusals"]
    assert refusal["where"] == "lane" and refusal["reason"].startswith("qualification: ")
    log = tmp_path / "overrides.log"
    assert main([*argv, "--log", str(log), "--override", "trying the next build before qualifying"]) == 0
    assert json.loads(capsys.readouterr().out)["overridden"] is True
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry["kind"] == "preflight-override"
    assert entry["reason"] == "trying the next build before qualifying"
    assert entry["refusals"][0].startswith("lane: qualification: what runs matches none")


def test_lock_check_reports_lanes_outside_the_gate(site_copy: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["lock", "--check", "--allow-placeholders", "--site", str(site_copy)]
    assert main(argv) == 0
    assert "qualified release" not in capsys.readouterr().err  # no releases/: today's output
    record(site_copy)
    change_unit(site_copy)
    assert main(argv) == 0  # reported, not refused: a candidate is declared before it is qualified
    err = capsys.readouterr().err
    assert "sparkbase: lane glm-fp8 has no qualified release" in err
    assert "lane ds41f-ring4" not in err  # a disabled lane is not a candidate
    assert (f"sparkbase: lane {LANE}: as declared it matches none of its 1 qualified release(s) "
            '(lane setting runtime.unit: "lane-dsv41-next.service"; r1: "lane-dsv41-flash.service")') in err
