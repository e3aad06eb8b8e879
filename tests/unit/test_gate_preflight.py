"""Preflight decision logic (pure), the gate's override rules and the one append-only override log."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from test_audit_support import converged_node, shipped

from sparkbase.audit.expected import expected_for
from sparkbase.audit.run import AuditReport, build_report
from sparkbase.cli import preflight as preflight_cli
from sparkbase.cli.main import main
from sparkbase.facts.model import Gid, GpuFacts, Unreachable
from sparkbase.gate import preflight as preflight_module
from sparkbase.gate.preflight import PreflightResult
from sparkbase.gate.refusals import Refusal, judge, lane_refusals
from sparkbase.model.site import Site
from sparkbase.policy.overrides import (
    MAX_REASON_CHARS,
    OverrideLogError,
    ReasonError,
    RecordKind,
    append_record,
    checked_reason,
    new_record,
)

SITE = shipped()
NODES = ("spark1", "spark2", "spark3", "spark4")


def _report(lane: str, **drift: object):  # type: ignore[no-untyped-def]
    baseline = SITE.lanes[lane].baseline
    expectations = {node: expected_for(SITE, node, baseline) for node in NODES}
    facts = {node: converged_node(SITE, node, baseline)[1] for node in NODES}
    facts.update(drift)  # type: ignore[arg-type]
    return build_report("s", expectations, facts)


def _refusals(lane: str, report: AuditReport) -> list[Refusal]:
    return judge(lane_refusals(SITE, lane, SITE.lanes[lane]), report)


def test_converged_fleet_qualifies_every_site_lane() -> None:
    for lane in ("dsv41-flash", "glm-fp8", "glm-nvfp4"):
        assert _refusals(lane, _report(lane)) == []


def test_rejected_variant_is_refused_even_on_a_fleet_that_matches_it() -> None:
    lines = [r.line() for r in _refusals("ds41f-ring4", _report("ds41f-ring4"))]
    assert lines[0] == "lane: lane ds41f-ring4 is disabled (evaluated and rejected by the site)"
    assert any("breaks the site contract: kernel line" in line for line in lines)
    assert all(line.startswith("lane: ") for line in lines)


def test_every_reason_per_node_one_line_each() -> None:
    spark2 = converged_node(SITE, "spark2")[1]
    spark3 = converged_node(SITE, "spark3")[1]
    report = _report(
        "glm-fp8",
        spark2=replace(spark2, gpu=GpuFacts("580.126.09", 611, 10.0)),
        spark3=replace(spark3, gids={**spark3.gids, "rocep1s0f0": Gid(None, None)}),
        spark4=Unreachable("spark4", "connection refused"),
    )
    lines = [r.line() for r in _refusals("glm-fp8", report)]
    assert "spark2: gpu.clock: expected >= 1000 MHz, observed 611 MHz, 10 W (clock latch)" in lines
    assert any(line.startswith("spark3: fabric.gid.rocep1s0f0: ") for line in lines)
    assert "spark4: unreachable: connection refused" in lines
    assert all("\n" not in line for line in lines)


def test_node_on_another_baseline_version_is_refused_by_its_stamp() -> None:
    spark1 = converged_node(SITE, "spark1")[1]
    stamp = {**(spark1.stamp or {}), "version": "0.9.0"}
    report = _report("dsv41-flash", spark1=replace(spark1, stamp=stamp))
    lines = [r.line() for r in _refusals("dsv41-flash", report)]
    assert lines == ["spark1: stamp: expected site-stock-6.17-4k 1.3.0, observed site-stock-6.17-4k 0.9.0"]


def test_lane_qualified_on_an_old_version_or_unqualified_shape() -> None:
    lane = SITE.lanes["glm-fp8"].model_copy(update={"baseline_version": "0.9.0", "shape": "triangle3"})
    reasons = [r.reason for r in lane_refusals(SITE, "glm-fp8", lane)]
    assert any("qualified on site-stock-6.17-4k 0.9.0" in r for r in reasons)
    assert any("shape triangle3 is not qualified" in r for r in reasons)
    assert any("needs 3 nodes, the lane names 4" in r for r in reasons)


def test_fleet_disagreement_refuses() -> None:
    spark1 = converged_node(SITE, "spark1")[1]
    report = _report("glm-nvfp4", spark1=replace(spark1, governors=dict.fromkeys(range(20), "powersave")))
    lines = [r.line() for r in _refusals("glm-nvfp4", report)]
    assert lines == [lines[0]] and lines[0].startswith("fleet: fleet.governor: nodes disagree")


def test_override_log_appends_one_versioned_record_per_line(tmp_path: Path) -> None:
    log = tmp_path / ".sparkbase" / "overrides.log"
    when = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    first = new_record(
        RecordKind.PREFLIGHT, "vendor asked", lane="glm-fp8", baseline="b", nodes=["spark2", "spark1"],
        refusals=["spark1: gpu.clock: ..."], who="ops@x", when=when,
    )
    append_record(log, first)
    append_record(log, new_record(RecordKind.APPLY, "second", baseline="ds41f-7x-64k", nodes=["spark3"]))
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records[0] == {
        "format": 3, "kind": "preflight-override", "who": "ops@x", "when": "2026-11-29T12:00:00+00:00",
        "reason": "vendor asked", "lane": "glm-fp8", "baseline": "b", "nodes": ["spark1", "spark2"],
        "refusals": ["spark1: gpu.clock: ..."], "from": None,
    }
    assert records[1]["kind"] == "apply-override" and records[1]["lane"] is None
    assert [r["reason"] for r in records] == ["vendor asked", "second"]
    assert (log.stat().st_mode & 0o777) == 0o640


def test_override_log_never_loses_a_concurrent_line(tmp_path: Path) -> None:
    log = tmp_path / "overrides.log"
    threads = [
        threading.Thread(
            target=append_record, args=(log, new_record(RecordKind.PREFLIGHT, f"r{i}", refusals=["x" * 500]))
        )
        for i in range(20)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reasons = sorted(json.loads(line)["reason"] for line in log.read_text().splitlines())
    assert reasons == sorted(f"r{i}" for i in range(20))


def _plant(kind: str, tmp_path: Path) -> tuple[Path, Path]:
    """(log path to append to, the file a followed link would have written)."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "overrides.log").write_text("precious\n")
    site = tmp_path / "site"
    site.mkdir()
    log = site / ".sparkbase" / "overrides.log"
    if kind == "symlinked-directory":
        (site / ".sparkbase").symlink_to(victim)
    elif kind == "symlinked-log":
        log.parent.mkdir()
        log.symlink_to(victim / "overrides.log")
    elif kind == "dangling-symlinked-log":
        log.parent.mkdir()
        log.symlink_to(victim / "new.log")
        return log, victim / "new.log"
    elif kind == "fifo-log":
        log.parent.mkdir()
        os.mkfifo(log)
    elif kind == "directory-log":
        log.mkdir(parents=True)
    elif kind == "file-as-directory":
        (site / ".sparkbase").write_text("not a directory")
    return log, victim / "overrides.log"


UNSAFE_LOGS = ["symlinked-directory", "symlinked-log", "dangling-symlinked-log", "fifo-log", "directory-log",
               "file-as-directory"]


@pytest.mark.parametrize("kind", UNSAFE_LOGS)
def test_the_override_log_never_follows_a_link_or_writes_a_non_file(kind: str, tmp_path: Path) -> None:
    log, victim = _plant(kind, tmp_path)
    before = victim.read_bytes() if victim.exists() else None
    with pytest.raises(OverrideLogError, match=r"override log|log directory"):
        append_record(log, new_record(RecordKind.PREFLIGHT, "reason"))
    assert (victim.read_bytes() if victim.exists() else None) == before


# --- override reasons: cases as data (tests/cases/gate/) ---

REASON_CASES = sorted((Path(__file__).parents[1] / "cases" / "gate").glob("reason-*.yaml"))


@pytest.mark.parametrize("path", REASON_CASES, ids=[p.stem for p in REASON_CASES])
def test_override_reason_case(path: Path) -> None:
    case: dict[str, Any] = YAML(typ="safe").load(path.read_text())
    reason = case["reason"] if "reason" in case else case["repeat"] * case["times"]
    if case["accepted"]:
        assert checked_reason(reason) == case["recorded"]
    else:
        with pytest.raises(ReasonError, match=case["message"]):
            checked_reason(reason)


def test_reason_corpus_is_large_enough() -> None:
    assert len(REASON_CASES) >= 12
    assert MAX_REASON_CHARS == 500


# --- the CLI gate, with the fleet's audit faked (pure decision on shipped facts) ---

def _fake_gate(monkeypatch: pytest.MonkeyPatch, **drift: object) -> None:
    def fake_preflight(site: Site, name: str, targets: Any, parallel: int = 16,
                       before_launch: bool = False) -> PreflightResult:
        report = _report(name, **drift)
        return PreflightResult(name, tuple(judge(lane_refusals(site, name, site.lanes[name]), report)),
                               report, 0.01)

    monkeypatch.setattr(preflight_module, "preflight", fake_preflight)
    monkeypatch.setattr(preflight_cli, "preflight", fake_preflight)
    monkeypatch.setattr(preflight_cli, "ssh_targets", lambda site, lab=None: {})


def _latched() -> dict[str, object]:
    spark3 = converged_node(SITE, "spark3")[1]
    return {"spark3": replace(spark3, gpu=replace(spark3.gpu, sm_clock_mhz=600, power_w=10.0))}


def test_a_disabled_lane_cannot_be_overridden(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_gate(monkeypatch)
    log = tmp_path / "overrides.log"
    argv = ["preflight", "ds41f-ring4", "--site", str(SITE.root), "--log", str(log)]
    assert main([*argv, "--override", "just this once"]) == 1
    out = capsys.readouterr().out
    assert "--override cannot launch a disabled lane" in out and "enabled: true" in out
    assert not log.exists()
    assert main([*argv, "--override", "just this once", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["overridden"] is False


def test_an_enabled_lane_is_overridden_and_recorded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_gate(monkeypatch, **_latched())
    log = tmp_path / "overrides.log"
    argv = ["preflight", "glm-fp8", "--site", str(SITE.root), "--log", str(log)]
    assert main(argv) == 1
    assert main([*argv, "--override", "  bring-up\u200b test\n"]) == 0
    err = capsys.readouterr().err
    assert 'OVERRIDDEN by' in err and '"bring-up test"' in err
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert record["kind"] == "preflight-override" and record["reason"] == "bring-up test"
    assert record["lane"] == "glm-fp8" and any(line.startswith("spark3: gpu.") for line in record["refusals"])


@pytest.mark.parametrize("reason", ["", "   ", "\u200b\u200b", "\u202e\u2066", "\n\t\r", "\u3164"])
def test_an_override_reason_without_visible_text_is_refused(
    reason: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_gate(monkeypatch, **_latched())
    log = tmp_path / "overrides.log"
    argv = ["preflight", "glm-fp8", "--site", str(SITE.root), "--log", str(log), "--override", reason]
    with pytest.raises(SystemExit) as refused:
        main(argv)
    assert refused.value.code == 2
    assert "no visible text" in capsys.readouterr().err and not log.exists()


def test_an_unwritable_log_refuses_the_launch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_gate(monkeypatch, **_latched())
    log, _victim = _plant("symlinked-log", tmp_path)
    argv = ["preflight", "glm-fp8", "--site", str(SITE.root), "--log", str(log), "--override", "x"]
    assert main(argv) == 1
    assert "the override could not be recorded" in capsys.readouterr().err
    assert main([*argv, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["overridden"] is False


def test_a_refusal_line_is_one_line_whatever_a_node_answers() -> None:
    spark2 = converged_node(SITE, "spark2")[1]
    hostile = replace(spark2, kernel_release="6.17\rQUIET\x1b[2K\nspark2: ok")
    report = _report("glm-fp8", spark2=hostile)
    lines = [r.line() for r in _refusals("glm-fp8", report)]
    assert lines and all("\n" not in line and "\r" not in line and "\x1b" not in line for line in lines)
    assert any("6.17\\rQUIET\\x1b[2K\\nspark2: ok" in line for line in lines)
