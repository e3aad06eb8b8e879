"""A node failure's kind travels with it: facts -> audit report (and its JSON) -> preflight
refusal -> deploy result; exit codes stay as they were (3 when a node was not reached)."""

from __future__ import annotations

import json

import pytest
from test_audit_support import converged_node, shipped

from sparkbase.audit.expected import expected_for
from sparkbase.audit.reports import to_json
from sparkbase.audit.run import EXIT_UNREACHABLE, build_report
from sparkbase.deploy.results import NodeResult, NodeStatus, Report
from sparkbase.facts.model import Unreachable
from sparkbase.gate.refusals import judge, lane_refusals
from sparkbase.transport import FailureKind

SITE = shipped()
NODES = ("spark1", "spark2", "spark3", "spark4")
LANE = "dsv41-flash"


@pytest.mark.parametrize("kind", list(FailureKind))
def test_audit_and_preflight_carry_the_kind(kind: FailureKind) -> None:
    baseline = SITE.lanes[LANE].baseline
    expectations = {node: expected_for(SITE, node, baseline) for node in NODES}
    gathered = {node: converged_node(SITE, node, baseline)[1] for node in NODES}
    report = build_report("s", expectations, {**gathered, "spark4": Unreachable("spark4", "why", kind)})
    spark4 = next(node for node in report.nodes if node.node == "spark4")
    assert (spark4.reachable, spark4.failure) == (False, kind)
    assert report.exit_code == EXIT_UNREACHABLE  # every kind: the audit is incomplete
    data = json.loads(to_json(report))
    assert [node["failure"] for node in data["nodes"]] == [None, None, None, str(kind)]
    refusals = judge(lane_refusals(SITE, LANE, SITE.lanes[LANE]), report)
    assert [(r.where, r.failure) for r in refusals] == [("spark4", kind)]


@pytest.mark.parametrize(("kind", "status", "code"), [
    (FailureKind.UNREACHABLE, NodeStatus.UNREACHABLE, 3),
    (FailureKind.HOST_KEY, NodeStatus.UNREACHABLE, 3),
    (FailureKind.AUTH, NodeStatus.UNREACHABLE, 3),
    (FailureKind.TIMEOUT, NodeStatus.UNREACHABLE, 3),
    (FailureKind.COMMAND, NodeStatus.FAILED, 1),
])
def test_connection_kinds_are_unreachable_and_command_failures_fail(
    kind: FailureKind, status: NodeStatus, code: int
) -> None:
    assert kind.connection is (status is NodeStatus.UNREACHABLE)
    report = Report("apply", [NodeResult("spark1", "b", status, failure=kind), NodeResult("spark2", "b")])
    assert report.exit_code() == code
    assert report.to_json()["nodes"][0]["failure"] == str(kind)


class SshResult:
    """What testinfra's OpenSSH backend raises RuntimeError with when ssh exits 255."""

    def __init__(self, stderr: str) -> None:
        self.stderr = stderr


@pytest.mark.parametrize(("stderr", "kind", "words"), [
    ("No ED25519 host key is known for [127.0.0.1]:2302 and you have requested strict checking.\n"
     "Host key verification failed.\n", FailureKind.HOST_KEY, "host key not in known_hosts (refused)"),
    ("@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\nHost key verification failed.\n",
     FailureKind.HOST_KEY, "host key mismatch (refused)"),
    ("ssh: connect to host 127.0.0.1 port 2302: Connection refused\n", FailureKind.UNREACHABLE,
     "ssh failed: ssh: connect to host 127.0.0.1 port 2302: Connection refused"),
])
def test_the_plugin_types_what_openssh_says(stderr: str, kind: FailureKind, words: str) -> None:
    from sparkbase.checks_plugin.session import _openssh_failure

    failure = _openssh_failure(RuntimeError(SshResult(stderr)))
    assert failure.kind is kind and failure.message.startswith(words)
