"""Preflight decision logic (pure) and the append-only override log."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from pathlib import Path

from test_audit_support import converged_node, shipped

from sparkbase.audit.expected import expected_for
from sparkbase.audit.run import build_report
from sparkbase.facts.model import Gid, GpuFacts, Unreachable
from sparkbase.gate.overrides import append_override, override_record
from sparkbase.gate.preflight import decide, lane_refusals

SITE = shipped()
NODES = ("spark1", "spark2", "spark3", "spark4")


def _report(lane: str, **drift: object):  # type: ignore[no-untyped-def]
    baseline = SITE.lanes[lane].baseline
    expectations = {node: expected_for(SITE, node, baseline) for node in NODES}
    facts = {node: converged_node(SITE, node, baseline)[1] for node in NODES}
    facts.update(drift)  # type: ignore[arg-type]
    return build_report("s", expectations, facts)


def test_converged_fleet_qualifies_every_site_lane() -> None:
    for lane in ("dsv41-flash", "glm-fp8", "glm-nvfp4"):
        assert decide(SITE, lane, SITE.lanes[lane], _report(lane)) == []


def test_rejected_variant_is_refused_even_on_a_fleet_that_matches_it() -> None:
    lane = SITE.lanes["ds41f-ring4"]
    lines = [r.line() for r in decide(SITE, "ds41f-ring4", lane, _report("ds41f-ring4"))]
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
    lines = [r.line() for r in decide(SITE, "glm-fp8", SITE.lanes["glm-fp8"], report)]
    assert "spark2: gpu.clock: expected >= 1000 MHz, observed 611 MHz, 10 W (clock latch)" in lines
    assert any(line.startswith("spark3: fabric.gid.rocep1s0f0: ") for line in lines)
    assert "spark4: unreachable: connection refused" in lines
    assert all("\n" not in line for line in lines)


def test_node_on_another_baseline_version_is_refused_by_its_stamp() -> None:
    spark1 = converged_node(SITE, "spark1")[1]
    stamp = {**(spark1.stamp or {}), "version": "0.9.0"}
    report = _report("dsv41-flash", spark1=replace(spark1, stamp=stamp))
    lines = [r.line() for r in decide(SITE, "dsv41-flash", SITE.lanes["dsv41-flash"], report)]
    assert lines == ["spark1: stamp: expected site-stock-6.17-4k 1.0.0, observed site-stock-6.17-4k 0.9.0"]


def test_lane_qualified_on_an_old_version_or_unqualified_shape() -> None:
    lane = SITE.lanes["glm-fp8"].model_copy(update={"baseline_version": "0.9.0", "shape": "triangle3"})
    reasons = [r.reason for r in lane_refusals(SITE, "glm-fp8", lane)]
    assert any("qualified on site-stock-6.17-4k 0.9.0" in r for r in reasons)
    assert any("shape triangle3 is not qualified" in r for r in reasons)
    assert any("needs 3 nodes, the lane names 4" in r for r in reasons)


def test_fleet_disagreement_refuses() -> None:
    spark1 = converged_node(SITE, "spark1")[1]
    report = _report("glm-nvfp4", spark1=replace(spark1, governors=dict.fromkeys(range(20), "powersave")))
    lines = [r.line() for r in decide(SITE, "glm-nvfp4", SITE.lanes["glm-nvfp4"], report)]
    assert lines == [lines[0]] and lines[0].startswith("fleet: fleet.governor: nodes disagree")


def test_override_log_appends_json_lines(tmp_path: Path) -> None:
    log = tmp_path / ".sparkbase" / "overrides.log"
    append_override(log, override_record("glm-fp8", "vendor asked", ["spark1: gpu.clock: ..."], now=0.0))
    append_override(log, override_record("glm-fp8", "second", [], now=60.0))
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["reason"] for r in records] == ["vendor asked", "second"]
    assert records[0]["time"] == "1970-01-01T00:00:00+00:00"
    assert set(records[0]) == {"format", "time", "user", "lane", "reason", "failures"}
    assert records[0]["failures"] == ["spark1: gpu.clock: ..."]


def test_override_log_never_loses_a_concurrent_line(tmp_path: Path) -> None:
    log = tmp_path / "overrides.log"
    threads = [
        threading.Thread(target=append_override, args=(log, override_record("l", f"r{i}", ["x" * 500])))
        for i in range(20)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reasons = sorted(json.loads(line)["reason"] for line in log.read_text().splitlines())
    assert reasons == sorted(f"r{i}" for i in range(20))
    assert os.stat(log).st_size == len(log.read_bytes())
