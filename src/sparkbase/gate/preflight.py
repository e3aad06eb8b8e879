"""The lane launch gate: qualified only if every node is exactly the host the lane was qualified on.

`preflight` audits the lane's nodes against the lane's baseline, straight from the typed
site, and `gate.refusals.judge` (pure) turns the lane's own reasons and that audit into
every refusal reason (one line each).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from sparkbase.audit.expected import expected_for
from sparkbase.audit.run import AuditReport, run_audit
from sparkbase.audit.runtime import lane_probe, probes_by_node
from sparkbase.gate.refusals import Refusal, judge, lane_refusals
from sparkbase.gate.releases import release_refusals
from sparkbase.model.site import Site
from sparkbase.transport import SshTarget


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

    def where_it_runs(self) -> list[str]:
        """Per node where the lane runs as a container: `NODE: PIDS in container NAME (ID),
        image REF (DIGEST)`, what `runtime.container` found (passed or not)."""
        check = f"runtime.container.{self.lane}"
        return [f"{node.node}: {result.observed}" for node in self.report.nodes for result in node.results
                if result.id == check and result.observed]


def preflight(site: Site, name: str, targets: Mapping[str, SshTarget], parallel: int = 16,
              before_launch: bool = False, releases: bool = True) -> PreflightResult:
    """Audit the lane's nodes against the lane's baseline and decide.

    The lane's processes are judged on every node (what they load, where they run); a node
    where it has none is refused as "not serving" (`lane switch`, `lane status`, a gate in
    front of traffic). `before_launch` is the gate before the lane's units start: a node
    where it runs nowhere is not refused, and any process of it already running is still
    judged. Once the lane has a qualified release, what runs must match one of them
    (`gate.releases`); `releases=False` leaves that out for `qualify`, which is what a
    candidate waits for.
    """
    start = time.monotonic()
    lane = site.lanes[name]
    expectations = {node: expected_for(site, node, lane.baseline) for node in lane.nodes}
    probe = lane_probe(site, name)
    if probe is not None and not before_launch:
        probe = replace(probe, required=True)
    report = run_audit(site.rules.site, expectations, targets, parallel,
                       probes=probes_by_node([(lane.nodes, probe)]))
    return PreflightResult(name, tuple(judge(lane_level(site, name, releases), report)), report,
                           time.monotonic() - start)


def lane_level(site: Site, name: str, releases: bool = True) -> list[Refusal]:
    """The lane's reasons to refuse that need no node (disabled, version, shape, contract)
    and, with `releases`, its qualification (`gate.releases`, read from the site's releases/)."""
    lane = site.lanes[name]
    return [*lane_refusals(site, name, lane), *(release_refusals(site, name) if releases else [])]
