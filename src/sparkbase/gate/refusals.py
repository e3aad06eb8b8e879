"""Why a lane may not launch: reasons in the lane itself, then its nodes', then the fleet's.

`lane_refusals` works out, from the typed site, the reasons that need no node (a disabled
lane, another baseline version, a shape not qualified, a contract breach); `judge` adds the
audit's blocking results; it is pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkbase.audit.run import AuditReport
from sparkbase.model.lanes import Lane
from sparkbase.model.rules import contract_breaches
from sparkbase.model.shapes import SHAPE_NODES
from sparkbase.model.site import Site
from sparkbase.text import shown
from sparkbase.transport import FailureKind


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
        return f"{shown(self.where)}: {shown(self.reason)}"


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


def judge(lane_level: list[Refusal] | tuple[Refusal, ...], report: AuditReport) -> list[Refusal]:
    """`lane_level` reasons first, then every node's blocking result, then the fleet's."""
    refusals = list(lane_level)
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


