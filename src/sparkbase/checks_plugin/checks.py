"""Every sparkbase check as a native testinfra test, from the audit's registry (no second copy
of any check): `test_check` runs once per check id and host, `test_fleet_check` once per fleet
check across the hosts. Error checks fail; warn checks xfail. Collected by the plugin
(`sparkbase.checks_plugin`), which parametrizes them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from sparkbase.audit.run import judge_fleet
from sparkbase.facts.model import NodeFacts
from sparkbase.text import shown

if TYPE_CHECKING:
    from sparkbase.checks_plugin.session import SparkbaseSession


def test_check(host: Any, sparkbase: SparkbaseSession, check_id: str) -> None:
    """One node check (by id) on one host."""
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


def test_fleet_check(
    sparkbase: SparkbaseSession, fleet_check_id: str, request: pytest.FixtureRequest
) -> None:
    """One fleet agreement check across every host."""
    import testinfra

    specs = [s.strip() for s in str(request.config.getoption("hosts") or "").split(",") if s.strip()]
    ssh_config = request.config.getoption("ssh_config", default=None)
    facts = {}
    for host in testinfra.get_hosts(specs, ssh_config=ssh_config):
        gathered = sparkbase.facts_of(host)
        if isinstance(gathered, NodeFacts):
            facts[gathered.node] = gathered
    result = next(r for r in judge_fleet(facts) if r.id == fleet_check_id)
    if result.status == "skip":
        pytest.skip(shown(result.observed or "fewer than two nodes"))
    assert result.status == "pass", shown(f"{fleet_check_id}: {result.observed}")


test_check.sparkbase_checks = "node"  # type: ignore[attr-defined]
test_fleet_check.sparkbase_checks = "fleet"  # type: ignore[attr-defined]
