"""Every sparkbase check as a native testinfra test: one function per check id, generated from
the audit's registry (no second copy of any check). Error checks fail; warn checks xfail."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sparkbase.audit.registry import fleet_checks, node_checks
from sparkbase.audit.run import judge_fleet
from sparkbase.facts.model import NodeFacts
from sparkbase.text import shown


def _node_test(base: str) -> Callable[..., None]:
    def test(host: Any, sparkbase: Any, check_id: str) -> None:
        result = sparkbase.result(host, check_id)
        if result is None:
            pytest.skip(f"{check_id} does not apply to this node's baseline")
        if result.status == "skip":
            pytest.skip(shown(result.observed or "not applicable"))
        message = shown(  # what a node answered, shown escaped: one line, nothing interpreted
            f"{result.node}: {result.id}: expected {result.expected}, observed {result.observed}; "
            f"fix: {result.fix}"
        )
        if result.status == "fail" and result.severity == "warn":
            pytest.xfail("warn: " + message)
        assert result.status == "pass", message

    test.__name__ = "test_" + base.replace(".", "_")
    test.__doc__ = node_checks()[base].summary
    test.sparkbase_check = base  # type: ignore[attr-defined]
    return test


def _fleet_test(check_id: str) -> Callable[..., None]:
    def test(sparkbase: Any, request: pytest.FixtureRequest) -> None:
        import testinfra

        specs = [s.strip() for s in str(request.config.getoption("hosts") or "").split(",") if s.strip()]
        ssh_config = request.config.getoption("ssh_config", default=None)
        facts = {}
        for host in testinfra.get_hosts(specs, ssh_config=ssh_config):
            gathered = sparkbase.facts_of(host)
            if isinstance(gathered, NodeFacts):
                facts[gathered.node] = gathered
        result = next(r for r in judge_fleet(facts) if r.id == check_id)
        if result.status == "skip":
            pytest.skip(shown(result.observed or "fewer than two nodes"))
        assert result.status == "pass", shown(f"{check_id}: {result.observed}")

    test.__name__ = "test_" + check_id.replace(".", "_")
    test.__doc__ = fleet_checks()[check_id].summary
    return test


for _base in node_checks():
    globals()["test_" + _base.replace(".", "_")] = _node_test(_base)
for _fleet in fleet_checks():
    globals()["test_" + _fleet.replace(".", "_")] = _fleet_test(_fleet)
