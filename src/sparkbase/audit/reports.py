"""Audit reports: a table for people, JSON (a versioned contract), JUnit XML, Prometheus text
(`sparkbase.audit.textfile`).

The JSON shape is pinned by `tests/unit/test_audit_json_contract.py`; bump `JSON_FORMAT`
on any change a consumer could notice.
"""

from __future__ import annotations

import datetime as dt
import json
import xml.etree.ElementTree as ET
from typing import Any

from sparkbase.audit.registry import CheckResult
from sparkbase.audit.run import AuditReport
from sparkbase.console import Column, Table, plain_table
from sparkbase.text import shown

JSON_FORMAT = 2  # 2: nodes[].failure (the typed failure kind)
FORMATS = ("table", "json", "junit", "prometheus")


def _check_json(result: CheckResult) -> dict[str, Any]:
    return {
        "id": result.id,
        "area": result.area,
        "severity": result.severity,
        "status": result.status,
        "expected": result.expected,
        "observed": result.observed,
        "fix": result.fix,
    }


def to_json_data(report: AuditReport) -> dict[str, Any]:
    """The report as the JSON contract's data."""
    results = report.all_results()
    return {
        "format": JSON_FORMAT,
        "kind": "sparkbase-audit",
        "site": report.site,
        "generated_at": dt.datetime.fromtimestamp(report.started_at, dt.UTC).isoformat(),
        "elapsed_seconds": round(report.elapsed_seconds, 3),
        "status": report.status,
        "exit_code": report.exit_code,
        "summary": {
            "nodes": len(report.nodes),
            "unreachable": len(report.unreachable),
            "checks": len(results),
            "passed": sum(r.status == "pass" for r in results),
            "failed_error": sum(r.status == "fail" and r.severity == "error" for r in results),
            "failed_warn": sum(r.status == "fail" and r.severity == "warn" for r in results),
            "skipped": sum(r.status == "skip" for r in results),
        },
        "nodes": [
            {
                "node": node.node,
                "baseline": node.baseline,
                "baseline_version": node.baseline_version,
                "reachable": node.reachable,
                "reason": node.reason,
                "failure": str(node.failure) if node.failure is not None else None,
                "elapsed_seconds": round(node.elapsed_seconds, 3),
                "checks": [_check_json(r) for r in node.results],
            }
            for node in report.nodes
        ],
        "fleet": [_check_json(r) for r in report.fleet],
    }


def to_json(report: AuditReport) -> str:
    """The JSON report text."""
    return json.dumps(to_json_data(report), indent=2) + "\n"


#: the audit table's columns: plain text clips each to its width; rich colours the status
AUDIT_COLUMNS = (
    ("NODE", 10),
    ("STATUS", 11),
    ("CHECK", 36),
    ("EXPECTED", 48),
    ("OBSERVED", 48),
    ("FIX", 200),
)
STATUS_STYLES = {
    "FAIL": "bold red", "UNREACHABLE": "bold red", "WARN": "yellow", "PASS": "green", "SKIP": "dim",
}


def audit_table(report: AuditReport, verbose: bool = False) -> Table:
    """Failures (and with `verbose` every check) as a table, one row per check and node;
    an unreachable node is one row. Cells are text from the site or a node, shown escaped
    when drawn (`sparkbase.console`): one cell cannot break its row or draw another."""
    rows: list[tuple[str, str, str, str, str, str]] = []
    for node in report.nodes:
        if not node.reachable:
            rows.append((node.node, "UNREACHABLE", "reachable", "", "", node.reason or ""))
            continue
        for r in node.results:
            if verbose or r.status == "fail":
                rows.append((node.node, _mark(r), r.id, r.expected or "", r.observed or "", r.fix or ""))
    for r in report.fleet:
        if verbose or r.status == "fail":
            rows.append(("fleet", _mark(r), r.id, r.expected or "", r.observed or "", r.fix or ""))
    columns = tuple(
        Column(
            header,
            max_width=width,
            styles=STATUS_STYLES if header == "STATUS" else {},
            wrap=header not in ("NODE", "STATUS", "CHECK"),
        )
        for header, width in AUDIT_COLUMNS
    )
    return Table(columns, rows, header_when_empty=False)


def summary_line(report: AuditReport) -> str:
    """`clean: 4 node(s), 0 unreachable, 212 checks, 0 failed, 0 warning(s) (0.41s)`."""
    results = report.all_results()
    failed = sum(r.blocking for r in results)
    warned = sum(r.status == "fail" and r.severity == "warn" for r in results)
    return (
        f"{report.status}: {len(report.nodes)} node(s), {len(report.unreachable)} unreachable, "
        f"{len(results)} checks, {failed} failed, {warned} warning(s) "
        f"({report.elapsed_seconds:.2f}s)"
    )


def to_table(report: AuditReport, verbose: bool = False) -> str:
    """The table for people as plain text (`audit_table`), then the summary line."""
    return plain_table(audit_table(report, verbose)) + summary_line(report) + "\n"


def _mark(result: CheckResult) -> str:
    if result.status == "fail":
        return "FAIL" if result.severity == "error" else "WARN"
    return result.status.upper()


def to_junit(report: AuditReport) -> str:
    """JUnit XML: one testsuite per node (and one for the fleet), one testcase per check.
    What a node answered is shown escaped (`sparkbase.text`): XML 1.0 cannot hold control
    characters, and a CI page must not interpret them."""
    suites = ET.Element("testsuites", name="sparkbase-audit")
    groups: list[tuple[str, list[CheckResult], str | None]] = [
        (node.node, list(node.results), None if node.reachable else shown(node.reason or ""))
        for node in report.nodes
    ]
    groups.append(("fleet", list(report.fleet), None))
    for name, results, unreachable in groups:
        suite = ET.SubElement(suites, "testsuite", name=name)
        failures = errors = skipped = 0
        if unreachable is not None:
            case = ET.SubElement(suite, "testcase", classname=f"sparkbase.{name}", name="reachable")
            ET.SubElement(case, "error", message=unreachable).text = unreachable
            errors += 1
        for r in results:
            case = ET.SubElement(suite, "testcase", classname=f"sparkbase.{name}.{r.area}", name=r.id)
            text = "\n".join(
                f"{label}: {shown(value)}"
                for label, value in (("expected", r.expected), ("observed", r.observed), ("fix", r.fix))
            )
            if r.status == "fail":
                tag = "failure"
                failures += 1
                element = ET.SubElement(case, tag, message=shown(f"{r.id}: {r.observed}"), type=r.severity)
                element.text = text
            elif r.status == "skip":
                skipped += 1
                ET.SubElement(case, "skipped", message=shown(r.observed or ""))
        suite.set("tests", str(len(results) + (unreachable is not None)))
        suite.set("failures", str(failures))
        suite.set("errors", str(errors))
        suite.set("skipped", str(skipped))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def render(report: AuditReport, fmt: str, verbose: bool = False) -> str:
    """The report in one of `FORMATS`."""
    if fmt == "json":
        return to_json(report)
    if fmt == "junit":
        return to_junit(report)
    if fmt == "prometheus":
        # only for --format prometheus: prometheus_client takes 0.24 s to import
        from sparkbase.audit.textfile import to_prometheus

        return to_prometheus(report)
    return to_table(report, verbose)
