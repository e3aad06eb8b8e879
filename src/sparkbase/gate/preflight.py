"""The lane launch gate: qualified only if every node is exactly the host the lane was qualified on.

`judge` is pure: a lane as the gate sees it (`gate.view.LaneView`: its reasons to refuse
that need no node, worked out once per site by `lane_refusals`) and an audit of its nodes
against its baseline in, every refusal reason out (one line each). `preflight` gathers the
audit from the site's view, so an unchanged site is judged without loading it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkbase.gate.refusals import Refusal, judge

if TYPE_CHECKING:
    from sparkbase.audit.run import AuditReport
    from sparkbase.gate.view import LaneView, SiteView
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


def preflight(view: SiteView, name: str, targets: Mapping[str, SshTarget], parallel: int = 16,
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
    from sparkbase.audit.run import run_audit

    start = time.monotonic()
    lane: LaneView = view.lanes[name]
    report = run_audit(view.site, view.expectations(lane.nodes, lane.baseline), targets, parallel,
                       probes=view.probes([name], required=() if before_launch else [name]))
    return PreflightResult(name, tuple(judge(lane_level(view, name, releases), report)), report,
                           time.monotonic() - start)


def lane_level(view: SiteView, name: str, releases: bool = True) -> list[Refusal]:
    """The lane's reasons to refuse that need no node: those kept in the view (disabled,
    version, shape, contract) and, with `releases`, its qualification (`gate.releases`, read
    from the site's releases/ at every run, never cached)."""
    from sparkbase.gate.releases import release_refusals

    lane = view.lanes[name]
    return [*lane.refusals, *(release_refusals(view.root, lane) if releases else [])]
