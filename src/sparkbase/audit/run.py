"""Run the audit: expectations in, facts gathered once per node, every check, one report."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from sparkbase.audit.checks import fleet_checks, node_checks, planned_checks
from sparkbase.audit.expected import Expected
from sparkbase.audit.registry import CheckResult
from sparkbase.audit.runtime import LaneProbe, container_names, first_matches, runtime_results
from sparkbase.facts.collect import gather_fleet
from sparkbase.facts.model import FactsResult, NodeFacts, Unreachable
from sparkbase.facts.script import FactPlan
from sparkbase.transport import SshTarget
from sparkbase.transport.failure import FailureKind

EXIT_CLEAN = 0
EXIT_DRIFT = 1
EXIT_UNREACHABLE = 3


@dataclass(frozen=True)
class NodeReport:
    """One node's verdicts, or why it could not be audited."""

    node: str
    baseline: str
    baseline_version: str
    reachable: bool
    reason: str | None
    results: tuple[CheckResult, ...]
    elapsed_seconds: float = 0.0
    #: why the node could not be audited (`transport.failure`); None when it was
    failure: FailureKind | None = None

    @property
    def blocking(self) -> list[CheckResult]:
        """Failed error-severity checks."""
        return [r for r in self.results if r.blocking]


@dataclass(frozen=True)
class AuditReport:
    """Every node's results and the fleet's agreement checks."""

    site: str
    started_at: float
    elapsed_seconds: float
    nodes: tuple[NodeReport, ...]
    fleet: tuple[CheckResult, ...] = field(default_factory=tuple)

    def all_results(self) -> list[CheckResult]:
        """Node results then fleet results."""
        return [r for n in self.nodes for r in n.results] + list(self.fleet)

    @property
    def unreachable(self) -> list[NodeReport]:
        """Nodes that could not be asked."""
        return [n for n in self.nodes if not n.reachable]

    @property
    def drift(self) -> bool:
        """Any failed error-severity check."""
        return any(r.blocking for r in self.all_results())

    @property
    def status(self) -> str:
        """`unreachable`, `drift` or `clean`."""
        if self.unreachable:
            return "unreachable"
        return "drift" if self.drift else "clean"

    @property
    def exit_code(self) -> int:
        """3 when a node was unreachable (the audit is incomplete), 1 on drift, else 0."""
        if self.unreachable:
            return EXIT_UNREACHABLE
        return EXIT_DRIFT if self.drift else EXIT_CLEAN


def judge_node(expected: Expected, facts: NodeFacts) -> tuple[CheckResult, ...]:
    """Every node check on one node's facts (pure)."""
    checks = node_checks()
    return tuple(checks[planned.check].run(expected, facts, planned.item, planned.id)
                 for planned in planned_checks(expected))


def judge_fleet(facts: Mapping[str, NodeFacts]) -> tuple[CheckResult, ...]:
    """Every fleet agreement check across the reachable nodes (pure)."""
    results: list[CheckResult] = []
    for check in fleet_checks().values():
        values = {node: check.key(f) for node, f in sorted(facts.items())}
        distinct = {repr(v) for v in values.values()}
        observed = ", ".join(f"{node}={value}" for node, value in values.items())
        if len(values) < 2:
            status, fix = "skip", None
            observed = "fewer than two reachable nodes"
        elif len(distinct) == 1:
            status, fix = "pass", None
        else:
            status = "fail"
            fix = "bring the odd node(s) to the baseline: sparkbase apply --limit NODE"
        results.append(
            CheckResult(
                check.id,
                check.area,
                check.severity,
                None,
                status,  # type: ignore[arg-type]
                "all nodes agree",
                observed,
                fix,
            )
        )
    return tuple(results)


def report_node(expected: Expected, result: FactsResult, probes: Sequence[LaneProbe] = ()) -> NodeReport:
    """A node's report from its facts (or its unreachability); `probes` are the lanes whose
    serving processes are checked there (audit/runtime.py)."""
    version = expected.baseline.version
    if isinstance(result, Unreachable):
        return NodeReport(expected.node, expected.baseline_name, version, False, result.reason, (),
                          failure=result.kind)
    return NodeReport(
        expected.node,
        expected.baseline_name,
        version,
        True,
        None,
        (*judge_node(expected, result), *runtime_results(expected.node, probes, result)),
        result.elapsed_seconds,
    )


Gatherer = Callable[[Mapping[str, SshTarget], Mapping[str, FactPlan], int], dict[str, FactsResult]]


def run_audit(
    site_name: str,
    expectations: Mapping[str, Expected],
    targets: Mapping[str, SshTarget],
    parallel: int = 16,
    gather: Gatherer | None = None,
    probes: Mapping[str, Sequence[LaneProbe]] | None = None,
) -> AuditReport:
    """Gather facts from every expected node (one round trip each) and judge them; with
    `probes`, the same round trip reads each node's serving processes of those lanes."""
    started = time.time()
    clock = time.monotonic()
    plans = {name: expected.plan() for name, expected in expectations.items()}
    if probes:
        plans = {node: replace(plan, serving_matches=first_matches(probes.get(node, ())),
                               serving_containers=container_names(probes.get(node, ())))
                 for node, plan in plans.items()}
    gathered = (gather or gather_fleet)(targets, plans, parallel)
    return build_report(site_name, expectations, gathered, started, time.monotonic() - clock, probes)


def build_report(
    site_name: str,
    expectations: Mapping[str, Expected],
    gathered: Mapping[str, FactsResult],
    started: float = 0.0,
    elapsed: float = 0.0,
    probes: Mapping[str, Sequence[LaneProbe]] | None = None,
) -> AuditReport:
    """The report from facts already gathered (pure)."""
    probes = probes or {}
    nodes = tuple(report_node(expectations[node], gathered[node], probes.get(node, ()))
                  for node in expectations)
    reachable = {node: f for node, f in gathered.items() if isinstance(f, NodeFacts)}
    return AuditReport(site_name, started, elapsed, nodes, judge_fleet(reachable))
