"""Report formats: table, JUnit XML, Prometheus textfile, atomic --output."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace

from test_audit_support import converged_node, shipped

from sparkbase.audit.expected import expected_for
from sparkbase.audit.reports import render, to_junit, to_table
from sparkbase.audit.run import AuditReport, build_report
from sparkbase.audit.textfile import to_prometheus
from sparkbase.facts.model import FactsResult, GpuFacts, Unreachable

NODES = ("spark1", "spark2", "spark3", "spark4")


def _report() -> AuditReport:
    site = shipped()
    expectations = {node: expected_for(site, node) for node in NODES}
    facts = {node: converged_node(site, node)[1] for node in NODES}
    facts["spark2"] = replace(facts["spark2"], gpu=GpuFacts("580.126.09", 611, 10.0))
    gathered: dict[str, FactsResult] = {**facts, "spark4": Unreachable("spark4", "connection refused")}
    return build_report("four-spark-ring", expectations, gathered, 1_700_000_000.0, 0.5)


def test_table_names_drift_and_unreachable() -> None:
    text = to_table(_report())
    assert "spark2  FAIL" in text and "gpu.clock" in text and "unplug power" in text
    assert "spark4  UNREACHABLE" in text and "connection refused" in text
    assert text.splitlines()[-1].startswith("unreachable: 4 node(s), 1 unreachable")
    assert "kernel.release" not in text  # passing checks only with --verbose
    assert "kernel.release" in to_table(_report(), verbose=True)


def test_junit_has_a_suite_per_node_and_failures() -> None:
    root = ET.fromstring(to_junit(_report()))
    suites = {suite.get("name"): suite for suite in root.iter("testsuite")}
    assert set(suites) == {*NODES, "fleet"}
    assert suites["spark2"].get("failures") == "1"
    failure = next(case for case in suites["spark2"] if case.find("failure") is not None)
    assert failure.get("name") == "gpu.clock"
    assert suites["spark4"].get("errors") == "1"
    assert suites["spark1"].get("failures") == "0"


def test_prometheus_textfile() -> None:
    """Written by prometheus_client; read back by the strict scrape parser, every line a sample."""
    from sparkbase.gate.metrics import parse_scrapes

    text = to_prometheus(_report())
    assert 'sparkbase_check_ok{check="gpu.clock",node="spark2",severity="error"} 0.0' in text
    assert 'sparkbase_check_ok{check="gpu.clock",node="spark1",severity="error"} 1.0' in text
    assert "# TYPE sparkbase_node_reachable gauge" in text
    samples = {(s.metric, tuple(sorted(s.labels.items()))): s.value for s in parse_scrapes(text, 0.0)}
    assert samples[("sparkbase_node_reachable", (("node", "spark4"),))] == 0
    assert samples[("sparkbase_node_reachable", (("node", "spark1"),))] == 1
    assert samples[("sparkbase_node_drift_checks", (("node", "spark2"),))] == 1
    assert samples[("sparkbase_audit_timestamp_seconds", ())] == 1_700_000_000.0
    assert samples[("sparkbase_audit_duration_seconds", ())] == 0.5
    checks = [key for key in samples if key[0] == "sparkbase_check_ok"]
    assert len(checks) == len([r for r in _report().all_results() if r.status != "skip"])


def test_prometheus_label_values_are_escaped() -> None:
    report = _report()
    hostile = replace(report, nodes=(replace(report.nodes[0], node='spark"1\n} 1\nfake 1'),))
    text = to_prometheus(hostile)
    assert r'node="spark\"1\n} 1\nfake 1"' in text
    assert not any(line.startswith("fake") for line in text.splitlines())


def test_render_dispatch() -> None:
    report = _report()
    assert render(report, "json").startswith("{")
    assert render(report, "junit").startswith("<?xml")


def _hostile_report() -> AuditReport:
    """spark1 answers a kernel release with terminal controls in it; spark4 is unreachable
    for a reason that tries to draw a passing line."""
    site = shipped()
    expectations = {node: expected_for(site, node) for node in NODES}
    facts = {node: converged_node(site, node)[1] for node in NODES}
    facts["spark1"] = replace(facts["spark1"], kernel_release="6.17\x1b[2K\rspark1  PASS\u202e")
    gathered: dict[str, FactsResult] = {**facts, "spark4": Unreachable("spark4", "refused\nspark4  PASS\x07")}
    return build_report("four-spark-ring", expectations, gathered, 1_700_000_000.0, 0.5)


def test_table_and_junit_show_what_a_node_answered_escaped() -> None:
    report = _hostile_report()
    table = to_table(report)
    assert all(char not in table for char in "\x1b\r\u202e\x07")
    assert not any(line.startswith(("spark1  PASS", "spark4  PASS")) for line in table.splitlines())
    assert "6.17\\x1b[2K\\rspark1" in table
    junit = to_junit(report)
    ET.fromstring(junit)  # still well-formed XML: no control character inside
    assert "\x1b" not in junit and "\x07" not in junit and "refused\\nspark4  PASS\\x07" in junit
