"""The lane launch gate: qualified only if every node is exactly the host the lane was qualified on.

`decide` is pure: a lane, the site, and an audit of the lane's nodes against the lane's
baseline in, every refusal reason out (one line each). `preflight` gathers the audit.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkbase.model.baseline import SHAPE_NODES
from sparkbase.model.rules import contract_breaches

if TYPE_CHECKING:
    from sparkbase.audit.run import AuditReport
    from sparkbase.model.lanes import Lane
    from sparkbase.model.site import Site
    from sparkbase.transport import FailureKind, SshTarget


@dataclass(frozen=True)
class Refusal:
    """One reason the lane may not launch; `where` is a node, `lane` or `fleet`.

    `overridable` is False for a reason `--override` cannot waive: a disabled lane must be
    enabled in reviewed YAML, not launched past the gate.
    """

    where: str
    reason: str
    overridable: bool = True
    #: for a node that could not be audited: why (`transport.failure`)
    failure: FailureKind | None = None

    def line(self) -> str:
        """`spark1: kernel.release: expected …, observed …` style text (one line: the parts
        come from the site and the nodes, and are shown escaped)."""
        from sparkbase.text import shown

        return f"{shown(self.where)}: {shown(self.reason)}"


@dataclass(frozen=True)
class PreflightResult:
    """The gate's verdict."""

    lane: str
    refusals: tuple[Refusal, ...]
    report: AuditReport
    elapsed_seconds: float

    @property
    def qualified(self) -> bool:
        """No reason to refuse."""
        return not self.refusals

    @property
    def blocking_override(self) -> list[Refusal]:
        """Refusals that `--override` cannot waive (a disabled lane)."""
        return [refusal for refusal in self.refusals if not refusal.overridable]


def lane_refusals(site: Site, name: str, lane: Lane) -> list[Refusal]:
    """Reasons in the lane and its baseline alone (no node asked)."""
    refusals: list[Refusal] = []
    if not lane.enabled:
        refusals.append(
            Refusal(
                "lane",
                f"lane {name} is disabled (evaluated and rejected by the site)",
                overridable=False,
            )
        )
    baseline = site.baselines.get(lane.baseline)
    if baseline is None:
        return [*refusals, Refusal("lane", f"no baseline {lane.baseline}")]
    if baseline.version != lane.baseline_version:
        refusals.append(
            Refusal(
                "lane",
                f"qualified on {lane.baseline} {lane.baseline_version}, "
                f"the site has version {baseline.version}",
            )
        )
    if baseline.shape(lane.shape) is None:
        shapes = ", ".join(shape.name for shape in baseline.shapes)
        refusals.append(
            Refusal("lane", f"shape {lane.shape} is not qualified for {lane.baseline} (qualified: {shapes})")
        )
    if len(lane.nodes) != SHAPE_NODES[lane.shape]:
        refusals.append(
            Refusal(
                "lane",
                f"shape {lane.shape} needs {SHAPE_NODES[lane.shape]} nodes, the lane names {len(lane.nodes)}",
            )
        )
    for breach in contract_breaches(site.rules.contract, baseline):
        refusals.append(
            Refusal("lane", f"baseline {lane.baseline} breaks the site contract: {breach.message()}")
        )
    return refusals


def decide(site: Site, name: str, lane: Lane, report: AuditReport) -> list[Refusal]:
    """Every reason to refuse the lane, lane-level first, then per node, then the fleet."""
    refusals = lane_refusals(site, name, lane)
    for node in report.nodes:
        if not node.reachable:
            refusals.append(Refusal(node.node, f"unreachable: {node.reason}", failure=node.failure))
            continue
        for result in node.blocking:
            refusals.append(
                Refusal(node.node, f"{result.id}: expected {result.expected}, observed {result.observed}")
            )
    for result in report.fleet:
        if result.blocking:
            refusals.append(Refusal("fleet", f"{result.id}: nodes disagree ({result.observed})"))
    return refusals


def preflight(site: Site, name: str, targets: Mapping[str, SshTarget], parallel: int = 16) -> PreflightResult:
    """Audit the lane's nodes against the lane's baseline and decide."""
    from sparkbase.audit.expected import expectations
    from sparkbase.audit.run import run_audit
    from sparkbase.audit.runtime import lane_probes

    start = time.monotonic()
    lane = site.lanes[name]
    # the lane's own serving processes, if it already runs: what they load is checked too
    report = run_audit(site.rules.site, expectations(site, lane.nodes, lane.baseline), targets, parallel,
                       probes=lane_probes(site, [name]))
    refusals = decide(site, name, lane, report)
    return PreflightResult(name, tuple(refusals), report, time.monotonic() - start)
