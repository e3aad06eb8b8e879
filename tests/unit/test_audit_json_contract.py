"""The audit JSON is a contract: its shape is pinned here. Change it only with a format bump."""

from __future__ import annotations

import json
from dataclasses import replace

from test_audit_support import converged_node, shipped

from sparkbase.audit.expected import expected_for
from sparkbase.audit.reports import JSON_FORMAT, to_json
from sparkbase.audit.run import build_report
from sparkbase.facts.model import FactsResult, Unreachable
from sparkbase.transport import FailureKind

NODES = ("spark1", "spark2", "spark3", "spark4")
TOP_KEYS = {
    "format",
    "kind",
    "site",
    "generated_at",
    "elapsed_seconds",
    "status",
    "exit_code",
    "summary",
    "nodes",
    "fleet",
}
SUMMARY_KEYS = {"nodes", "unreachable", "checks", "passed", "failed_error", "failed_warn", "skipped"}
NODE_KEYS = {"node", "baseline", "baseline_version", "reachable", "reason", "failure", "elapsed_seconds",
             "checks"}
CHECK_KEYS = {"id", "area", "severity", "status", "expected", "observed", "fix"}


def _data() -> dict[str, object]:
    site = shipped()
    expectations = {node: expected_for(site, node) for node in NODES}
    facts = {node: converged_node(site, node)[1] for node in NODES}
    gathered: dict[str, FactsResult] = {
        **facts,
        "spark1": replace(facts["spark1"], thp="never"),
        "spark3": Unreachable("spark3", "timed out", FailureKind.TIMEOUT),
    }
    data = json.loads(to_json(build_report("four-spark-ring", expectations, gathered, 1_700_000_000.0, 1.25)))
    assert isinstance(data, dict)
    return data


def test_format_version_is_two() -> None:
    assert JSON_FORMAT == 2
    assert _data()["format"] == 2


def test_top_level_shape() -> None:
    data = _data()
    assert set(data) == TOP_KEYS
    assert data["kind"] == "sparkbase-audit"
    assert data["site"] == "four-spark-ring"
    assert data["generated_at"] == "2023-11-14T22:13:20+00:00"
    assert data["status"] == "unreachable" and data["exit_code"] == 3
    summary = data["summary"]
    assert isinstance(summary, dict) and set(summary) == SUMMARY_KEYS
    assert summary["nodes"] == 4 and summary["unreachable"] == 1
    assert summary["failed_error"] == 2  # spark1 memory.thp + fleet.thp


def test_node_and_check_shape() -> None:
    nodes = _data()["nodes"]
    assert isinstance(nodes, list) and [n["node"] for n in nodes] == list(NODES)
    for node in nodes:
        assert set(node) == NODE_KEYS
        for check in node["checks"]:
            assert set(check) == CHECK_KEYS
            assert check["severity"] in {"error", "warn"}
            assert check["status"] in {"pass", "fail", "skip"}
            assert all(check[k] is None or isinstance(check[k], str) for k in ("expected", "observed", "fix"))
    unreachable = nodes[2]
    assert unreachable["reachable"] is False and unreachable["reason"] == "timed out"
    assert unreachable["failure"] == "timeout" and nodes[0]["failure"] is None
    assert unreachable["checks"] == []
    thp = next(c for c in nodes[0]["checks"] if c["id"] == "memory.thp")
    assert thp == {
        "id": "memory.thp",
        "area": "memory",
        "severity": "error",
        "status": "fail",
        "expected": "madvise",
        "observed": "never",
        "fix": thp["fix"],
    }


def test_fleet_checks_shape() -> None:
    fleet = _data()["fleet"]
    assert isinstance(fleet, list)
    assert {c["id"] for c in fleet} == {
        "fleet.kernel",
        "fleet.page_size",
        "fleet.driver",
        "fleet.nccl_library",
        "fleet.thp",
        "fleet.secure_boot",
        "fleet.governor",
        # added with format 1 kept: new checks are new entries, no key changes meaning
        "fleet.min_free_kbytes",
        "fleet.nvidia_modules",
    }
    assert all(set(c) == CHECK_KEYS for c in fleet)
